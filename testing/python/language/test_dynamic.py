"""T.dynamic: symbols in tensor shapes and kernel code, and the errors a misuse gets right after tracing."""

import pytest
import tvm_ffi
from tvm import ir, tirx

import tilelang.language as T
from tilelang.errors import UserError
from tilelang.testing import assert_points_at


def _collect(func, kind):
    out = []
    tvm_ffi.structural_walk(func.body, [(kind, out.append)], order="pre")
    return out


def _thread_extents(func):
    return {a.node.thread_tag: a.value for a in _collect(func, tirx.AttrStmt) if a.attr_key == "thread_extent"}


def _uses(expr, var) -> bool:
    found = []
    tvm_ffi.structural_walk(expr, [(ir.Var, lambda v: found.append(v) if v.same_as(var) else None)])
    return bool(found)


def test_dynamic_is_a_symbol_of_the_given_dtype():
    m = T.dynamic("m")
    assert isinstance(m, tirx.Var) and m.name == "m" and str(m.ty.dtype) == "int32"
    n = T.dynamic("n", "int64")
    assert str(n.ty.dtype) == "int64"
    b, s = T.dynamic("batch, seq_len")
    assert (b.name, s.name) == ("batch", "seq_len") and not b.same_as(s)
    old = T.symbolic("k")  # TileLang's older name
    assert isinstance(old, tirx.Var) and old.name == "k" and str(old.ty.dtype) == "int32"


@pytest.mark.parametrize(
    "name,dtype,message",
    [
        ("batch size", "int32", "'batch size' is not a valid symbol name"),
        ("for", "int32", "'for' is not a valid symbol name"),
        ("m", "float32", "dtype must be int32 or int64, got float32"),
        (3, "int32", "must be a string"),
    ],
)
def test_dynamic_rejects_bad_names_and_dtypes(name, dtype, message):
    with pytest.raises(UserError, match=message):  # raised at the call: the traceback shows the user's line
        T.dynamic(name, dtype)


def test_symbol_appears_in_buffer_shapes_grid_and_index_math():
    M = T.dynamic("m")

    @T.prim_func
    def main(A: T.Tensor((M, 64), "float16"), C: T.Tensor((M, 64), "float16")):
        with T.Kernel(T.ceildiv(M, 128), threads=128) as bx:
            for i, j in T.Parallel(128, 64):
                C[bx * 128 + i, j] = A[T.min(bx * 128 + i, M - 1), j]

    a, c = main.params
    assert a.shape[0].same_as(M) and c.shape[0].same_as(M) and int(a.shape[1]) == 64
    grid = _thread_extents(main)["blockIdx.x"]
    assert _uses(grid, M) and str(grid) == "(m + 128 - 1) // 128"
    (load,) = [ld for ld in _collect(main, ir.TensorLoad) if ld.source.same_as(a)]
    assert _uses(load.indices[0], M)


def test_int64_symbol_gives_int64_grid_and_loop_bounds():
    N = T.dynamic("n", "int64")

    @T.prim_func
    def main(A: T.Tensor((N,), "float32")):
        with T.Kernel(T.ceildiv(N, 256), threads=128) as bx:
            for k in T.serial(T.ceildiv(N, 1024)):
                A[bx * 256 + k] = 0.0

    assert str(_thread_extents(main)["blockIdx.x"].ty.dtype) == "int64"
    (loop,) = _collect(main, tirx.For)
    assert str(loop.extent.ty.dtype) == "int64" and _uses(loop.extent, N)


def test_symbol_in_a_dimension_expression():
    M = T.dynamic("m")

    @T.prim_func
    def main(A: T.Tensor((M,), "float32"), B: T.Tensor((M * 2,), "float32")):
        with T.Kernel(T.ceildiv(M, 128), threads=128) as bx:
            for i in T.Parallel(128):
                B[bx * 128 + i] = A[bx * 128 + i]

    assert str(main.params[1].shape[0]) == "m * 2"


def test_symbol_only_inside_an_expression_names_symbol_tensor_and_line():
    M = T.dynamic("m")
    with pytest.raises(UserError) as info:

        @T.prim_func
        def main(B: T.Tensor((M * 2,), "float32")):
            with T.Kernel(T.ceildiv(M, 128), threads=128) as bx:
                for i in T.Parallel(128):
                    B[bx * 128 + i] = 0.0

    assert_points_at(info, 'def main(B: T.Tensor((M * 2,), "float32")):')

    text = str(info.value)
    assert "symbol 'm' appears in the shape of 'B' only inside the expression m * 2" in text
    assert "whole dimension" in text
    assert 'def main(B: T.Tensor((M * 2,), "float32")):' in text  # the user's line


def test_two_symbols_with_one_name_are_rejected():
    with pytest.raises(UserError, match="two different symbols are named 'm'") as err:

        @T.prim_func
        def main(A: T.Tensor((T.dynamic("m"),), "float32"), B: T.Tensor((T.dynamic("m"),), "float32")):
            with T.Kernel(1, threads=32):
                B[0] = A[0]

    assert_points_at(err, 'def main(A: T.Tensor((T.dynamic("m"),), "float32")')


def test_symbol_used_only_in_the_kernel_body_is_explained():
    M = T.dynamic("m")
    with pytest.raises(UserError) as info:

        @T.prim_func
        def main(A: T.Tensor((1024,), "float32")):
            with T.Kernel(T.ceildiv(M, 128), threads=128) as bx:
                for i in T.Parallel(128):
                    A[bx * 128 + i] = 1.0

    assert_points_at(info, "with T.Kernel(T.ceildiv(M, 128), threads=128) as bx:")  # the line using M

    text = str(info.value)
    assert "'m' is used in the kernel but is not defined there" in text
    assert "whole dimension of some T.Tensor parameter" in text
    assert "test_dynamic.py" in text  # points at the kernel


ROWS = T.dynamic("rows")  # a module-level symbol


def test_a_module_level_symbol_used_only_in_the_body_points_at_its_use():
    with pytest.raises(UserError, match="'rows' is used in the kernel but is not defined there") as info:

        @T.prim_func
        def main(A: T.Tensor((1024,), "float32")):
            with T.Kernel(8, threads=128) as bx:
                for i in T.Parallel(128):
                    if bx * 128 + i < ROWS:
                        A[bx * 128 + i] = 1.0

    assert_points_at(info, "if bx * 128 + i < ROWS:")


def test_a_symbol_without_a_python_name_points_at_the_kernel():
    with pytest.raises(UserError, match="'q' is used in the kernel but is not defined there") as info:

        @T.prim_func
        def main(A: T.Tensor((1024,), "float32")):
            with T.Kernel(T.ceildiv(T.dynamic("q"), 128), threads=128) as bx:
                for i in T.Parallel(128):
                    A[bx * 128 + i] = 1.0

    assert_points_at(info, "@T.prim_func")


@pytest.mark.parametrize("alloc", ["alloc_shared", "alloc_fragment", "alloc_local"])
def test_tiles_of_dynamic_shape_are_rejected_at_the_users_line(alloc):
    M = T.dynamic("m")
    with pytest.raises(UserError) as info:

        @T.prim_func
        def main(A: T.Tensor((M,), "float32")):
            with T.Kernel(1, threads=32):
                s = getattr(T, alloc)((M,), "float32")
                s[0] = A[0]

    assert_points_at(info, 's = getattr(T, alloc)((M,), "float32")')

    text = str(info.value)
    assert f"T.{alloc}: a tile's shape must be known at compile time" in text and "(m,)" in text
    assert "block size" in text and 's = getattr(T, alloc)((M,), "float32")' in text


def test_copy_of_a_whole_dynamic_tensor_into_a_fixed_tile_is_a_shape_error():
    """`m` may not be 128: parsing cannot rule it out, compiling cannot prove it, so it is an error."""
    import tilelang

    M = T.dynamic("m")

    @T.prim_func
    def main(A: T.Tensor((M, 64), "float32")):
        with T.Kernel(1, threads=128):
            s = T.alloc_shared((128, 64), "float32")
            T.copy(A, s)

    with pytest.raises(UserError) as info:
        tilelang.compile(main, target="sm_80")
    assert_points_at(info, "T.copy(A, s)")
    text = str(info.value)
    assert "tile of shape (m, 64)" in text and "(128, 64)" in text and "T.copy(A, s)" in text


def test_copy_with_a_dynamic_global_region():
    M = T.dynamic("m")

    @T.prim_func
    def main(A: T.Tensor((M, 64), "float32"), C: T.Tensor((M, 64), "float32")):
        with T.Kernel(T.ceildiv(M, 128), threads=128) as bx:
            s = T.alloc_shared((128, 64), "float32")
            T.copy(A[bx * 128 : bx * 128 + 128, :], s)
            T.copy(A, C)  # global to global: both tiles are (m, 64)

    calls = [e.value for e in _collect(main, tirx.Evaluate)]
    assert len(calls) == 2 and str(calls[1].args[0].region[0].extent) == "m"


def test_threads_cannot_be_dynamic():
    M = T.dynamic("m")
    with pytest.raises(UserError, match="`threads` must be constant integers, got m") as err:

        @T.prim_func
        def main(A: T.Tensor((M,), "float32")):
            with T.Kernel(1, threads=M):
                A[0] = 1.0

    assert_points_at(err, "with T.Kernel(1, threads=M):")

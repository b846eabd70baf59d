"""Views (`T.reshape`, `T.view`, `T.Tensor(shape, dtype, X.data)`): the IR they declare, the layouts a
view shares with its source, the generated CUDA (nvcc, sm_80 and sm_90a), and the user's mistakes."""

import numpy as np
import pytest
import tvm_ffi
from tvm import ir, tirx

import tilelang
import tilelang.language as T
from tilelang.codegen import cuda
from tilelang.errors import CompilerError, UserError
from tilelang.layout import fragment as fl
from tilelang.layout import layout as sl
from tilelang.layout.evaluate import evaluate, grid
from tilelang.op import base
from tilelang.op import view as view_op
from tilelang.testing import assert_points_at
from tilelang.transform.expand_elementwise_ops import expand_elementwise_ops
from tilelang.transform.infer_layout import FRAGMENT_LAYOUTS, infer_layout
from tilelang.transform.legalize_safe_memory_access import legalize_safe_memory_access

ARCHS = ["sm_80", "sm_90a"]


def _collect(node, kind):
    out = []
    tvm_ffi.structural_walk(node, [(kind, out.append)], order="pre")
    return out


def _decls(func):
    return {d.buffer.name: d for d in _collect(func.body, tirx.DeclBuffer)}


def _view_ops(func):
    return [op for op in (base.parse(s) for s in _collect(func.body, tirx.Evaluate)) if isinstance(op, view_op.View)]


def _compile(func, arch):
    kernel = tilelang.compile(func, target=arch)
    cuda.compile_object(kernel.get_kernel_source(), kernel.target, host_src=kernel.get_host_source())
    return kernel.get_kernel_source()


# ---- the IR a view declares -------------------------------------------------------------------------


def test_views_of_a_global_tensor_share_its_memory():
    @T.prim_func
    def main(A: T.Tensor((8, 4, 16), "float16"), B: T.Tensor((32, 16), "float16")):
        with T.Kernel(1, threads=128):
            flat = T.reshape(A, (32, 16))
            words = T.view(A, shape=(8, 32), dtype="int32")  # two halves per int32
            same = T.Tensor((512,), "float16", A.data)
            for i, j in T.Parallel(32, 16):
                B[i, j] = flat[i, j] + same[i * 16 + j] + T.reinterpret(words[i // 4, 0], "float32")

    decls = _decls(main)
    for name, shape, dtype in (("flat", (32, 16), "float16"), ("words", (8, 32), "int32"), ("same", (512,), "float16")):
        d = decls[name]
        assert tuple(int(n) for n in d.buffer.shape) == shape and str(d.buffer.dtype) == dtype
        assert d.buffer.scope() == "global"
        assert isinstance(d.data, ir.Call) and d.data.op.name == "tirx.buffer_data" and d.data.args[0].name == "A"
        # Declared inside the kernel, so its strides are spelled out: no host-encoded TMA descriptor.
        assert len(d.buffer.strides) == len(shape)
    assert not _view_ops(main)  # global views need no layout bookkeeping


def test_on_chip_views_are_followed_by_a_view_statement():
    @T.prim_func
    def main(A: T.Tensor((64, 64), "float16")):
        with T.Kernel(1, threads=128):
            s = T.alloc_shared((64, 64), "float16")
            f = T.alloc_fragment((64, 64), "float32")
            loc = T.alloc_local((8,), "float16")
            s32 = T.view(s, shape=(64, 32), dtype="float32")
            f3 = T.reshape(f, (64, 8, 8))
            loc2 = T.reshape(loc, (2, 4))
            T.copy(A, s)
            for i, j in T.Parallel(64, 32):
                s32[i, j] = s32[i, j] + f3[i, j // 4, j % 4 + loc2[0, 0]]

    decls = _decls(main)
    assert decls["s32"].buffer.scope() == "shared.dyn" and decls["f3"].buffer.scope() == "local.fragment"
    assert decls["loc2"].buffer.scope() == "local" and len(decls["s32"].buffer.strides) == 0
    pairs = {(op.view.name, op.source.name) for op in _view_ops(main)}
    assert pairs == {("s32", "s"), ("f3", "f")}  # a local array needs none: each thread has it whole
    assert [op.aliases() for op in _view_ops(main) if op.view.name == "f3"][0][0][1].name == "f"


def test_view_defaults_to_the_source_shape_and_dtype():
    @T.prim_func
    def main(A: T.Tensor((16, 16), "float16"), B: T.Tensor((16, 16), "bfloat16")):
        with T.Kernel(1, threads=32):
            as_bf16 = T.view(A, dtype="bfloat16")
            for i, j in T.Parallel(16, 16):
                B[i, j] = as_bf16[i, j]

    d = _decls(main)["as_bf16"].buffer
    assert tuple(int(n) for n in d.shape) == (16, 16) and str(d.dtype) == "bfloat16"


def test_dynamic_global_view_is_checked_symbolically():
    m = T.dynamic("m")

    @T.prim_func
    def main(A: T.Tensor((m, 64), "float16"), B: T.Tensor((m * 64,), "float16")):
        with T.Kernel(T.ceildiv(m * 64, 256), threads=256) as bx:
            flat = T.reshape(A, (m * 64,))
            for i in T.Parallel(256):
                B[bx * 256 + i] = flat[bx * 256 + i]

    assert "flat" in _decls(main)


# ---- the user's mistakes --------------------------------------------------------------------------


def test_size_mismatch_names_both_shapes_and_the_line():
    with pytest.raises(Exception) as info:

        @T.prim_func
        def main(A: T.Tensor((64, 64), "float16")):
            with T.Kernel(1, threads=128):
                bad = T.reshape(A, (64, 32))  # noqa: F841

    text = str(info.value)
    assert "T.reshape: 'A' is (64, 64) float16 (8192 bytes), but the view is (64, 32) float16 (4096 bytes)" in text
    assert "bad = T.reshape(A, (64, 32))" in text


def test_view_with_a_wider_dtype_and_no_shape_suggests_one():
    with pytest.raises(
        Exception,
        match=r"(?s)T.view: 's' is \(4, 8\) float16 \(64 bytes\), but the view is \(4, 8\) "
        r"float32 \(128 bytes\).*shape=\(4, 4\)",
    ):

        @T.prim_func
        def main(A: T.Tensor((3, 4), "float16")):
            with T.Kernel(1, threads=32):
                s = T.alloc_shared((4, 8), "float16")
                d = T.view(s, dtype="float32")  # noqa: F841


def test_dtype_that_does_not_divide_the_tile_is_a_size_mismatch():
    with pytest.raises(Exception, match=r"'s' is \(3, 3\) float16 \(18 bytes\), but the view is \(3, 3\) float32"):

        @T.prim_func
        def main(A: T.Tensor((3, 4), "float16")):
            with T.Kernel(1, threads=32):
                s = T.alloc_shared((3, 3), "float16")
                d = T.view(s, dtype="float32")  # noqa: F841


def test_unprovable_dynamic_sizes_are_refused():
    m, n = T.dynamic("m"), T.dynamic("n")
    with pytest.raises(Exception, match="cannot be proven equal"):

        @T.prim_func
        def main(A: T.Tensor((m, 64), "float16")):
            with T.Kernel(1, threads=32):
                v = T.reshape(A, (n, 64))  # noqa: F841


@pytest.mark.parametrize(
    "make, message",
    [
        (lambda A, s, f: T.view(f, dtype="int32"), "fragment 'f' holds float32 values in registers"),
        (lambda A, s, f: T.reshape(A[0:8, :], (8, 64)), "expected a whole buffer, got a part of 'A'"),
        (lambda A, s, f: T.reshape(s, (0, 64)), "every dimension must be positive"),
        (lambda A, s, f: T.reshape(s, (64, 1.5)), "a shape holds integers"),
        (lambda A, s, f: T.Tensor((32, 16), "float16", s.data), "'s' is (64, 64) float16"),
    ],
)
def test_view_mistakes(make, message):
    with pytest.raises(Exception) as info:

        @T.prim_func
        def main(A: T.Tensor((64, 64), "float16")):
            with T.Kernel(1, threads=128):
                s = T.alloc_shared((64, 64), "float16")
                f = T.alloc_fragment((64, 64), "float32")
                make(A, s, f)

    assert message in str(info.value)


def test_on_chip_view_needs_a_constant_shape():
    # raised at the call: the traceback shows the user's line
    with pytest.raises(UserError, match="a view of shared tile 's' must have a constant shape"):
        n = tirx.Var("n", "int32")
        view_op.declare(tirx.decl_buffer((64,), "float16", "s", scope="shared.dyn"), (n,), None, "T.reshape")


# ---- layouts ------------------------------------------------------------------------------------------


def test_fragment_through_a_reshape_keeps_every_element_in_place():
    frag = fl.partition((16, 32), 64, vector_size=2)
    view = view_op.fragment_through(frag, (16, 4, 8))
    base_t, base_i = frag.tables()
    view_t, view_i = view.tables()  # row-major over both shapes: the same elements in the same order
    assert np.array_equal(base_t, view_t) and np.array_equal(base_i, view_i)
    assert view.vector_size == 2 and view.num_threads == 64
    assert view_op.fragment_through(view, (16, 32)).is_equivalent(frag)
    assert view_op.fragment_through(frag, (16, 32, 1)).vector_size == 1  # a last dimension of 1


def test_shared_layout_through_a_wider_and_a_narrower_dtype():
    src = tirx.decl_buffer((16, 64), "float16", "s", scope="shared.dyn")
    wide = tirx.decl_buffer((16, 32), "float32", "w", scope="shared.dyn")
    narrow = tirx.decl_buffer((16, 128), "int8", "b", scope="shared.dyn")
    swz = sl.swizzle((16, 64), 16, 3)

    def offsets(layout):
        return evaluate(layout.forward, dict(zip(layout.vars, grid(layout.shape)))).reshape(-1)

    base_bytes = offsets(swz) * 2  # byte offset of each fp16 element, row-major
    w = view_op.shared_through(swz, src, wide)
    assert np.array_equal(offsets(w) * 4, base_bytes[0::2])  # an fp32 element starts where its first half does
    n = view_op.shared_through(swz, src, narrow)
    assert np.array_equal(offsets(n)[0::2], base_bytes) and np.array_equal(offsets(n)[1::2], base_bytes + 1)
    assert view_op.shared_through(None, src, wide).name.startswith("linear")
    # A swizzle of 2-byte chunks would split the halves of an fp32 element: no layout for the view.
    split = sl.Layout((16, 64), swz.vars, 16 * 64 - 1 - (swz.vars[0] * 64 + swz.vars[1]), 16 * 64, "reversed")
    assert view_op.shared_through(split, src, wide) is None


def test_layout_inference_gives_a_fragment_view_its_source_layout():
    @T.prim_func
    def main(A: T.Tensor((32, 64), "float32"), B: T.Tensor((32, 8, 8), "float32")):
        with T.Kernel(1, threads=128):
            f = T.alloc_fragment((32, 64), "float32")
            f3 = T.reshape(f, (32, 8, 8))
            T.copy(A, f)
            for i, j, k in T.Parallel(32, 8, 8):
                B[i, j, k] = f3[i, j, k] * 2.0

    func = infer_layout(legalize_safe_memory_access(expand_elementwise_ops(main)))
    layouts = {b.name: fl.from_ir(v) for b, v in func.attrs[FRAGMENT_LAYOUTS].items()}
    assert layouts["f3"].is_equivalent(view_op.fragment_through(layouts["f"], (32, 8, 8)))


# ---- generated code -------------------------------------------------------------------------------------


def _conv_like(n=64):
    """A filter (KH, KW, C, F) read as the matrix (KH * KW * C, F) through a view, by pipelined tiles."""

    @T.prim_func
    def main(W: T.Tensor((3, 3, n, 64), "float16"), O: T.Tensor((64, 64), "float32")):
        with T.Kernel(1, threads=128):
            flat = T.Tensor((9 * n, 64), "float16", W.data)
            s = T.alloc_shared((32, 64), "float16")
            acc = T.alloc_fragment((32, 64), "float32")
            T.clear(acc)
            for k in T.Pipelined(9 * n // 32, num_stages=2):
                T.copy(flat[k * 32, 0], s)
                for i, j in T.Parallel(32, 64):
                    acc[i, j] += s[i, j]
            T.copy(acc, O[0:32, :])

    return main


@pytest.mark.parametrize("arch", ARCHS)
def test_global_view_compiles_and_reads_the_source(arch):
    src = _compile(_conv_like(), arch)
    assert "W_ptr" in src  # the view's loads are loads of W
    # Declared in the kernel, so no TMA descriptor (encoded by the host): cp.async stages the tiles.
    assert "tl::cp_async<16>" in src and "tma_load" not in src


@pytest.mark.parametrize("arch", ARCHS)
def test_shared_view_with_another_dtype_compiles(arch):
    @T.prim_func
    def main(A: T.Tensor((64, 64), "float16"), B: T.Tensor((64, 32), "int32")):
        with T.Kernel(1, threads=128):
            s = T.alloc_shared((64, 64), "float16")
            words = T.view(s, shape=(64, 32), dtype="int32")
            T.copy(A, s)
            for i, j in T.Parallel(64, 32):
                B[i, j] = words[i, j]

    src = _compile(main, arch)
    assert "((int*)" in src  # the tile's bytes read as int32


def test_shared_view_of_a_swizzled_tile_takes_its_swizzle():
    @T.prim_func
    def main(A: T.Tensor((64, 64), "float16"), B: T.Tensor((32, 64), "float32")):
        with T.Kernel(1, threads=128):
            a = T.alloc_shared((64, 64), "float16")
            b = T.alloc_shared((64, 64), "float16")
            acc = T.alloc_fragment((64, 64), "float32")
            v = T.Tensor((32, 64), "float32", b.data)
            T.copy(A, a)
            T.copy(A, b)
            T.gemm(a, b, acc)
            for i, j in T.Parallel(64, 64):
                if i < 32:
                    v[i, j] = acc[i, j]
            T.copy(v, B)

    src = _compile(main, "sm_80")
    stores = [line for line in src.splitlines() if "((float*)buf_dyn_shmem_ptr)" in line and "acc_local" in line]
    assert stores and all("^" in line for line in stores)  # b's swizzle, seen as fp32


def _fragment_reshape():
    @T.prim_func
    def main(A: T.Tensor((64, 64), "float16"), B: T.Tensor((64, 64), "float16"), C: T.Tensor((64, 8, 8), "float32")):
        with T.Kernel(1, threads=128):
            a = T.alloc_shared((64, 64), "float16")
            b = T.alloc_shared((64, 64), "float16")
            s = T.alloc_fragment((64, 64), "float32")
            s3 = T.reshape(s, (64, 8, 8))
            T.copy(A, a)
            T.copy(B, b)
            T.gemm(a, b, s, clear_accum=True)
            for i, j, h in T.Parallel(64, 8, 8):
                C[i, j, h] = s3[i, j, h]

    return main


@pytest.mark.parametrize("arch", ARCHS)
def test_fragment_reshape_reads_the_accumulator_registers(arch):
    src = _compile(_fragment_reshape(), arch)
    body = src[src.index('extern "C" __global__') :]
    assert "s_local" in body and "s3_local" not in body


def test_fragment_view_error_points_at_the_reshape():
    """Until the lowering shares registers, a fragment view is refused at its line (never wrong code)."""
    try:
        tilelang.compile(_fragment_reshape(), target="sm_80")
    except UserError as err:
        assert "fragment 's3' is a view of fragment 's'" in str(err)
        assert "s3 = T.reshape(s, (64, 8, 8))" in str(err)


def _fragment_view_in_a_warp_specialized_loop():
    @T.prim_func
    def main(
        A: T.Tensor((64, 1024), "float16"), B: T.Tensor((1024, 128), "float16"), C: T.Tensor((64, 128), "float32")
    ):
        with T.Kernel(1, threads=128):
            a = T.alloc_shared((64, 64), "float16")
            b = T.alloc_shared((64, 128), "float16")
            s = T.alloc_fragment((64, 128), "float32")
            s3 = T.reshape(s, (64, 16, 8))
            o = T.alloc_fragment((64, 128), "float32")
            o3 = T.reshape(o, (64, 16, 8))
            T.clear(o)
            for k in T.Pipelined(16, num_stages=2):
                T.copy(A[0, k * 64], a)
                T.copy(B[k * 64, 0], b)
                T.gemm(a, b, s, clear_accum=True)
                for i, j, h in T.Parallel(64, 16, 8):
                    o3[i, j, h] += s3[i, j, h]
            T.copy(o, C)

    return main


@pytest.mark.xfail(
    strict=True,
    raises=AssertionError,
    reason="the wgmma waits must count a fragment view as its source",
)
def test_fragment_view_read_waits_for_the_asynchronous_wgmma():
    """sm_90a: the gemm into s runs asynchronously in the consumer loop; reading s through s3 must
    wait for it like reading s does."""
    src = _compile(_fragment_view_in_a_warp_specialized_loop(), "sm_90a")
    body = src[src.index('extern "C" __global__') :]
    issued = body.index("tl::wgmma_ss<")
    first_read = body.index("s_local_ptr", body.index(";", issued))
    assert "tl::wgmma_wait<" in body[issued:first_read]


@pytest.mark.xfail(
    strict=True,
    raises=CompilerError,
    reason="pipeline_loops must version or refuse views of the tiles it multi-buffers",
)
def test_view_of_a_multi_buffered_tile_is_refused():
    @T.prim_func
    def main(A: T.Tensor((256, 64), "float16"), B: T.Tensor((256, 32), "int32")):
        with T.Kernel(1, threads=128):
            s = T.alloc_shared((64, 64), "float16")
            w = T.view(s, shape=(64, 32), dtype="int32")
            for k in T.Pipelined(4, num_stages=2):
                T.copy(A[k * 64, 0], s)
                for i, j in T.Parallel(64, 32):
                    B[k * 64 + i, j] = w[i, j]

    with pytest.raises(UserError, match="'s'.*'w'|'w'.*'s'") as err:
        tilelang.compile(main, target="sm_80")
    assert_points_at(err, 'w = T.view(s, shape=(64, 32), dtype="int32")')

"""apply_global_layouts: a global tensor with a layout from T.annotate_layout is read and written
through it (a flat view of its memory, indexed at the layout's offset); the vector plan then sees the
physical offsets, TMA leaves the tensor alone, and uses that would bypass the layout are UserErrors
at the user's line. Also T.Layout on tensors of millions of elements (proved bijective by TVM's
iterator analysis instead of evaluated point by point)."""

import re
import time

import pytest
from ir_testing import assert_ir_equal
from tvm.script import tirx as tx

import tilelang
import tilelang.language as T
from tilelang.codegen import cuda
from tilelang.errors import UserError
from tilelang.testing import assert_points_at
from tilelang.transform.apply_global_layouts import apply_global_layouts
from tilelang.transform.infer_layout import ANNOTATED_LAYOUTS


def transposed(shape):
    """Element (i, j) stored at j * rows + i: the tensor's memory holds its transpose."""
    return T.Layout(shape, lambda i, j: [j, i])


def interleaved_rows(shape):
    """Rows stored in the order 0, 2, 4, ..., 1, 3, 5, ...: each row stays contiguous."""
    half = shape[0] // 2
    return T.Layout(shape, lambda i, j: [i % 2 * half + i // 2, j])


def test_loads_and_stores_go_through_a_view_at_the_layouts_offset():
    @T.prim_func
    def before(A: T.Tensor((64, 64), "float32"), B: T.Tensor((64, 64), "float32")):
        with T.Kernel(1, threads=128):
            T.annotate_layout({A: transposed((64, 64))})
            for i, j in T.Parallel(64, 64):
                B[i, j] = A[i, j]
            for i, j in T.Parallel(64, 64):
                A[i, j] = B[i, j] * 2.0

    @T.prim_func
    def expected(A: T.Tensor((64, 64), "float32"), B: T.Tensor((64, 64), "float32")):
        with T.Kernel(1, threads=128):
            A_flat = tx.decl_buffer((4096,), "float32", data=A.data)
            for i, j in T.Parallel(64, 64):
                B[i, j] = A_flat[j * 64 + i]
            for i, j in T.Parallel(64, 64):
                A_flat[j * 64 + i] = B[i, j] * T.float32(2.0)

    after = apply_global_layouts(before)
    assert_ir_equal(after, expected)
    assert after.attrs is None or ANNOTATED_LAYOUTS not in after.attrs


def test_kernels_without_a_global_layout_are_left_alone():
    @T.prim_func
    def plain(A: T.Tensor((64, 64), "float32"), B: T.Tensor((64, 64), "float32")):
        with T.Kernel(1, threads=128):
            for i, j in T.Parallel(64, 64):
                B[i, j] = A[i, j]

    @T.prim_func
    def shared_only(A: T.Tensor((64, 64), "float16"), B: T.Tensor((64, 64), "float16")):
        with T.Kernel(1, threads=128):
            S = T.alloc_shared((64, 64), "float16")
            T.annotate_layout({S: tilelang.layout.make_swizzled_layout(S)})
            for i, j in T.Parallel(64, 64):
                S[i, j] = A[i, j]
            for i, j in T.Parallel(64, 64):
                B[i, j] = S[i, j]

    assert apply_global_layouts(plain).same_as(plain)
    assert apply_global_layouts(shared_only).same_as(shared_only)  # shared tiles: lower_tile_ops' work


def _copy_through(layout_fn, target="sm_80"):
    @T.prim_func
    def main(A: T.Tensor((64, 64), "float32"), B: T.Tensor((64, 64), "float32")):
        with T.Kernel(1, threads=128):
            T.annotate_layout({A: layout_fn((64, 64))})
            T.copy(A, B)

    return tilelang.compile(main, target=target).get_kernel_source()


def _body(src):
    return src[src.index("__global__ void __launch_bounds__") :]


def test_vectors_only_where_consecutive_elements_are_adjacent_in_memory():
    # Transposed, consecutive j are 64 elements apart: element by element, at the transposed offset.
    body = _body(_copy_through(transposed))
    assert "float4" not in body
    assert "A_ptr[((((((int)threadIdx.x) & 63) * 64) + (r * 2)) + (((int)threadIdx.x) >> 6))]" in body
    # Rows interleaved, each row contiguous: 128-bit vectors still.
    body = _body(_copy_through(interleaved_rows))
    assert re.search(r"\*\(float4\*\)\(B_ptr \+ .*\) = \*\(float4\*\)\(A_ptr \+", body)


def test_element_atomics_go_through_the_layout():
    @T.prim_func
    def main(A: T.Tensor((64, 64), "float32"), B: T.Tensor((64, 64), "float32")):
        with T.Kernel(1, threads=128):
            T.annotate_layout({A: transposed((64, 64))})
            for i, j in T.Parallel(64, 64):
                T.atomic_add(A[i, j], B[i, j])

    body = _body(tilelang.compile(main, target="sm_80").get_kernel_source())
    transposed_offset = "(((((int)threadIdx.x) & 63) * 64) + (r * 2)) + (((int)threadIdx.x) >> 6)"
    assert f"tl::atomic_add((&(A_ptr[({transposed_offset})]))" in body


def _load_to_shared(pipelined):
    @T.prim_func
    def main(A: T.Tensor((4, 64, 64), "float16"), B: T.Tensor((4, 64, 64), "float16")):
        with T.Kernel(1, threads=128):
            T.annotate_layout({A: T.Layout((4, 64, 64), lambda k, i, j: [k, j, i])})
            S = T.alloc_shared((64, 64), "float16")
            if pipelined:
                for k in T.Pipelined(4, num_stages=2):
                    T.copy(A[k, 0:64, 0:64], S)
                    T.copy(S, B[k, 0:64, 0:64])
            else:
                T.copy(A[0, 0:64, 0:64], S)
                T.copy(S, B[0, 0:64, 0:64])

    return main


@pytest.mark.parametrize("pipelined", [False, True])
def test_copies_of_a_laid_out_tensor_are_not_tma(pipelined):
    # A TMA box reads the tensor as stored: copies stay element-wise (cp.async in a pipeline).
    src = tilelang.compile(_load_to_shared(pipelined), target="sm_90a").get_kernel_source()
    assert "tma_load" not in src and "CUtensorMap" not in src
    assert ("cp_async" in src) == pipelined


@pytest.mark.parametrize("arch", ["sm_80", "sm_90a"])
def test_compiles_with_nvcc(arch):
    kernel = tilelang.compile(_load_to_shared(True), target=arch)
    cuda.compile_object(kernel.get_kernel_source(), kernel.target, host_src=kernel.get_host_source())


def _line_of(text):
    import inspect

    lines, start = inspect.getsourcelines(test_a_bulk_atomic_add_into_a_laid_out_tensor_is_refused)
    return start + next(k for k, line in enumerate(lines) if text in line)


def test_a_bulk_atomic_add_into_a_laid_out_tensor_is_refused():
    @T.prim_func
    def main(A: T.Tensor((64, 64), "float32"), B: T.Tensor((64, 64), "float32")):
        with T.Kernel(1, threads=128):
            T.annotate_layout({A: transposed((64, 64))})
            S = T.alloc_shared((64, 64), "float32")
            T.copy(B, S)
            T.atomic_add(A, S, use_tma=True)  # the bulk add

    with pytest.raises(UserError, match=r"uses global tensor 'A' as it is stored.*drop use_tma=True") as err:
        tilelang.compile(main, target="sm_90a")
    assert_points_at(err, "T.atomic_add(A, S, use_tma=True)  # the bulk add")
    assert f":{_line_of('# the bulk add')}" in str(err.value)


def test_a_view_of_a_laid_out_tensor_is_refused():
    @T.prim_func
    def main(A: T.Tensor((64, 64), "float32"), B: T.Tensor((4096,), "float32")):
        with T.Kernel(1, threads=128):
            T.annotate_layout({A: transposed((64, 64))})
            flat = T.view(A, shape=[4096])
            for i in T.Parallel(4096):
                B[i] = flat[i]

    with pytest.raises(UserError, match=r"views global tensor 'A', which has a layout") as err:
        tilelang.compile(main, target="sm_80")
    assert_points_at(err, "B[i] = flat[i]")  # the view's first use (its declaration has no span)


def test_a_layout_larger_than_the_tensor_is_refused_at_its_line():
    with pytest.raises(UserError, match=r"over 8128 positions, but the tensor has 4096 elements") as err:

        @T.prim_func
        def main(A: T.Tensor((64, 64), "float32")):
            with T.Kernel(1, threads=128):
                T.annotate_layout({A: T.Layout((64, 64), lambda i, j: [i, j * 2])})  # spread out
                for i, j in T.Parallel(64, 64):
                    A[i, j] = 0.0

    assert_points_at(err, "T.annotate_layout({A: T.Layout((64, 64), lambda i, j: [i, j * 2])})")

    assert "# spread out" in str(err.value)


def test_a_layout_for_a_dynamic_tensor_is_refused():
    m = T.dynamic("m")
    with pytest.raises(UserError, match=r"'A' has a dynamic shape") as err:

        @T.prim_func
        def main(A: T.Tensor((m, 64), "float32")):
            with T.Kernel(1, threads=128):
                T.annotate_layout({A: transposed((64, 64))})
                for i, j in T.Parallel(64, 64):
                    A[i, j] = 0.0

    assert_points_at(err, "T.annotate_layout({A: transposed((64, 64))})")


def test_layout_of_a_large_tensor_is_proved_not_evaluated():
    # 2**25 elements: evaluating every point took 100 s; the iterator analysis, well under a second.
    start = time.time()
    lay = T.Layout((8, 1024, 32, 128), lambda b, s, h, d: [b, s // 8, h, d // 8, d % 2, 4 * (s % 8) + d % 8 // 2])
    assert time.time() - start < 2
    assert lay.output_shape == (8, 128, 32, 16, 2, 32) and lay.physical_size == 8 * 1024 * 32 * 128
    # Not an affine map (an XOR): evaluated, and a collision is still found.
    assert T.Layout((64, 64), lambda i, j: [i, (j // 8) ^ (i % 8), j % 8]).output_shape == (64, 8, 8)
    # raised at the call: the traceback shows the user's line
    with pytest.raises(UserError, match="map to the same position"):
        T.Layout((8, 8), lambda i, j: [i, (j // 2) ^ (i % 2)])

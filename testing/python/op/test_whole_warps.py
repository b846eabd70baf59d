"""Ops that run on whole warps (a T.gemm's tensor-core instructions, the warp shuffles of a reduction
across threads) in a kernel whose threads are not a multiple of 32: a UserError naming the user's
`T.Kernel` line, where the threads are set, and the op's line."""

import pytest

import tilelang
import tilelang.language as T
from tilelang.codegen import cuda
from tilelang.errors import UserError
from tilelang.testing import assert_points_at, locations_shown


def _location(marker):
    """(file, line) of the line of this file ending with `marker`."""
    with open(__file__) as f:
        (line,) = [k + 1 for k, text in enumerate(f) if text.rstrip().endswith(marker)]
    return __file__, line


def _gemm(threads):
    @T.prim_func
    def main(A: T.Tensor((64, 64), "float16"), B: T.Tensor((64, 64), "float16"), C: T.Tensor((64, 64), "float32")):
        with T.Kernel(1, threads=threads):  # the gemm's kernel
            A_s = T.alloc_shared((64, 64), "float16")
            B_s = T.alloc_shared((64, 64), "float16")
            C_f = T.alloc_fragment((64, 64), "float32")
            T.copy(A, A_s)
            T.copy(B, B_s)
            T.gemm(A_s, B_s, C_f)  # the gemm
            T.copy(C_f, C)

    return main


def _row_sums(threads):
    @T.prim_func
    def main(A: T.Tensor((64, 64), "float32"), S: T.Tensor((64,), "float32")):
        with T.Kernel(1, threads=threads):  # the reduction's kernel
            A_f = T.alloc_fragment((64, 64), "float32")
            S_f = T.alloc_fragment((64,), "float32")
            T.copy(A, A_f)
            T.reduce_sum(A_f, S_f, dim=1)  # the reduction
            T.copy(S_f, S)

    return main


@pytest.mark.parametrize("arch", ["sm_80", "sm_90a"])
def test_a_gemm_in_a_kernel_of_100_threads_points_at_the_kernel(arch):
    with pytest.raises(UserError) as info:
        tilelang.compile(_gemm(100), target=arch)
    assert_points_at(info, "T.gemm(A_s, B_s, C_f)  # the gemm")
    text = str(info.value)
    assert "T.gemm needs whole warps; the kernel has 100 threads, not a multiple of 32 (use threads=128)" in text
    shown = [(path, line) for path, line, _ in locations_shown(text)]
    kernel_at, gemm_at = _location("# the gemm's kernel"), _location("# the gemm")
    assert kernel_at in shown and gemm_at in shown and shown.index(kernel_at) < shown.index(gemm_at)


@pytest.mark.parametrize("arch", ["sm_80", "sm_90a"])
def test_a_reduction_across_threads_of_100_threads_points_at_the_kernel(arch):
    # 100 threads hold A_f's rows several threads to a row: the row sums need shuffles, whose last warp
    # would have 4 lanes (tl::shfl_xor names all 32).
    with pytest.raises(UserError) as info:
        tilelang.compile(_row_sums(100), target=arch)
    assert_points_at(info, "T.reduce_sum(A_f, S_f, dim=1)  # the reduction")
    text = str(info.value)
    assert "T.reduce_sum(A_f, S_f) combines each row across threads with warp shuffles" in text
    assert "the kernel has 100 threads, not a multiple of 32 (use threads=128)" in text
    shown = [(path, line) for path, line, _ in locations_shown(text)]
    kernel_at, reduce_at = _location("# the reduction's kernel"), _location("# the reduction")
    assert kernel_at in shown and reduce_at in shown and shown.index(kernel_at) < shown.index(reduce_at)


@pytest.mark.parametrize("threads", [64, 128])
def test_whole_warps_compile(threads):
    for factory in (_gemm, _row_sums):
        kernel = tilelang.compile(factory(threads), target="sm_80")
        cuda.compile_object(kernel.get_kernel_source(), kernel.target)

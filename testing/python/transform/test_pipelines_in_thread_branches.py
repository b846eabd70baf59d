"""`T.Pipelined` inside a thread branch (`if tx >= n:`, an else, a warp role written by hand): only the
branch's threads run the loop, so the pipeline takes the cp.async form (TMA loads are issued by
thread 0 or a producer warpgroup that the branch may not hold), its copies are spread over the
branch's threads, and every barrier inside it is a named barrier over those threads
(`sync_thread_branches`), never a `__syncthreads()` that would wait for threads that never come."""

import re

import pytest
import torch

import tilelang
import tilelang.language as T
from tilelang.codegen import cuda
from tilelang.errors import UserError
from tilelang.testing import assert_points_at

M = N = 64
K = 256


def branch_gemm(threads=256, first=128):
    """Threads [first, threads) compute C = A·B over a 2-stage pipeline; the others do nothing."""

    @T.prim_func
    def main(A: T.Tensor((M, K), "float16"), B: T.Tensor((K, N), "float16"), C: T.Tensor((M, N), "float32")):
        with T.Kernel(1, threads=threads):
            A_s = T.alloc_shared((M, 64), "float16")
            B_s = T.alloc_shared((64, N), "float16")
            S = T.alloc_fragment((M, N), "float32")
            if T.get_thread_binding() >= first:
                T.clear(S)
                for k in T.Pipelined(K // 64, num_stages=2):
                    T.copy(A[0, k * 64], A_s)
                    T.copy(B[k * 64, 0], B_s)
                    T.gemm(A_s, B_s, S)
                T.copy(S, C)

    return main


def widened_rows(rows=8, width=1024, block=256):
    """Warp 0 writes row sums of X; warps 1 and 2 (the else) scale bfloat16 rows read into a float32
    tile, a copy that converts and so cannot be a cp.async: the pipeline runs its copies as plain
    loads one iteration ahead, double-buffered."""

    @T.prim_func
    def main(
        X: T.Tensor((rows, width), "bfloat16"),
        w: T.Tensor((rows,), "float32"),
        Y: T.Tensor((rows, width), "float32"),
        s: T.Tensor((rows,), "float32"),
    ):
        with T.Kernel(1, threads=96):
            w_s = T.alloc_shared((rows,), "float32")
            T.copy(w, w_s)
            if T.get_thread_binding() < 32:
                for r in T.serial(rows):
                    acc = T.alloc_var("float32", init=0.0)
                    for j in T.serial(width):
                        acc += X[r, j]
                    s[r] = acc
            else:
                for kb in T.Pipelined(width // block, num_stages=2):
                    xs = T.alloc_shared((rows, block), "float32")
                    xl = T.alloc_fragment((rows, block), "float32")
                    T.copy(X[0, kb * block], xs)
                    T.copy(xs, xl)
                    for r, j in T.Parallel(rows, block):
                        xl[r, j] *= w_s[r]
                    T.copy(xl, Y[0, kb * block])

    return main


def _barriers(src):
    return re.findall(r"__syncthreads\(\)|tl::named_barrier_sync<\d+, \d+>\(\)", src)


def _branch(src, head):
    """The source of the branch opened by `head` (up to its closing brace at the same indent)."""
    start = src.index(head)
    indent = src[src.rindex("\n", 0, start) + 1 : start]
    end = src.index("\n" + indent + "}", start)
    return src[start:end]


@pytest.mark.parametrize("target", ["sm_80", "sm_90a"])
def test_cp_async_pipeline_in_the_else_of_a_branch(target):
    kernel = tilelang.compile(branch_gemm(), out_idx=[2], target=target)
    src = kernel.get_kernel_source()
    branch = _branch(src, "if (128 <= ((int)threadIdx.x)) {")
    # No TMA (thread 0 is not in the branch): cp.async copies by the branch's 128 threads, counted
    # from its first (16 bytes each: 8 of A's and 8 of B's per thread and stage, 4 of each per loop).
    assert "tma_load" not in src and "mbarrier" not in src
    assert branch.count("tl::cp_async<16>") == 4
    assert "((((int)threadIdx.x) >> 3) * 64)" in branch  # 8 threads per 64-element row
    # Each iteration waits for its stage, then a barrier over the branch's 128 threads only.
    loop = branch[branch.index("for (int k = 0; k < 4; ++k) {") :]
    wait_then_barrier = r"\{\s+tl::cp_async_wait<0>\(\);\s+tl::named_barrier_sync<\d+, 128>"
    assert re.match(r"for \(int k = 0; k < 4; \+\+k\) " + wait_then_barrier, loop)
    assert all(b.endswith(", 128>()") for b in _barriers(branch))
    # The block barriers are outside the branch, which every thread reaches.
    assert src[: src.index("if (128 <= ")].rstrip().endswith("__syncthreads();")
    cuda.compile_object(src, kernel.target, host_src=kernel.get_host_source())


@pytest.mark.parametrize("target", ["sm_80", "sm_90a"])
def test_converting_copy_pipelined_in_a_two_warp_branch(target):
    kernel = tilelang.compile(widened_rows(), out_idx=[2, 3], target=target)
    src = kernel.get_kernel_source()
    else_side = src[src.index("} else {") :]
    else_side = else_side[: else_side.index("\n  }\n")]
    assert "cp_async<" not in else_side  # bfloat16 to float32: plain loads and stores
    # Stage (kb + 1) % 2 is filled while stage kb % 2 is read; the barriers count the 64 threads.
    assert "((kb + 1) & 1)" in else_side and "((kb & 1)" in else_side
    barriers = _barriers(else_side)
    assert barriers and all(b.endswith(", 64>()") for b in barriers)
    cuda.compile_object(src, kernel.target, host_src=kernel.get_host_source())


def test_block_barrier_of_the_user_inside_a_branch_is_over_its_threads():
    @T.prim_func
    def main(A: T.Tensor((128,), "float32"), B: T.Tensor((128,), "float32")):
        with T.Kernel(1, threads=256):
            S = T.alloc_shared((128,), "float32")
            tx = T.get_thread_binding()
            if tx >= 128:
                for i in T.Parallel(128):
                    S[i] = A[i]
                T.sync_threads()
                for i in T.Parallel(128):
                    B[i] = S[127 - i]

    src = tilelang.compile(main, target="sm_90a").get_kernel_source()
    branch = _branch(src, "if (128 <= ((int)threadIdx.x)) {")
    assert "__syncthreads" not in branch and re.search(r"tl::named_barrier_sync<\d+, 128>", branch)


def test_barrier_allocated_inside_a_branch_is_still_an_error():
    # Thread 0 initializes T.alloc_barrier's mbarriers: not a branch's code.
    @T.prim_func
    def main(A: T.Tensor((64,), "float32")):
        with T.Kernel(1, threads=256):
            if T.get_thread_binding() >= 128:
                bar = T.alloc_barrier(128)
                T.barrier_arrive(bar)

    with pytest.raises(UserError, match="allocate barriers \\(T.alloc_barrier\\) outside the branch") as err:
        tilelang.compile(main, target="sm_90a")
    assert_points_at(err, "if T.get_thread_binding() >= 128:")


@pytest.mark.gpu
@pytest.mark.parametrize("threads_first", [(256, 128), (384, 256)])
def test_branch_gemm_on_gpu(threads_first):
    kernel = tilelang.compile(branch_gemm(*threads_first), out_idx=[2])
    a = torch.randn(M, K, device="cuda", dtype=torch.float16)
    b = torch.randn(K, N, device="cuda", dtype=torch.float16)
    torch.testing.assert_close(kernel(a, b), a.float() @ b.float(), rtol=1e-3, atol=1e-2)


@pytest.mark.gpu
def test_widened_rows_on_gpu():
    kernel = tilelang.compile(widened_rows(), out_idx=[2, 3])
    x = torch.randn(8, 1024, device="cuda", dtype=torch.bfloat16)
    w = torch.randn(8, device="cuda")
    y, s = kernel(x, w)
    torch.testing.assert_close(y, x.float() * w[:, None])
    torch.testing.assert_close(s, x.float().sum(dim=1), rtol=1e-4, atol=1e-3)

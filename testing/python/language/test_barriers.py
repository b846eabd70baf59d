"""Hand-written warp specialization: T.alloc_barrier, T.barrier_arrive / T.barrier_wait,
T.tma_copy (one thread announces the bytes and issues it; the threads arrive themselves),
T.set_max_nreg, in thread branches. A GEMM whose second warpgroup loads each K step by TMA and
whose first multiplies."""

import re

import pytest
import torch

import tilelang
import tilelang.language as T
from tilelang.codegen import cuda
from tilelang.errors import UserError
from tilelang.testing import assert_points_at


def ws_gemm(M=64, N=64, K=512, block_K=64, stages=2):
    """`stages` buffers of each tile, each with a full barrier (every producer thread, after the
    two copies announced their bytes) and an empty one (every consumer thread)."""

    @T.prim_func
    def main(A: T.Tensor((M, K), "float16"), B: T.Tensor((K, N), "float16"), C: T.Tensor((M, N), "float32")):
        with T.Kernel(1, threads=256):
            A_s = T.alloc_shared((stages, M, block_K), "float16")
            B_s = T.alloc_shared((stages, block_K, N), "float16")
            C_f = T.alloc_fragment((M, N), "float32")
            k_full = T.alloc_barrier([128] * stages)
            k_empty = T.alloc_barrier([128] * stages)
            tx = T.get_thread_binding()
            if tx < 128:
                T.set_max_nreg(240, 1)
                T.clear(C_f)
                for k in T.serial(K // block_K):
                    T.barrier_wait(k_full[k % stages], k // stages % 2)
                    T.gemm(A_s[k % stages, :, :], B_s[k % stages, :, :], C_f)
                    T.barrier_arrive(k_empty[k % stages])
                T.copy(C_f, C)
            else:
                T.set_max_nreg(40, 0)
                for k in T.serial(K // block_K):
                    # Parity 1 on a fresh barrier passes at once: the first round needs no wait.
                    T.barrier_wait(k_empty[k % stages], (k // stages + 1) % 2)
                    T.tma_copy(
                        A[0:M, k * block_K : (k + 1) * block_K], A_s[k % stages, :, :], barrier=k_full[k % stages]
                    )
                    T.tma_copy(
                        B[k * block_K : (k + 1) * block_K, 0:N], B_s[k % stages, :, :], barrier=k_full[k % stages]
                    )
                    T.barrier_arrive(k_full[k % stages])

    return main


@pytest.mark.parametrize("stages", [1, 2])
def test_generated_code(stages):
    kernel = tilelang.compile(ws_gemm(stages=stages), out_idx=[2], target="sm_90a")
    src = kernel.get_kernel_source()
    # Initialized by thread 0 before everyone may use them.
    init = src.index("tl::mbarrier_init")
    assert src.index("__syncthreads();", init) < src.index("if (((int)threadIdx.x) < 128)")
    assert "tl::setmaxnreg_inc<240>();" in src and "tl::setmaxnreg_dec<40>();" in src
    assert "tl::wgmma_ss<64, 64, 64, 1, 1," in src
    # The producer's first thread (thread 128) announces the bytes (no arrival) and issues the
    # copies; then every producer thread arrives on `k_full`.
    producer = src[src.index("} else {") :]
    assert re.search(r"if \(\(\(int\)threadIdx.x\) == 128\) \{\s*tl::mbarrier_expect_tx\(", producer)
    assert "mbarrier_arrive_expect_tx" not in producer
    assert producer.count("tl::tma_load(") == 2
    assert "tl::mbarrier_arrive((&(k_full" in producer
    assert "tl::mbarrier_arrive((&(k_empty" in src
    cuda.compile_object(src, kernel.target)


def test_bad_arguments():
    with pytest.raises(UserError, match="multiple of 8"):  # raised at the call: the traceback shows the user's line
        T.set_max_nreg(100, 1)

    with pytest.raises(UserError, match="positive ints") as err:

        @T.prim_func
        def main(A: T.Tensor((64,), "float32")):
            with T.Kernel(1, threads=128):
                bar = T.alloc_barrier(0)
                T.barrier_arrive(bar)

    assert_points_at(err, "bar = T.alloc_barrier(0)")


@pytest.mark.gpu
@pytest.mark.parametrize("stages", [1, 2])
def test_ws_gemm_on_gpu(stages):
    kernel = tilelang.compile(ws_gemm(stages=stages), out_idx=[2])
    a = torch.randn(64, 512, device="cuda", dtype=torch.float16)
    b = torch.randn(512, 64, device="cuda", dtype=torch.float16)
    torch.testing.assert_close(kernel(a, b), a.float() @ b.float(), rtol=1e-2, atol=1e-2)


def test_barrier_allocated_inside_a_thread_branch_is_an_error():
    @T.prim_func
    def main(A: T.Tensor((64,), "float32")):
        with T.Kernel(1, threads=256):
            if T.get_thread_binding() < 128:
                bar = T.alloc_barrier(128)
                T.barrier_arrive(bar)

    with pytest.raises(UserError, match="outside the branch") as err:
        tilelang.compile(main, target="sm_90a")
    assert_points_at(err, "if T.get_thread_binding() < 128:")


def test_needs_hopper():
    with pytest.raises(UserError, match=r"need Hopper \(sm_90a\); this kernel compiles for sm_80") as err:
        tilelang.compile(ws_gemm(), out_idx=[2], target="sm_80")
    assert_points_at(err, "k_full = T.alloc_barrier([128] * stages)")


def test_proxy_fence_needs_hopper():
    @T.prim_func
    def main(A: T.Tensor((64,), "float32")):
        with T.Kernel(1, threads=64):
            A[T.get_thread_binding()] = 1.0
            T.fence_proxy_async()

    with pytest.raises(UserError, match=r"T.fence_proxy_async need Hopper .* compiles for sm_80") as err:
        tilelang.compile(main, target="sm_80")
    assert_points_at(err, "T.fence_proxy_async()")
    assert "T.fence_proxy_async()" in str(err.value)  # the user's line is shown
    tilelang.compile(main, target="sm_90a")


def _three_warpgroups(producer_registers):
    """Two consumer warpgroups at 240 registers and a producer at `producer_registers`."""

    @T.prim_func
    def main(A: T.Tensor((64,), "float32")):
        with T.Kernel(1, threads=384):
            tx = T.get_thread_binding()
            if tx < 128:
                T.set_max_nreg(240, 1)
                A[tx % 64] = 1.0
            elif tx < 256:
                T.set_max_nreg(240, 1)
                A[tx % 64] = 2.0
            else:
                T.set_max_nreg(producer_registers, 0)

    return main


def test_register_budget():
    # 384 threads are launched with 168 registers each: 504 per thread over the three warpgroups.
    # The error points at a raising warpgroup's T.set_max_nreg line in this file.
    message = r"(?s)240 \+ 240 \+ 32 = 512 registers per thread, more than the 504 \(3 x 168\)"
    where = r".*test_barriers.py:\d+:\d+\n\s*\|\n\d+ \|\s*T.set_max_nreg\(240, 1\)"
    with pytest.raises(UserError, match=message + where) as err:
        tilelang.compile(_three_warpgroups(32), target="sm_90a")
    assert_points_at(err, "T.set_max_nreg(240, 1)")
    tilelang.compile(_three_warpgroups(24), target="sm_90a")


def test_lowering_above_the_launch_count():
    # ptxas rejects a setmaxnreg.dec above the 168 registers a 384-thread block has at most (C7406).
    message = r"(?s)T.set_max_nreg\(176, 0\) lowers .* at most 168 per thread"
    message += r".*test_barriers.py:\d+:\d+\n\s*\|\n\d+ \|\s*T.set_max_nreg\(producer_registers, 0\)"
    with pytest.raises(UserError, match=message) as err:
        tilelang.compile(_three_warpgroups(176), target="sm_90a")
    assert_points_at(err, "T.set_max_nreg(producer_registers, 0)")


def test_set_max_nreg_off_a_warpgroup():
    @T.prim_func
    def main(A: T.Tensor((64,), "float32")):
        with T.Kernel(1, threads=256):
            if T.get_thread_binding() < 64:
                T.set_max_nreg(240, 1)

    with pytest.raises(UserError, match=r"(?s)per warpgroup \(128 threads\), here on threads 0..63.*"
                       r"test_barriers.py:\d+:\d+\n\s*\|\n\d+ \|\s*T.set_max_nreg\(240, 1\)") as err:  # fmt: skip
        tilelang.compile(main, target="sm_90a")
    assert_points_at(err, "T.set_max_nreg(240, 1)")

"""GEMV and split-K examples: each main() against torch on the GPU (small sizes, partial tiles), and
the generated CUDA of each kernel checked and compiled by nvcc for sm_80 and sm_90a on any machine."""

import example_gemm_splitk
import example_gemv
import pytest

import tilelang
from tilelang.codegen import cuda


@pytest.mark.gpu
@pytest.mark.parametrize("prefetch", [False, True])
@pytest.mark.parametrize(
    "N,K,block_N,block_K,threads",
    [
        (1024, 2048, 4, 1024, 128),
        (1001, 1000, 4, 1024, 128),  # partial row block and K step: zeros loaded past the edges
        (512, 4096, 2, 2048, 128),
        (768, 3000, 8, 1024, 256),  # a partial last K step after whole ones
    ],
)
def test_gemv(N, K, block_N, block_K, threads, prefetch):
    example_gemv.main(N, K, block_N, block_K, threads, prefetch)


@pytest.mark.gpu
@pytest.mark.parametrize("combine", ["atomic", "reduce"])
@pytest.mark.parametrize(
    "M,N,K,split_k",
    [
        (32, 1024, 2048, 4),
        (16, 512, 4096, None),  # the split chosen for this GPU's SM count
        (20, 1000, 1000, 3),  # partial tiles in M, N and K; the last split runs past K
        (64, 256, 8192, 16),
    ],
)
def test_gemm_splitk(M, N, K, split_k, combine):
    example_gemm_splitk.main(M, N, K, split_k=split_k, combine=combine)


def test_choose_split_k():
    # 32 x 4096 with 32 x 64 tiles: 64 tiles; 4 splits fill 132 SMs, two blocks each, in one wave.
    assert example_gemm_splitk.choose_split_k(32, 4096, 8192, 32, 64, 128, 132) == 4
    # Enough tiles already: no split.
    assert example_gemm_splitk.choose_split_k(64, 16384, 4096, 64, 64, 128, 132) == 1
    # A short K caps the split at 4 K blocks per split.
    assert example_gemm_splitk.choose_split_k(16, 512, 1024, 16, 64, 128, 132) == 2
    assert [example_gemm_splitk.default_block_m(m) for m in (1, 16, 20, 48, 64, 100)] == [16, 16, 32, 48, 64, 64]


def _compiled_source(func, arch):
    kernel = tilelang.compile(func, out_idx=[-1], target=arch)
    src = kernel.get_kernel_source()
    cuda.compile_object(src, kernel.target)
    return src


@pytest.mark.parametrize("prefetch", [False, True])
@pytest.mark.parametrize("arch", ["sm_80", "sm_90a"])
def test_gemv_generated_cuda(arch, prefetch):
    src = _compiled_source(example_gemv.gemv.factory(4096, 4096, 4, 1024, 128, prefetch), arch)
    # Rows of A read with 128-bit loads, 8 fp16 per thread, and x with the same loads.
    assert "*(uint4*)(A_ptr + " in src and "*(uint4*)(x_ptr + " in src
    # The rows' partial sums: warp shuffles, then across the 4 warps through shared memory.
    assert "tl::shfl_xor" in src and "__syncthreads();" in src
    # With prefetch, the next step's tile goes to a second set of registers (none without it).
    assert ("a_next_local_ptr[r_2] = *(uint4*)(A_ptr + " in src) == prefetch


@pytest.mark.parametrize("arch", ["sm_80", "sm_90a"])
def test_gemm_splitk_atomic_generated_cuda(arch):
    src = _compiled_source(example_gemm_splitk.matmul_splitk.factory(32, 4096, 8192, 32, 64, 128, 4), arch)
    assert src.count("__global__") == 4  # the zeroing kernel and the split-K kernel (declared, defined)
    # Tiles too small for wgmma (32 rows): mma.sync, fed by a cp.async pipeline.
    assert "tl::gemm_ss<32, 64, 128," in src and "tl::cp_async" in src
    assert "tl::atomic_addx2<false>(" in src  # the accumulator's column pairs, one atomic each
    # Split z starts 2048 columns of A, 2048 rows of B (2048 x 4096 elements) further on.
    assert "blockIdx.z) * 2048)" in src and "blockIdx.z) * 8388608)" in src


@pytest.mark.parametrize("combine", ["atomic", "reduce"])
def test_gemm_splitk_64_rows_on_hopper(combine):
    # A 64-row tile: wgmma fed by TMA from a producer warpgroup, its mbarrier protocol checked while
    # it compiles; the partial tile leaves the consumer warpgroup by atomics or to the workspace.
    f = example_gemm_splitk.matmul_splitk.factory(64, 4096, 8192, 64, 64, 128, 4, combine, 128, 3)
    kernel = tilelang.compile(f, out_idx=[-1], target="sm_90a", pass_configs={"tl.check_barrier_protocol": True})
    src = kernel.get_kernel_source()
    assert "tl::wgmma_ss<64, 64, 128," in src and "tl::tma_load" in src
    assert ("tl::atomic_addx2<false>(" in src) == (combine == "atomic")
    cuda.compile_object(src, kernel.target)


@pytest.mark.parametrize("arch", ["sm_80", "sm_90a"])
def test_gemm_splitk_reduce_generated_cuda(arch):
    f = example_gemm_splitk.matmul_splitk.factory(32, 4096, 8192, 32, 64, 128, 4, "reduce")
    src = _compiled_source(f, arch)
    assert src.count("__global__") == 4  # the split-K kernel and the sum over splits
    assert "tl::atomic_add" not in src
    # The workspace, written by the first kernel and read by the second.
    assert src.count("__restrict__ partial_ptr)") == 4

"""FlashAttention examples: each main() against torch on the GPU (small sizes), and the generated
CUDA compiled by nvcc for sm_80 and sm_90a on any machine."""

import example_gqa_fwd_bshd
import example_mha_fwd_bhsd
import example_mha_fwd_bshd
import pytest

import tilelang
from tilelang.codegen import cuda


@pytest.mark.gpu
@pytest.mark.parametrize("is_causal", [False, True])
@pytest.mark.parametrize(
    "seq_len,dim,block_M,block_N,num_stages,threads",
    [
        (256, 64, 64, 64, 1, 128),
        (200, 64, 64, 64, 2, 128),  # not a multiple of the blocks: masked tail
        (384, 128, 128, 64, 2, 256),
        (256, 256, 64, 32, 2, 128),
        (512, 128, 128, 128, 2, 256),
    ],
)
def test_mha_bshd(is_causal, seq_len, dim, block_M, block_N, num_stages, threads):
    example_mha_fwd_bshd.main(2, 3, seq_len, dim, is_causal, block_M, block_N, num_stages, threads)


@pytest.mark.gpu
@pytest.mark.parametrize("is_causal", [False, True])
@pytest.mark.parametrize("seq_q,seq_kv", [(256, 256), (100, 300), (257, 513)])
def test_mha_bhsd(is_causal, seq_q, seq_kv):
    example_mha_fwd_bhsd.main(2, 3, seq_q, seq_kv, 128, is_causal, 128, 64, 2, 256)


@pytest.mark.gpu
@pytest.mark.parametrize("is_causal", [False, True])
def test_gqa_bshd(is_causal):
    example_gqa_fwd_bshd.main(2, 8, 2, 320, 128, is_causal, 128, 64, 2, 256)


@pytest.mark.parametrize("arch", ["sm_80", "sm_90a"])
def test_generated_cuda_compiles(arch):
    f = example_mha_fwd_bshd.flashattn.factory(8, 32, 4096, 128, True, 128, 64, 2, 256)
    k = tilelang.compile(f, out_idx=[3], target=arch, pass_configs={"tl.enable_fast_math": True})
    src = k.get_kernel_source()
    gemm = "tl::wgmma_" if arch == "sm_90a" else "tl::gemm_"  # Hopper's warpgroup MMA, else mma.sync
    assert gemm + "ss<" in src and gemm + "rs<" in src  # Q·Kᵀ from shared, P·V with P in registers
    if arch == "sm_90a":  # K and V loaded by TMA from a producer warpgroup
        assert "tl::tma_load" in src and "tl::setmaxnreg_dec" in src
        # The schedule: P·V of block k - 1 runs on while the softmax of block k waits only for Q·Kᵀ.
        assert "tl::wgmma_wait<1>();" in src
    else:  # K and V prefetched one iteration ahead
        assert "tl::cp_async" in src
    cuda.compile_object(src, k.target, fast_math=True)

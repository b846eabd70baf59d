"""FlashAttention examples: each main() against torch on the GPU (small sizes), and the generated
CUDA compiled by nvcc for sm_80 and sm_90a on any machine."""

import example_gqa_fwd_bshd
import example_mha_bwd
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


@pytest.mark.gpu
@pytest.mark.parametrize("is_causal", [False, True])
@pytest.mark.parametrize("dim", [64, 128])
@pytest.mark.parametrize("heads,head_kv", [(4, 4), (8, 2)])  # MHA, GQA with 4 query heads per key/value head
@pytest.mark.parametrize("dtype", ["float16", "bfloat16"])
def test_mha_bwd(is_causal, dim, heads, head_kv, dtype):
    example_mha_bwd.main(2, heads, head_kv, 256, dim, is_causal, dtype)


@pytest.mark.gpu
@pytest.mark.parametrize("is_causal", [False, True])
@pytest.mark.parametrize(
    "seq_len,block_M,block_N,num_stages,threads",
    [
        (200, 128, 64, 2, 256),  # not a multiple of the blocks: masked query rows, unstored key rows
        (320, 64, 64, 2, 128),  # one warpgroup
        (256, 128, 32, 2, 256),
        (384, 64, 128, 1, 128),  # more queries than keys a step: the causal loop starts mid-block
    ],
)
def test_mha_bwd_blocks(is_causal, seq_len, block_M, block_N, num_stages, threads):
    example_mha_bwd.main(1, 4, 2, seq_len, 128, is_causal, "float16", block_M, block_N, num_stages, threads)


@pytest.mark.parametrize("arch", ["sm_80", "sm_90a"])
@pytest.mark.parametrize("dim,is_causal,groups,dtype", [(128, True, 1, "float16"), (64, False, 4, "bfloat16")])
def test_bwd_generated_cuda_compiles(arch, dim, is_causal, groups, dtype):
    """Every kernel of the backward example, at the benchmark's size, through nvcc."""
    batch, heads, seq_len = 8, 32, 4096
    kernels = [
        (example_mha_bwd.flashattn_fwd, (batch, heads, seq_len, dim, is_causal, groups, dtype), [3, 4]),
        (example_mha_bwd.flashattn_bwd_preprocess, (batch, heads, seq_len, dim, dtype), [2]),
        (example_mha_bwd.flashattn_bwd, (batch, heads, seq_len, dim, is_causal, groups, dtype), [7, 8]),
        (example_mha_bwd.flashattn_bwd_postprocess, (batch, heads, seq_len, dim, dtype), [1]),
    ]
    for jit_fn, args, out_idx in kernels:
        f = jit_fn.factory(*args)
        k = tilelang.compile(f, out_idx=out_idx, target=arch, pass_configs={"tl.enable_fast_math": True})
        src = k.get_kernel_source()
        if jit_fn is example_mha_bwd.flashattn_bwd:
            assert "tl::atomic_add" in src  # dQ's share added into float32
            if arch == "sm_90a":  # Q, dO, LSE and Delta by TMA from a producer warpgroup; wgmma gemms
                assert "tl::tma_load" in src and "tl::setmaxnreg_dec" in src
                assert "tl::wgmma_ss<" in src and "tl::wgmma_rs<" in src  # dV and dK with Pᵀ, dSᵀ in registers
            else:
                assert "tl::cp_async" in src and "tl::gemm_rs<" in src
        cuda.compile_object(src, k.target, fast_math=True)

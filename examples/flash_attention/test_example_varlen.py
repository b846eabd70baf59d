"""The varlen FlashAttention example: main() against torch on the GPU (small sizes), main() on the CPU
target, and the generated CUDA compiled by nvcc for sm_80 and sm_90a on any machine."""

import example_mha_fwd_varlen
import pytest
import torch

import tilelang
from tilelang.codegen import cuda

# Lengths at the edges of the blocks (64 and 128 rows): 1, a block but one, a block, a block and one,
# an empty sequence, several blocks with a partial one.
EDGES = (1, 63, 64, 65, 0, 200, 129)


@pytest.mark.gpu
@pytest.mark.parametrize("is_causal", [False, True])
@pytest.mark.parametrize("dtype", ["float16", "bfloat16"])
@pytest.mark.parametrize("dim", [64, 128])
@pytest.mark.parametrize("heads,kv_heads", [(4, 4), (8, 2)])  # MHA, GQA with 4 query heads per key/value head
def test_varlen(is_causal, dtype, dim, heads, kv_heads):
    example_mha_fwd_varlen.main(EDGES, None, heads, kv_heads, dim, is_causal, dtype, 128, 64, 2, 256)


@pytest.mark.gpu
@pytest.mark.parametrize("is_causal", [False, True])
@pytest.mark.parametrize(
    "seqlens_q,seqlens_k",
    [
        ((1, 100, 37, 300), (1, 100, 37, 300)),
        ((1, 100, 0, 130, 37, 5), (3, 64, 7, 0, 200, 1)),  # more keys, fewer keys (causal: rows that see none), none
        ((1, 1, 1, 1), (1, 17, 256, 1000)),  # one query per sequence, as in decoding
        ((700,), (1500,)),  # one sequence
    ],
)
@pytest.mark.parametrize(
    "block_M,block_N,num_stages,threads",
    [(64, 64, 1, 128), (128, 64, 2, 256), (128, 128, 2, 256), (64, 32, 2, 128)],
)
def test_varlen_lengths(is_causal, seqlens_q, seqlens_k, block_M, block_N, num_stages, threads):
    example_mha_fwd_varlen.main(
        seqlens_q, seqlens_k, 4, 2, 128, is_causal, "float16", block_M, block_N, num_stages, threads
    )


@pytest.mark.parametrize(
    "seqlens_q,seqlens_k,heads,kv_heads,dim,is_causal,dtype",
    [
        ((1, 100, 130, 37), None, 2, 2, 64, False, "float16"),
        ((1, 100, 130, 37), None, 2, 2, 64, True, "float16"),
        ((1, 100, 0, 130, 37, 5), (3, 64, 7, 0, 200, 1), 4, 2, 64, True, "bfloat16"),
        ((65, 1, 0, 64), (1, 70, 5, 64), 4, 1, 128, False, "bfloat16"),
    ],
)
def test_varlen_on_the_cpu(seqlens_q, seqlens_k, heads, kv_heads, dim, is_causal, dtype):
    example_mha_fwd_varlen.main(seqlens_q, seqlens_k, heads, kv_heads, dim, is_causal, dtype, device="cpu")


def test_one_kernel_for_every_packing():
    """The totals are dynamic: one compiled kernel serves packings of other totals (same batch and
    max_seqlen_q), and writes no row of another sequence."""
    with tilelang.use_target("cpu"):
        kernel = example_mha_fwd_varlen.flashattn_varlen(3, 2, 1, 100, 64, True)
        for seqlens_q, seqlens_k in [((100, 3, 50), (100, 3, 50)), ((1, 100, 0), (130, 100, 64))]:
            Q, K, V, cu_q, cu_k = example_mha_fwd_varlen.make_inputs(seqlens_q, seqlens_k, 2, 1, 64, "float16", "cpu")
            expected = example_mha_fwd_varlen.ref_program(Q, K, V, cu_q, cu_k, True)
            torch.testing.assert_close(kernel(Q, K, V, cu_q, cu_k), expected, rtol=1e-2, atol=1e-2)


@pytest.mark.parametrize("arch", ["sm_80", "sm_90a"])
@pytest.mark.parametrize("dim,is_causal,kv_heads,dtype", [(128, True, 8, "float16"), (64, False, 32, "bfloat16")])
def test_generated_cuda_compiles(arch, dim, is_causal, kv_heads, dtype):
    """The benchmark's configuration (8 sequences up to 4096 long, 32 query heads) through nvcc."""
    f = example_mha_fwd_varlen.flashattn_varlen.factory(8, 32, kv_heads, 4096, dim, is_causal, dtype, 128, 64, 2, 256)
    k = tilelang.compile(f, out_idx=[-1], target=arch, pass_configs={"tl.enable_fast_math": True})
    src = k.get_kernel_source()
    gemm = "tl::wgmma_" if arch == "sm_90a" else "tl::gemm_"  # Hopper's warpgroup MMA, else mma.sync
    assert gemm + "ss<" in src and gemm + "rs<" in src  # Q·Kᵀ from shared, P·V with P in registers
    if arch == "sm_90a":  # K and V loaded by TMA from a producer warpgroup, at the sequence's offset
        assert "tl::tma_load" in src and "tl::setmaxnreg_dec" in src
        assert "tl::wgmma_wait<1>();" in src  # P·V of block k - 1 beside the softmax of block k
    else:  # K and V prefetched one iteration ahead
        assert "tl::cp_async" in src
    assert "< q_rows)" in src  # the store of the block's rows is per row: the rest are another sequence's
    cuda.compile_object(src, k.target, fast_math=True)

"""Sparse-attention examples (block-sparse attention, NSA's selected-block branch): each main() against
its float32 torch reference on the GPU (small sizes: densities 0, 0.3 and 1, unused slots, lengths
that are not a multiple of the blocks) and on the CPU target (numbers, in CI), and the generated CUDA
checked and compiled by nvcc for sm_80 and sm_90a on any machine."""

import example_blocksparse_attention
import example_nsa_fwd
import pytest

import tilelang
from tilelang.codegen import cuda


@pytest.mark.gpu
@pytest.mark.parametrize("density", [0.0, 0.3, 1.0])
@pytest.mark.parametrize("is_causal", [False, True])
@pytest.mark.parametrize(
    "seq_len,dim,block_M,block_N,num_stages,threads,dtype",
    [
        (256, 64, 64, 64, 1, 128, "float16"),
        (200, 64, 64, 64, 2, 128, "bfloat16"),  # not a multiple of the blocks: masked tail
        (384, 128, 128, 64, 2, 256, "float16"),
        (512, 128, 128, 128, 2, 256, "bfloat16"),
    ],
)
def test_blocksparse_attention(density, is_causal, seq_len, dim, block_M, block_N, num_stages, threads, dtype):
    example_blocksparse_attention.main(2, 3, seq_len, dim, density, is_causal, block_M, block_N, num_stages, threads,
                                       dtype)  # fmt: skip


@pytest.mark.gpu
@pytest.mark.parametrize("unused", [0.0, 0.3, 1.0])  # 1.0: no slot used, every output zero
@pytest.mark.parametrize(
    "heads,kv_heads,seq_len,dim,selected_blocks,block_size,dtype",
    [
        (64, 4, 1024, 128, 16, 64, "float16"),  # NSA's shape: 16 query heads a key/value head
        (16, 2, 300, 64, 4, 32, "bfloat16"),  # group 8 padded to 16 rows; a partial last block
        (32, 1, 256, 128, 8, 64, "bfloat16"),  # group 32: two mma tiles of rows; more slots than blocks
    ],
)
def test_nsa_fwd(unused, heads, kv_heads, seq_len, dim, selected_blocks, block_size, dtype):
    block_H = max(16, heads // kv_heads)
    example_nsa_fwd.main(2, heads, kv_heads, seq_len, dim, selected_blocks, block_size, unused, block_H, dtype=dtype)


@pytest.mark.parametrize("density", [0.0, 0.3, 1.0])
def test_blocksparse_attention_on_the_cpu(density):
    example_blocksparse_attention.main(1, 2, 200, 64, density, True, device="cpu")  # causal, a partial tail
    example_blocksparse_attention.main(1, 2, 128, 64, density, False, device="cpu")


def test_nsa_fwd_on_the_cpu():
    # Group 4 padded to 16 rows; a quarter of the slots unused (-1 or seq_len); a partial last block.
    example_nsa_fwd.main(1, 8, 2, 100, 64, 3, 16, unused=0.25, device="cpu")


def _compiled_source(jit_fn, arch, args, out_idx):
    kernel = tilelang.compile(
        jit_fn.factory(*args), out_idx=out_idx, target=arch, pass_configs={"tl.enable_fast_math": True}
    )
    src = kernel.get_kernel_source()
    cuda.compile_object(src, kernel.target, fast_math=True)
    return src


@pytest.mark.parametrize("arch", ["sm_80", "sm_90a"])
def test_blocksparse_generated_cuda(arch):
    # The benchmark's size: b8 h32 s4096 d128, causal, 128 x 64 blocks.
    src = _compiled_source(example_blocksparse_attention.blocksparse_attention, arch,
                           (8, 32, 4096, 128, True, 128, 64, 2, 256), [5])  # fmt: skip
    # One trip per kept key block (the loop runs to the block's count), no condition in the body.
    assert "< BlockCounts_ptr[" in src and "BlockMask" not in src
    if arch == "sm_90a":  # K and V by TMA from a producer warpgroup; Q·Kᵀ of a block beside P·V of the last
        assert "tl::tma_load" in src and "tl::setmaxnreg_dec" in src and "tl::wgmma_wait<1>();" in src
        assert "tl::wgmma_ss<" in src and "tl::wgmma_rs<" in src
    else:  # the next kept block's K and V prefetched by cp.async
        assert "tl::cp_async<" in src and "tl::gemm_ss<" in src and "tl::gemm_rs<" in src


@pytest.mark.parametrize("arch", ["sm_80", "sm_90a"])
def test_nsa_generated_cuda(arch):
    # NSA's shape: b2, 64 query heads over 4 key/value heads, s8192, d128, 16 slots of 64 keys.
    src = _compiled_source(example_nsa_fwd.nsa_fwd, arch, (2, 64, 4, 8192, 128, 16, 64, 16, 2, 32), [4])
    # The group's 16 heads as the M dimension of one warp's mma tiles, P in registers for P·V.
    assert "tl::gemm_ss<16, 64, 128, 1, 1," in src and "tl::gemm_rs<16, 128, 64, 1, 1," in src
    # Each slot's block number read from the table, and its K and V gathered a slot ahead by cp.async.
    assert "BlockIndices_ptr[" in src and "tl::cp_async<" in src

"""Flash-decoding example: main() against the fp32 torch reference on the GPU (small sizes: lengths of
1, page-size multiples and not, sequences shorter than the split count; group 1, 4 and 8) and on the
CPU target (numbers, in CI), and the generated CUDA checked and compiled by nvcc for sm_80 and sm_90a
on any machine."""

import example_flash_decoding
import pytest

import tilelang
from tilelang.codegen import cuda


@pytest.mark.gpu
@pytest.mark.parametrize(
    "seqlens,heads,kv_heads,page_size,num_splits",
    [
        ((1, 64, 65, 1000), 32, 8, 64, None),  # group 4, the split choose_num_splits picks
        ((4096, 1, 127, 3000), 8, 8, 64, 4),  # group 1 (MHA); a 1-token sequence leaves 3 splits empty
        ((5, 300, 2049), 16, 2, 16, 8),  # group 8, 16-token pages (4 a step); 5 tokens: 1 step, 8 splits
        ((777,), 32, 8, 64, 16),  # one sequence: 13 steps over 16 splits (1 a split, 3 left empty)
        ((8191, 64, 1), 32, 4, 32, 5),  # 32-token pages, 2 a step; a split count that divides no step count
        ((100, 3000), 32, 8, 128, 3),  # 128-token pages: a step of 128 tokens
    ],
)
def test_flash_decoding(seqlens, heads, kv_heads, page_size, num_splits):
    example_flash_decoding.main(seqlens, heads, kv_heads, 128, page_size, num_splits)


@pytest.mark.gpu
@pytest.mark.parametrize("page_size", [16, 64])
def test_flash_decoding_64_rows(page_size):
    # The group's rows padded to 64 (wgmma and a TMA producer on Hopper), group 4 and 8.
    example_flash_decoding.main((1, 65, 1000, 4097), 32, 8, 128, page_size, 7, block_H=64)
    example_flash_decoding.main((3, 2000), 64, 8, 128, page_size, None, block_H=64)


def test_flash_decoding_on_the_cpu():
    # Group 4 with splits: a 1-token sequence, a page and one token, and a length that is a multiple of
    # neither the page nor the split.
    # 16-token pages, 4 a step (the last step of a sequence reads table entries past its pages).
    example_flash_decoding.main(
        (1, 17, 100, 200), heads=8, kv_heads=2, dim=64, page_size=16, num_splits=3, device="cpu"
    )


def test_choose_num_splits():
    # B=1, 8 KV heads, 132 SMs: 33 splits fill the SMs twice (264 blocks).
    assert example_flash_decoding.choose_num_splits(1, 8, 65536, 132) == 33
    # B=64: 512 blocks without a split already.
    assert example_flash_decoding.choose_num_splits(64, 8, 65536, 132) == 1
    # A short sequence caps the split at 4 steps of 64 tokens per split.
    assert example_flash_decoding.choose_num_splits(1, 8, 512, 132) == 2


def _compiled_source(arch, *args, **pass_configs):
    f = example_flash_decoding.flash_decoding.factory(*args)
    kernel = tilelang.compile(f, out_idx=[-1], target=arch, pass_configs=pass_configs)
    src = kernel.get_kernel_source()
    cuda.compile_object(src, kernel.target, host_src=kernel.host_source)
    return src


@pytest.mark.parametrize("arch", ["sm_80", "sm_90a"])
def test_generated_cuda(arch):
    # B=8, H=32, H_kv=8, D=128, 64-token pages, 4096 pages in the pool, 1024 pages a sequence, 16 splits.
    src = _compiled_source(arch, 8, 32, 8, 128, 64, 4096, 1024, 16)
    assert src.count("__global__") == 4  # the split kernel and the combine (declared, defined)
    # The page's physical index comes from the block table, and the page is copied ahead by cp.async
    # (16-row tiles are mma.sync, without a producer warpgroup on Hopper either).
    assert "block_table_ptr[" in src and "tl::cp_async<" in src
    # The group's 4 heads padded to 16 rows: mma.sync tiles for Q·Kᵀ and P·V over 4 warps, FullCol.
    assert "tl::gemm_ss<16, 64, 128, 1, 4," in src and "tl::gemm_ss<16, 128, 64, 1, 4," in src
    # The scores past the sequence's end are masked on the last page.
    assert "-CUDART_INF_F" in src


def test_generated_cuda_64_rows_on_hopper(caplog):
    # block_H = 64: wgmma for both products, fed by a TMA producer warpgroup whose tile coordinates are
    # the page index read from the table. tl.check_barrier_protocol simulates one block: the trip count
    # comes from cache_seqlens, a tensor it does not know, so it says it skips the kernel (no error).
    with caplog.at_level("WARNING", logger="tilelang"):
        src = _compiled_source("sm_90a", 8, 32, 8, 128, 64, 4096, 1024, 16, 64, **{"tl.check_barrier_protocol": True})
    assert "not checked: loop" in caplog.text and "read from memory" in caplog.text
    assert "tl::wgmma_ss<64, 64, 128," in src and "tl::wgmma_ss<64, 128, 64," in src
    assert "tl::tma_load(K_cache_tma0" in src and "tl::tma_load(V_cache_tma1" in src
    assert "= block_table_ptr[" in src


@pytest.mark.parametrize("arch", ["sm_80", "sm_90a"])
def test_generated_cuda_small_pages(arch):
    # 16-token pages, 4 a step: four copies per step, each page's index from the table.
    src = _compiled_source(arch, 3, 16, 2, 128, 16, 600, 200, 8)
    assert "tl::gemm_ss<16, 64, 128, 1, 4," in src and src.count("block_table_ptr[") >= 4

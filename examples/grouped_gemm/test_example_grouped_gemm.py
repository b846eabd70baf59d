"""Grouped GEMM example: main() against a loop of torch.matmul on the GPU (small sizes, uneven and
empty experts) and on the CPU target (numbers, in CI), and the generated CUDA checked and compiled by
nvcc for sm_80 and sm_90a on any machine."""

import example_grouped_gemm
import pytest
from grouped_common import edge_sizes, group_sizes

import tilelang
from tilelang.codegen import cuda


@pytest.mark.gpu
@pytest.mark.parametrize(
    "E,N,K,tokens,skew,empty,block_M,block_N",
    [
        (4, 256, 512, 1000, 1.0, 1, 128, 256),
        (16, 384, 256, 300, 1.0, 4, 128, 256),  # most experts under a tile; a partial N tile
        (8, 512, 1000, 4096, 0.0, 0, 128, 256),  # even split, whole tiles; a partial last K step
        (64, 256, 512, 2048, 1.5, 8, 64, 128),  # many small experts, 64-row tiles
        (8, 256, 256, 37, 1.0, 2, 128, 256),  # fewer tokens than one tile
    ],
)
def test_grouped_gemm(E, N, K, tokens, skew, empty, block_M, block_N):
    example_grouped_gemm.main(E, N, K, tokens, skew, empty, block_M, block_N)


def test_grouped_gemm_on_the_cpu():
    # Both splits of main(): the edge sizes (0, 1, 63, 64, 65, 131 rows) and a skewed one with an
    # empty expert; a partial N tile and a partial last K step.
    example_grouped_gemm.main(E=8, N=192, K=160, total_tokens=700, block_M=64, block_N=64, device="cpu")


def test_group_sizes():
    sizes = group_sizes(64, 4096, skew=1.0, empty=8)
    assert sum(sizes) == 4096 and sizes.count(0) >= 8 and len(sizes) == 64
    assert max(sizes) > 4 * 4096 // 64  # skewed: the busiest expert has several times the mean
    assert group_sizes(8, 4096, skew=0.0) == [512] * 8
    assert edge_sizes(8, 128) == [0, 1, 127, 128, 129, 259, 0, 1]


def _compiled_source(arch, *args, **pass_configs):
    kernel = tilelang.compile(
        example_grouped_gemm.grouped_gemm.factory(*args), out_idx=[-1], target=arch, pass_configs=pass_configs
    )
    src = kernel.get_kernel_source()
    cuda.compile_object(src, kernel.target, host_src=kernel.host_source)
    return src


def _check_common(src, E):
    assert src.count("__global__") == 4  # the table kernel and the GEMM (declared, defined)
    # The token count is a run-time argument of both kernels (one compiled kernel for every split).
    assert src.count("int total_tokens)") == 4
    # Each block reads its tile's expert and first row from the table, and skips padding entries.
    assert "= tile_expert_ptr[((int)blockIdx.y)];" in src and "= tile_row_ptr[((int)blockIdx.y)];" in src
    # The store is masked to the expert's rows.
    assert ") < rows)" in src


def test_generated_cuda_sm90a():
    # wgmma over two consumer warpgroups fed by TMA from a producer warpgroup, its mbarrier protocol
    # checked while it compiles; B's tile is addressed by (k, n, expert).
    src = _compiled_source("sm_90a", 8, 4096, 4096, **{"tl.check_barrier_protocol": True})
    _check_common(src, 8)
    assert "tl::wgmma_ss<128, 256, 64," in src and "__launch_bounds__(384, 1)" in src
    assert "tl::tma_load(A_tma0" in src and "(((int)blockIdx.x) * 256), e_p);" in src


def test_generated_cuda_sm90a_64_rows():
    src = _compiled_source("sm_90a", 64, 2048, 2048, 64, 128, 64, 128, 4)
    _check_common(src, 64)
    assert "tl::wgmma_ss<64, 128, 64," in src and "tl::tma_load" in src


def test_generated_cuda_sm80():
    # mma.sync fed by a cp.async pipeline; A's rows past the end of A are zero-filled (the guard on
    # total_tokens), B's tile starts at expert e's N x K matrix.
    src = _compiled_source("sm_80", 8, 4096, 4096, 128, 128, 32, 128, 3)
    _check_common(src, 8)
    assert "tl::gemm_ss<128, 128, 32," in src and "tl::cp_async<16>" in src
    assert "row0) < total_tokens)" in src and "B_ptr[(((((e * 16777216)" in src

"""Convolution example: main() against torch on the GPU (strides, dilation, padding, partial tiles of
output pixels, taps x channels and filters) and on the CPU target; the generated CUDA checked and
compiled by nvcc for sm_80 and sm_90a on any machine."""

import example_convolution
import pytest

import tilelang
from tilelang.codegen import cuda

# (N, C, H, W, F, K, S, D, P)
SHAPES = [
    (2, 64, 16, 16, 128, 3, 1, 1, 1),  # whole tiles: 512 pixels, 576 taps x channels, 128 filters
    (2, 32, 15, 13, 72, 3, 2, 1, 1),  # stride 2: 112 pixels, 288 taps x channels, 72 filters (all partial)
    (1, 16, 12, 12, 48, 3, 1, 2, 2),  # dilation 2, padding 2
    (3, 24, 9, 9, 40, 1, 1, 1, 0),  # 1 x 1, no padding: one K step, partial
    (2, 24, 10, 10, 64, 5, 1, 1, 0),  # 5 x 5: C = 24, so a K step spans taps
    (2, 3, 32, 32, 64, 7, 2, 1, 3),  # a ResNet stem: 3 channels, gathered one at a time
]


@pytest.mark.gpu
@pytest.mark.parametrize("N, C, H, W, F, K, S, D, P", SHAPES)
def test_convolution(N, C, H, W, F, K, S, D, P):
    example_convolution.main(N, C, H, W, F, K, S, D, P)


@pytest.mark.gpu
@pytest.mark.parametrize(
    "block_M, block_N, block_K, stages, threads",
    [
        (64, 64, 32, 2, 128),  # one warpgroup: wgmma of 64 rows on sm_90a
        (128, 256, 64, 3, 256),  # wider than F: half the filters' columns are zeros past the edge
        (128, 128, 32, 4, 128),
        (128, 128, 64, 1, 256),  # not pipelined: the gather is a synchronous load
    ],
)
def test_convolution_tiles(block_M, block_N, block_K, stages, threads):
    example_convolution.main(2, 32, 15, 13, 72, 3, 2, 1, 1, block_M, block_N, block_K, stages, threads)


@pytest.mark.parametrize(
    "sizes",
    [
        dict(N=2, C=32, H=15, W=13, F=72, K=3, S=2, P=1),
        dict(N=1, C=16, H=12, W=12, F=48, K=3, D=2, P=2),
        dict(N=3, C=24, H=9, W=9, F=40, K=1, P=0),
        dict(N=1, C=3, H=16, W=16, F=16, K=7, S=2, P=3),
        dict(N=2, C=8, H=7, W=7, F=8, K=3, block_M=64, block_N=64, block_K=32, stages=2, threads=128),
    ],
)
def test_convolution_on_the_cpu(sizes):
    example_convolution.main(**sizes, device="cpu")


def _compiled_source(arch, shape, tiles=(128, 128, 64, 3, 256)):
    func = example_convolution.conv2d.factory(*shape, *tiles)
    kernel = tilelang.compile(func, out_idx=[-1], target=arch)
    src = kernel.get_kernel_source()
    cuda.compile_object(src, kernel.target, host_src=kernel.host_source)
    return src


@pytest.mark.parametrize("arch", ["sm_80", "sm_90a"])
@pytest.mark.parametrize("shape", [(128, 128, 64, 64, 128, 3, 1, 1, 1), (2, 32, 15, 13, 72, 3, 2, 1, 1)])
def test_generated_cuda(arch, shape):
    src = _compiled_source(arch, shape)
    # The gather of 8 channels (16 bytes) per thread and the filters' tile, both issued ahead by cp.async.
    assert "tl::cp_async<16>(" in src and "(&(data_ptr[" in src and "(&(weight_ptr[" in src
    assert "tl::cp_async_wait<" in src
    # 128 x 128 x 64 tiles: two warpgroups of wgmma on sm_90a, 8 warps of mma.sync on sm_80.
    gemm = "tl::wgmma_ss<128, 128, 64," if arch == "sm_90a" else "tl::gemm_ss<128, 128, 64,"
    assert gemm in src


def test_generated_cuda_without_pipeline():
    src = _compiled_source("sm_80", (2, 64, 16, 16, 128, 3, 1, 1, 1), (128, 128, 64, 1, 256))
    # One stage: the gather is a synchronous 128-bit load per 8 channels, zeros in the padding.
    assert "tl::cp_async" not in src and "*(uint4*)(data_ptr + " in src

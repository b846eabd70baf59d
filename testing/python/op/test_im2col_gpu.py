"""`T.im2col` convolutions against torch.conv2d on random inputs (GPU): strides, dilation, padding,
and sizes that leave partial tiles (output pixels, filter taps x channels, filters)."""

import pytest
import torch

import tilelang
import tilelang.language as T

pytestmark = pytest.mark.gpu


@tilelang.jit(out_idx=[-1])
def conv2d(N, C, H, W, F, K, S, D, P, block_M=64, block_N=64, block_K=32, stages=3, threads=128):
    OH = (H + 2 * P - D * (K - 1) - 1) // S + 1
    OW = (W + 2 * P - D * (K - 1) - 1) // S + 1

    @T.prim_func
    def main(
        data: T.Tensor((N, H, W, C), "float16"),
        kernel: T.Tensor((K, K, C, F), "float16"),
        out: T.Tensor((N, OH, OW, F), "float16"),
    ):
        with T.Kernel(T.ceildiv(F, block_N), T.ceildiv(N * OH * OW, block_M), threads=threads) as (bx, by):
            data_shared = T.alloc_shared((block_M, block_K), "float16")
            kernel_shared = T.alloc_shared((block_K, block_N), "float16")
            out_local = T.alloc_fragment((block_M, block_N), "float32")
            kernel_flat = T.Tensor((K * K * C, F), "float16", kernel.data)
            out_flat = T.Tensor((N * OH * OW, F), "float16", out.data)
            T.clear(out_local)
            for k in T.Pipelined(T.ceildiv(K * K * C, block_K), num_stages=stages):
                T.im2col(data, data_shared, by, k, K, S, D, P)
                T.copy(kernel_flat[k * block_K, bx * block_N], kernel_shared)
                T.gemm(data_shared, kernel_shared, out_local)
            T.copy(out_local, out_flat[by * block_M, bx * block_N])

    return main


def _reference(a, b, S, D, P):
    out = torch.conv2d(a.permute(0, 3, 1, 2).float(), b.permute(3, 2, 0, 1).float(), stride=S, padding=P, dilation=D)
    return out.permute(0, 2, 3, 1).half()


@pytest.mark.parametrize(
    "N, C, H, W, F, K, S, D, P",
    [
        (2, 64, 16, 16, 128, 3, 1, 1, 1),  # whole tiles
        (2, 32, 15, 13, 64, 3, 2, 1, 1),  # stride 2, partial row tiles
        (1, 16, 12, 12, 48, 3, 1, 2, 2),  # dilation 2; 144 taps x channels, partial K and F tiles
        (3, 32, 9, 9, 64, 1, 1, 1, 0),  # 1 x 1 filter
        (2, 32, 10, 10, 64, 5, 1, 1, 0),  # 5 x 5 filter, no padding
    ],
)
def test_convolution_matches_torch(N, C, H, W, F, K, S, D, P):
    a = torch.randn(N, H, W, C, device="cuda").half()
    b = torch.randn(K, K, C, F, device="cuda").half()
    out = conv2d(N, C, H, W, F, K, S, D, P)(a, b)
    torch.testing.assert_close(out, _reference(a, b, S, D, P), rtol=1e-2, atol=1e-2)


@pytest.mark.parametrize("stages", [1, 2])
def test_convolution_pipelined_or_not(stages):
    a = torch.randn(2, 16, 16, 32, device="cuda").half()
    b = torch.randn(3, 3, 32, 64, device="cuda").half()
    out = conv2d(2, 32, 16, 16, 64, 3, 1, 1, 1, stages=stages)(a, b)
    torch.testing.assert_close(out, _reference(a, b, 1, 1, 1), rtol=1e-2, atol=1e-2)


def test_im2col_into_a_fragment():
    """The tile may be a fragment; each element is the image's value or a padding zero."""
    N, H, W, C, K, P = 1, 6, 6, 8, 3, 1

    @T.prim_func
    def main(data: T.Tensor((N, H, W, C), "float32"), cols: T.Tensor((64, 72), "float32")):
        with T.Kernel(1, threads=128):
            tile = T.alloc_fragment((64, 72), "float32")
            T.im2col(data, tile, 0, 0, K, 1, 1, P)
            T.copy(tile, cols)

    a = torch.randn(N, H, W, C, device="cuda")
    got = tilelang.compile(main, out_idx=[-1])(a)
    unfolded = torch.nn.functional.unfold(a.permute(0, 3, 1, 2), K, padding=P)  # (1, C * K * K, OH * OW)
    ref = unfolded[0].reshape(C, K * K, 36).permute(2, 1, 0).reshape(36, K * K * C)  # columns (kh, kw, c)
    torch.testing.assert_close(got[:36], ref)
    assert not got[36:].any()  # rows past the 36 output pixels are zeros

"""What the convolution example, its tests and benchmark/convolution share: the output size, random
NHWC inputs and (KH, KW, C, F) filters, the fp32 torch reference, and the figures they print."""

import torch

from tilelang.profiler import do_bench


def output_size(size, K, S, D, P):
    """Output rows (or columns) of a K-tap convolution with stride S, dilation D and padding P."""
    return (size + 2 * P - D * (K - 1) - 1) // S + 1


def make_inputs(N, C, H, W, F, K, device="cuda", dtype=torch.float16):
    """Activations (N, H, W, C) and filters (K, K, C, F) of unit normals (never zeros: a kernel that
    skips work must not pass)."""
    data = torch.randn(N, H, W, C, device=device, dtype=dtype)
    weight = torch.randn(K, K, C, F, device=device, dtype=dtype)
    return data, weight


def torch_layouts(data, weight):
    """The same tensors as torch.nn.functional.conv2d takes them: NCHW and (F, C, KH, KW) views in the
    channels_last memory format (permutes, no copy of `data`), so cuDNN runs on NHWC as we do."""
    x = data.permute(0, 3, 1, 2)
    w = weight.permute(3, 2, 0, 1).contiguous(memory_format=torch.channels_last)
    return x, w


def ref_conv2d(data, weight, S, D, P):
    """The convolution in float32 (the kernel's accumulation), NHWC out; TF32 off, so that the
    reference rounds less than the kernel's fp16 output does."""
    x, w = torch_layouts(data.float(), weight.float())
    with torch.backends.cudnn.flags(enabled=True, allow_tf32=False):
        out = torch.nn.functional.conv2d(x, w, stride=S, padding=P, dilation=D)
    return out.permute(0, 2, 3, 1)


def conv_flops(N, C, H, W, F, K, S, D, P):
    """Multiply-adds x 2 of the convolution: one K * K * C dot product per output pixel and filter."""
    return 2 * N * output_size(H, K, S, D, P) * output_size(W, K, S, D, P) * F * K * K * C


def time_ms(fn, device="cuda"):
    """Median time of fn() in milliseconds (on the GPU: L2 flushed before each run)."""
    return do_bench(fn, return_mode="median", device=device)

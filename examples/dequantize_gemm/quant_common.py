"""What the int4 GEMM examples (and benchmark/dequantize_gemm) share: the weight format, a quantizer
that produces it from fp16 weights, the fp32 torch reference, and the figures they print.

The format, as AWQ/GPTQ-style checkpoints carry int4 weights of a linear layer W[N, K]:
- `packed` [N, K/2] uint8: the 4-bit codes q in 0..15, two per byte along K, the even column in the
  low nibble and the odd one in the high nibble: byte j of row n is q[n, 2j] | q[n, 2j+1] << 4.
- `scales` [N, K/GROUP] fp16: one scale per row and 128 consecutive columns (a group).
- `zeros` [N, K/GROUP] fp16 (asymmetric) or None (symmetric: the zero point is 8), the code that
  stands for 0.0; integer-valued, as the checkpoints store them.
A weight is w = (q - zero) * scale.
"""

import torch

from tilelang.profiler import do_bench

GROUP = 128  # columns of K that share a scale (and zero)
# HBM3e peak of the H200 (4.8 TB/s), the yardstick for the memory-bound decode kernel.
PEAK_HBM_GBS = 4800


def quantize(W, zeros=True):
    """W [N, K] (K a multiple of GROUP) as (packed, scales, zeros): per group, min..max onto 0..15
    (asymmetric, zeros=True) or -max|w|..max|w| onto 1..15 around 8 (symmetric, zeros None)."""
    N, K = W.shape
    assert K % GROUP == 0, f"K = {K} is not a multiple of the group size {GROUP}"
    g = W.float().view(N, K // GROUP, GROUP)
    if zeros:
        lo, hi = g.amin(dim=-1, keepdim=True), g.amax(dim=-1, keepdim=True)
        scale = ((hi - lo) / 15).clamp_min(1e-6).half().float()  # rounded as it is stored
        zero = (-lo / scale).round().clamp(0, 15)
    else:
        scale = (g.abs().amax(dim=-1, keepdim=True) / 7).clamp_min(1e-6).half().float()
        zero = torch.full_like(scale, 8.0)
    q = (g / scale + zero).round().clamp(0, 15).to(torch.uint8).view(N, K)
    packed = q[:, 0::2] | (q[:, 1::2] << 4)
    return packed.contiguous(), scale.view(N, -1).half(), (zero.view(N, -1).half() if zeros else None)


def dequantize(packed, scales, zeros=None):
    """The fp32 weights [N, K] that `packed`, `scales` and `zeros` stand for (exact: small integers
    times fp16 scales)."""
    N = packed.shape[0]
    q = torch.stack([packed & 15, packed >> 4], dim=-1).view(N, -1).float()
    zero = zeros.float() if zeros is not None else torch.full_like(scales, 8.0, dtype=torch.float32)
    w = (q.view(N, -1, GROUP) - zero.unsqueeze(-1)) * scales.float().unsqueeze(-1)
    return w.view(N, -1)


def ref_linear(A, packed, scales, zeros=None):
    """A @ dequantize(W)^T in fp32: the weights the kernels see, summed in the kernels' precision."""
    return A.float() @ dequantize(packed, scales, zeros).T


def check_linear(C, A, packed, scales, zeros=None):
    """C against ref_linear. Weights are ~N(0, 1) after dequantization, so C is ~sqrt(K) in size and
    fp16's rounding of each dequantized weight before the mma (large M) errs by ~3e-4 * sqrt(K) in C,
    up to ~5 sigma over a million outputs: atol 2e-3 * sqrt(K) (0.13 at K = 4096). A wrong tile or
    group is off by ~sqrt(K)."""
    K = A.shape[-1]
    want = ref_linear(A, packed, scales, zeros).half()
    torch.testing.assert_close(C, want, rtol=1e-2, atol=2e-3 * K**0.5)


def torch_dequant_linear(A, packed, scales, zeros=None):
    """What torch alone does for a quantized layer: dequantize W to fp16 (a full [N, K] tensor in
    memory), then one fp16 matmul. The benchmark's baseline."""
    return A @ dequantize(packed, scales, zeros).half().T


def random_weights(N, K, zeros=True, device="cuda"):
    """A random fp16 W[N, K] quantized (never all zeros: a kernel that skips work must not pass)."""
    return quantize(torch.randn(N, K, device=device, dtype=torch.float16), zeros)


def time_ms(fn, device="cuda"):
    """Median time of fn() in milliseconds (on the GPU: L2 flushed before each run, so weights come
    from HBM)."""
    return do_bench(fn, return_mode="median", device=device)


def weight_gbs(N, K, ms, zeros=True):
    """GB/s of the int4 weights and their fp16 scales (and zeros) read in `ms` milliseconds: the floor
    of a decode step's traffic (A and C are a few KB)."""
    return (N * K // 2 + (2 if zeros else 1) * 2 * N * (K // GROUP)) / ms / 1e6

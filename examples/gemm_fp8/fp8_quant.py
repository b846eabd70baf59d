"""fp8 (e4m3) quantization and fp32 references shared by the fp8 GEMM examples, their test and
benchmark/gemm_fp8.

A scale here is a dequantization factor: x ~= x_fp8.float() * scale, with each group's scale its
absolute maximum over 448, the largest finite e4m3 value, so the group fills e4m3's range. Three
groupings: the whole tensor (cuBLASLt's per-tensor fp8), 1 x 128 (one row of a 128-wide K block:
activations, DeepSeek-V3 / DeepGEMM) and 128 x 128 (weights, same).

The references dequantize the very fp8 values a kernel reads and multiply in fp32, so a kernel
differs from them only by its accumulation order and precision and by the rounding of its output.
"""

import torch

FP8 = torch.float8_e4m3fn
FP8_MAX = torch.finfo(FP8).max  # 448
BLOCK = 128  # the side of a scale group (DeepSeek-V3's quantization block)
_TINY = 1e-12  # an all-zero group gets this amax, not a division by zero


def ceildiv(a, b):
    return (a + b - 1) // b


def quantize_per_tensor(x):
    """x (any float tensor) -> (x_fp8, scale): scale is a float32 tensor of shape (1,)."""
    scale = x.abs().max().float().clamp(min=_TINY) / FP8_MAX
    return (x.float() / scale).to(FP8), scale.reshape(1)


def quantize_blocks(x, rows, cols=BLOCK):
    """x (R, C) -> (x_fp8 (R, C), scales (ceildiv(R, rows), ceildiv(C, cols)) float32), one scale
    per rows x cols group. Partial groups at the edges are padded with zeros to find their amax."""
    R, C = x.shape
    gr, gc = ceildiv(R, rows), ceildiv(C, cols)
    padded = torch.zeros(gr * rows, gc * cols, dtype=torch.float32, device=x.device)
    padded[:R, :C] = x
    groups = padded.view(gr, rows, gc, cols)
    scales = groups.abs().amax(dim=(1, 3)).clamp(min=_TINY) / FP8_MAX
    q = (groups / scales[:, None, :, None]).to(FP8).view(gr * rows, gc * cols)
    return q[:R, :C].contiguous(), scales


def quantize_1x128(x):
    """Activations, per row and 128-wide K block: (x_fp8 (M, K), scales (M, ceildiv(K, 128)))."""
    return quantize_blocks(x, 1, BLOCK)


def quantize_128x128(w):
    """Weights (N, K), per 128 x 128 block: (w_fp8, scales (ceildiv(N, 128), ceildiv(K, 128)))."""
    return quantize_blocks(w, BLOCK, BLOCK)


def dequantize(q, scales, rows, cols):
    """The float32 values an fp8 tensor quantized in rows x cols groups stands for."""
    s = scales.repeat_interleave(rows, dim=0).repeat_interleave(cols, dim=1)
    return q.float() * s[: q.shape[0], : q.shape[1]]


def blocky_randn(R, C, rows, cols, device="cuda"):
    """Random normal values whose rows x cols groups differ in magnitude (factors 2^-4 .. 2^4), so
    that a scale read from the wrong group shows in the result."""
    factors = torch.exp2(torch.randint(-4, 5, (ceildiv(R, rows), ceildiv(C, cols)), device=device).float())
    grid = factors.repeat_interleave(rows, dim=0).repeat_interleave(cols, dim=1)[:R, :C]
    return torch.randn(R, C, device=device) * grid


def reference_per_tensor(a, scale_a, b, scale_b):
    """C = (A * scale_a) @ (B * scale_b)^T in float32; a (M, K), b (N, K) fp8."""
    return (a.float() * scale_a) @ (b.float() * scale_b).T


def reference_blockscale(a, scales_a, b, scales_b):
    """C = dequantized A (1 x 128 scales) @ dequantized B (128 x 128 scales)^T in float32."""
    return dequantize(a, scales_a, 1, BLOCK) @ dequantize(b, scales_b, BLOCK, BLOCK).T


def assert_close(out, ref, tensor_core_depth=BLOCK):
    """The kernels' output (bf16 or fp16) against the float32 reference.

    The inputs are exact in both (the reference dequantizes the fp8 values the kernel reads, and a
    product of two e4m3 values is exact in fp32), so what differs is
    - the output's rounding: 2^-9 relative for bf16 (2^-12 for fp16);
    - the summation order, far below that;
    - the tensor cores' accumulation: Hopper's fp8 wgmma keeps about 14 bits of mantissa while
      it adds into its fp32 accumulator (the DeepSeek-V3 report, "Increasing Accumulation
      Precision": up to 2% relative error at K = 4096), up to 2^-13 relative per 32-deep
      instruction over the `tensor_core_depth` a kernel leaves to the tensor cores before adding
      in fp32 on the CUDA cores: the whole K for the per-tensor kernel (as cuBLASLt's fast
      accumulation), 128 for the block-scale kernel.
    So: the relative error of the whole result (Frobenius norm) under 1e-2, five times the bf16
    rounding, plus that accumulation allowance (4e-4 at depth 128, 1.6e-2 at 4096); each element
    within 2e-2 (plus the allowance) of its value plus as much of the result's RMS (an element near
    zero after cancellation keeps an absolute error of the others' size). A scale read from the
    wrong group (a factor 2^-8 .. 2^8 off with `blocky_randn`) or a misplaced tile exceeds these
    by far; so does a missing K block in the tests' small K (1/sqrt(K / 128) of |C|).
    """
    slack = tensor_core_depth / 32 * 2**-13
    out, ref = out.float(), ref.float()
    rms = ref.pow(2).mean().sqrt().item()
    rel = ((out - ref).norm() / ref.norm().clamp(min=_TINY)).item()
    assert rel < 1e-2 + slack, f"relative error of the result {rel:.2e} (limit {1e-2 + slack:.2e})"
    torch.testing.assert_close(out, ref, rtol=2e-2 + slack, atol=(2e-2 + slack) * rms)

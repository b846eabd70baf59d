"""int4 weight-only GEMM (examples/dequantize_gemm) beside torch, same run, same inputs.

For C = A @ dequantize(W)^T, A fp16 [M, K], W int4 [N, K] with fp16 scales and zeros per 128 columns:
- ours: the example's kernel (the GEMV for M <= 16, best of a few shapes; the tensor-core tiles
  beyond, best of a few tiles);
- torch dequant+matmul: what torch alone does with the same weights (dequantize W to an fp16 [N, K]
  tensor, then one cuBLAS matmul), the baseline a quantized layer must beat;
- fp16 cuBLAS: F.linear on an fp16 W of the same shape (four times the int4 weight bytes): for large
  M, where tensor cores bound both, the figure to match.
For M = 1 and 16 the figure is GB/s of the int4 weights, scales and zeros (the floor of a decode
step's traffic) against the H200's 4.8 TB/s; for M = 4096, TFLOPS. The L2 is flushed before each run.
Every function of a row is timed in turn, median of rounds (the GPU's clocks drift between runs).
Run on a GPU machine:
    python benchmark/dequantize_gemm/benchmark_dequantize_gemm.py [--quick] [--only gemv|gemm]
"""

import argparse
import functools
import os
import sys

import torch
import torch.nn.functional as F

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "examples", "dequantize_gemm"))
from example_dequantize_gemm import dequant_gemm, dequant_gemv  # noqa: E402
from quant_common import PEAK_HBM_GBS, check_linear, random_weights, torch_dequant_linear, weight_gbs  # noqa: E402

from tilelang.profiler import do_bench_in_turn  # noqa: E402

# (N, K): square projections and a Llama-3-8B-sized MLP's up (14336 x 4096) and down (4096 x 14336).
SHAPES = [(4096, 4096), (8192, 8192), (14336, 4096), (4096, 14336)]
DECODE_MS = [1, 16]
LARGE_M = 4096
# GEMV (block_N, threads, words): rows per block, and the 32-bit words a thread loads per K step
# (4 words: 16 bytes in flight a thread, 8: 32); 2 rows of 64 lanes, 4 of 32, 8 of 16 lanes.
GEMV_CONFIGS = [(4, 128, 4), (4, 128, 8), (2, 128, 8), (8, 128, 4), (4, 256, 4), (8, 256, 8)]
# Tensor-core tiles (block_M, block_N, block_K, threads, num_stages).
GEMM_CONFIGS = [(128, 128, 64, 256, 3), (128, 256, 64, 256, 3), (256, 128, 64, 256, 3), (128, 128, 64, 128, 4)]


def as_words(packed):
    """The packed bytes as the GEMV reads them: int32 words of 8 codes."""
    return packed.view(torch.int32)


def as_bytes(packed):
    """The packed bytes as the tensor-core kernel reads them."""
    return packed


def check(kernel, M, N, K, W_view):
    """A fresh check for each compiled kernel (a kernel that wrote nothing must not pass)."""
    packed, scales, zeros = random_weights(N, K)
    A = torch.randn(M, K, device="cuda", dtype=torch.float16)
    C = kernel(A, W_view(packed), scales, zeros)
    check_linear(C, A, packed, scales, zeros)


def bench(M, N, K):
    gemv = M <= 16
    if gemv:
        configs = GEMV_CONFIGS
        kernels = dequant_gemv.par_compile([(M, N, K, *c) for c in configs])
        W_view = as_words
    else:
        configs = GEMM_CONFIGS
        kernels = dequant_gemm.par_compile([(M, N, K, *c) for c in configs])
        W_view = as_bytes
    packed, scales, zeros = random_weights(N, K)
    A = torch.randn(M, K, device="cuda", dtype=torch.float16)
    W16 = torch.randn(N, K, device="cuda", dtype=torch.float16)
    fns = {}
    for config, kernel in zip(configs, kernels):
        check(kernel, M, N, K, W_view)
        fns[config] = functools.partial(kernel, A, W_view(packed), scales, zeros)
    fns["torch dequant+matmul"] = functools.partial(torch_dequant_linear, A, packed, scales, zeros)
    fns["fp16 cuBLAS"] = functools.partial(F.linear, A, W16)
    ms = do_bench_in_turn(fns, rounds=3)
    best = min(configs, key=lambda c: ms[c])
    return M, N, K, best, ms[best], ms["torch dequant+matmul"], ms["fp16 cuBLAS"]


def print_rows(rows):
    print(
        f"int4 weight-only GEMM C = A @ dequant(W)^T, group 128 with zeros; decode (M <= 16): GB/s of int4 weights "
        f"+ scales + zeros (H200 peak {PEAK_HBM_GBS}); large M: TFLOPS; GEMV configs (block_N, threads, words) "
        f"{GEMV_CONFIGS}; GEMM tiles (block_M, block_N, block_K, threads, stages) {GEMM_CONFIGS}"
    )
    print(
        f"{'M':>5} {'N':>6} {'K':>6} {'best config':>24} {'ours us':>8} {'figure':>8} {'dq+mm us':>9} "
        f"{'fp16 us':>8} {'figure':>8} {'vs dq+mm':>8} {'vs fp16':>8}"
    )
    for M, N, K, best, ours, dq, fp16 in rows:
        if M <= 16:
            fig, fig16 = weight_gbs(N, K, ours), 2 * N * K / fp16 / 1e6  # fp16: GB/s of its fp16 weights
        else:
            fig, fig16 = 2 * M * N * K / ours / 1e9, 2 * M * N * K / fp16 / 1e9
        print(
            f"{M:5d} {N:6d} {K:6d} {str(best):>24} {ours * 1e3:8.1f} {fig:8.0f} {dq * 1e3:9.1f} "
            f"{fp16 * 1e3:8.1f} {fig16:8.0f} {dq / ours:8.2f} {fp16 / ours:8.2f}"
        )


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--quick", action="store_true", help="the first two shapes")
    parser.add_argument("--only", choices=["gemv", "gemm"], default=None)
    args = parser.parse_args()
    shapes = SHAPES[:2] if args.quick else SHAPES
    ms = ([] if args.only == "gemm" else DECODE_MS) + ([] if args.only == "gemv" else [LARGE_M])
    print_rows([bench(M, N, K) for M in ms for N, K in shapes])


if __name__ == "__main__":
    main()

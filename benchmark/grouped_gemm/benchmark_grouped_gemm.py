"""Grouped GEMM for MoE (fp16 in, fp32 accumulation, fp16 out) beside torch, same run, same inputs.

For each shape (E experts, N x K weights, a skewed split of the tokens with some experts empty):
examples/grouped_gemm's kernel at its default tiles and at the best of a few tile shapes, beside
- a loop of torch.matmul, one per non-empty expert (the sizes already on the host: the device-to-host
  copy a real loop needs every call is left out of its time, in torch's favour);
- torch._grouped_mm (one cuBLAS/CUTLASS grouped kernel reading the same offsets on the GPU) where
  this torch has it: in fp16 if it takes fp16, else in bf16 on bf16 copies of the inputs (same
  work), else nan. Its output is checked once against the reference like ours.
TFLOPS count the useful 2 * tokens * N * K, not the padding of partial tiles. The L2 is flushed
before each run; every function of a row is timed in turn, median of rounds.

Run on a GPU machine:
    python benchmark/grouped_gemm/benchmark_grouped_gemm.py [--quick]
"""

import argparse
import functools
import os
import sys

import torch

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "examples", "grouped_gemm"))
from example_grouped_gemm import grouped_gemm  # noqa: E402
from grouped_common import group_sizes, make_inputs, ref_grouped_matmul, tflops  # noqa: E402

from tilelang.profiler import do_bench_in_turn  # noqa: E402

# (block_M, block_N, block_K, threads, num_stages). The first is the example's default (the H200's
# best plain-GEMM tile); 64-row tiles waste less of small experts' last tiles; 3 stages or 128-column
# tiles leave room for two blocks an SM.
CONFIGS = [
    (128, 256, 64, 256, 4),
    (128, 256, 64, 256, 3),
    (128, 128, 64, 256, 4),
    (128, 128, 64, 128, 4),
    (64, 256, 64, 256, 4),
    (64, 128, 64, 128, 4),
]
# (E, N, K, tokens, skew, empty experts): Mixtral-like 8 experts of 4096 x 4096, and 64 fine-grained
# experts of 2048 x 2048 (DeepSeek-like), at prefill-sized token counts; Zipf-like skew 1.
SHAPES = [
    (8, 4096, 4096, 4096, 1.0, 1),
    (8, 4096, 4096, 16384, 1.0, 1),
    (64, 2048, 2048, 4096, 1.0, 8),
    (64, 2048, 2048, 16384, 1.0, 4),
    (64, 4096, 4096, 8192, 1.0, 4),
]
TOLERANCE = dict(rtol=1e-2, atol=5e-2)  # the example's: fp16 rounding of sums ~sqrt(K) in size


def grouped_mm_fn(A, B, offsets):
    """torch._grouped_mm on these inputs as a timed function and its dtype's short name, or (None, why)."""
    if not hasattr(torch, "_grouped_mm"):
        return None, "absent from this torch"
    why = ""
    for dtype, name in ((torch.float16, "fp16"), (torch.bfloat16, "bf16")):
        a, b = A.to(dtype), B.to(dtype)
        b_t = b.transpose(1, 2)  # [E, K, N] with K-major groups: the memory of B, as it wants it
        ends = offsets[1:].contiguous()  # its offs: each group's end row
        try:
            out = torch._grouped_mm(a, b_t, offs=ends)
            # Against the fp32 products of the same (rounded) inputs: bf16's output keeps 8 bits of
            # mantissa (2^-9 relative), fp16's 11.
            torch.testing.assert_close(out.float(), ref_grouped_matmul(a, b, offsets), rtol=2e-2, atol=5e-2)
        except (RuntimeError, NotImplementedError, AssertionError) as exc:
            why = f"{name}: {str(exc).strip().splitlines()[0][:100]}"
            continue
        return functools.partial(torch._grouped_mm, a, b_t, offs=ends), name
    return None, why


def bench(E, N, K, tokens, skew, empty):
    sizes = group_sizes(E, tokens, skew, empty)
    A, B, offsets = make_inputs(sizes, N, K)
    # Fresh inputs (another split too) for the checks: a kernel that wrote nothing must not pass on a
    # recycled output.
    a, b, offs = make_inputs(group_sizes(E, tokens, skew, empty, seed=1), N, K, seed=1)
    ref = ref_grouped_matmul(a, b, offs).half()
    fns = {}
    # par_compile: the kernels lowered one by one, nvcc run for all of them at once.
    for config, kernel in zip(CONFIGS, grouped_gemm.par_compile([(E, N, K, *c) for c in CONFIGS])):
        torch.testing.assert_close(kernel(a, b, offs), ref, **TOLERANCE)
        fns[config] = functools.partial(kernel, A, B, offsets)
    bounds = offsets.tolist()
    fns["loop"] = functools.partial(ref_grouped_matmul, A, B, bounds, torch.float16)
    fns["grouped_mm"], grouped_dtype = grouped_mm_fn(A, B, offsets)
    ms = do_bench_in_turn(fns, rounds=3)
    best = min(CONFIGS, key=lambda c: ms[c])
    return dict(
        shape=(E, N, K, tokens), sizes=sizes, best=best, ms=ms[best], default=ms[CONFIGS[0]],
        loop=ms["loop"], grouped=ms["grouped_mm"], grouped_dtype=grouped_dtype,
    )  # fmt: skip


def print_rows(rows):
    print("Grouped GEMM C[rows of e] = A[rows of e] @ B[e]^T, fp16, B [E, N, K]; best: (block_M, block_N, block_K,")
    print("threads, stages) of the tiles tried; vs loop / vs grouped_mm: their time over our best's")
    print(
        f"{'E':>3} {'N':>5} {'K':>5} {'tokens':>6} {'sizes':>12} {'best tile':>24} {'ours us':>8} {'TFLOPS':>6} "
        f"{'default us':>10} {'loop us':>8} {'vs loop':>7} {'grouped_mm us':>13} {'vs it':>6}"
    )
    for r in rows:
        E, N, K, tokens = r["shape"]
        sizes = f"{min(r['sizes'])}..{max(r['sizes'])}/{r['sizes'].count(0)}e"
        grouped = f"{r['grouped'] * 1e3:.1f} {r['grouped_dtype']}" if r["grouped"] == r["grouped"] else "nan"
        print(
            f"{E:3d} {N:5d} {K:5d} {tokens:6d} {sizes:>12} {str(r['best']):>24} {r['ms'] * 1e3:8.1f} "
            f"{tflops(tokens, N, K, r['ms']):6.0f} {r['default'] * 1e3:10.1f} {r['loop'] * 1e3:8.1f} "
            f"{r['loop'] / r['ms']:7.2f} {grouped:>13} {r['grouped'] / r['ms']:6.2f}"
        )
        if r["grouped"] != r["grouped"]:
            print(f"    torch._grouped_mm: {r['grouped_dtype']}")


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--quick", action="store_true", help="two shapes")
    args = parser.parse_args()
    shapes = [SHAPES[1], SHAPES[2]] if args.quick else SHAPES
    print_rows([bench(*shape) for shape in shapes])


if __name__ == "__main__":
    main()

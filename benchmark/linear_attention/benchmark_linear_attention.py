"""Chunked linear attention forward: tilelang's example kernel beside torch, same run (fp16, (batch,
seq, heads, dim) layout), without decay, with one decay per head (retention) and one per token (GLA).

torch runs the same chunked algorithm as fast as it can (`ref_chunked` of the example: each chunk's
masked Q·Kᵀ, A·V, Kᵀ·V and Q·S as batched fp16 matmuls on cuBLAS, the float32 state carried by a
loop over the chunks); its quadratic form needs seq² memory per head and its token recurrence one
launch per token, both far slower at these lengths. Each kernel is checked against it before timing.
TFLOP/s count the chunked algorithm's matmuls: 2 * b * h * seq * (chunk * (dk + dv) + 2 * dk * dv).

Run on a GPU machine: python benchmark/linear_attention/benchmark_linear_attention.py [--quick]
"""

import argparse
import functools
import os
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "examples", "linear_attention"))
from example_linear_attn_fwd import linear_attn_fwd, make_inputs, ref_chunked  # noqa: E402

from tilelang.profiler import do_bench_in_turn  # noqa: E402

CHUNK = 64
# (block_V, num_stages, threads) tried per shape; the best is reported.
CONFIGS = [(64, 2, 128), (32, 2, 128), (128, 2, 128), (64, 3, 128)]


def shapes(quick):
    rows = [(8, 32, 4096, 128, 128, decay) for decay in (None, "head", "token")]
    if not quick:
        for decay in (None, "token"):
            rows += [(8, 32, 4096, 64, 64, decay), (2, 32, 16384, 128, 128, decay), (32, 16, 2048, 128, 128, decay)]
    return rows


def max_relative_error(out, ref):
    return ((out.float() - ref.float()).abs().max() / ref.float().abs().max()).item()


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--quick", action="store_true", help="b8 h32 s4096 d128 only")
    args = parser.parse_args()
    rows = []
    for batch, heads, seq, dim_k, dim_v, decay in shapes(args.quick):
        inputs = [x for x in make_inputs(batch, heads, seq, dim_k, dim_v, decay, "float16", "cuda") if x is not None]
        ref = ref_chunked(*inputs)
        fns = {}
        for config in (c for c in CONFIGS if dim_v % c[0] == 0):
            kernel = linear_attn_fwd(batch, heads, seq, dim_k, dim_v, decay, "float16", None, CHUNK, *config)
            err = max_relative_error(kernel(*inputs), ref)  # a wrong kernel's time means nothing
            assert err < 1e-2, f"config {config}: differs from torch by {err:.3g} of the output's largest value"
            fns[config] = functools.partial(kernel, *inputs)
        fns["torch"] = functools.partial(ref_chunked, *inputs)
        # Every configuration and torch timed in turn (the GPU's clocks drift).
        ms = do_bench_in_turn(fns, rounds=3, rep=30)
        best = min((c for c in fns if c != "torch"), key=lambda c: ms[c])
        flops = 2 * batch * heads * seq * (CHUNK * (dim_k + dim_v) + 2 * dim_k * dim_v)
        rows.append((batch, heads, seq, dim_k, dim_v, decay, best, ms[best], ms["torch"], flops / ms[best] / 1e9))
    print(f"{'b':>3} {'h':>3} {'seq':>6} {'dk':>4} {'dv':>4} {'decay':>6} {'best config':>14} {'tilelang ms':>11} "
          f"{'torch ms':>9} {'speedup':>7} {'TFLOP/s':>7}")  # fmt: skip
    for b, h, s, dk, dv, decay, cfg, ours, theirs, tflops in rows:
        print(f"{b:3d} {h:3d} {s:6d} {dk:4d} {dv:4d} {str(decay):>6} {str(cfg):>14} {ours:11.3f} {theirs:9.3f} "
              f"{theirs / ours:7.2f} {tflops:7.0f}")  # fmt: skip


if __name__ == "__main__":
    main()

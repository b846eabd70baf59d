"""Chunked linear attention and gated delta rule forward: tilelang's example kernels beside torch, same
run (fp16, (batch, seq, heads, dim) layout). Linear attention without decay, with one decay per head
(retention) and one per token (GLA); the gated delta rule (Gated DeltaNet) with per-token gates.

torch runs the same chunked algorithm as fast as it can (`ref_chunked` of each example). Linear
attention: each chunk's masked Q·Kᵀ, A·V, Kᵀ·V and Q·S as batched fp16 matmuls on cuBLAS, the float32
state carried by a loop over the chunks (its quadratic form needs seq² memory per head and its token
recurrence one launch per token, both far slower at these lengths). Gated delta rule: float32,
batched triangular solves for the chunks' (I + L)⁻¹, then the loop over the chunks. Each kernel is
checked against torch before timing. TFLOP/s count linear attention's chunked matmuls,
2 * b * h * seq * (chunk * (dk + dv) + 2 * dk * dv), for both (a lower bound for the gated delta rule,
whose extra products are left out).

Run on a GPU machine: python benchmark/linear_attention/benchmark_linear_attention.py [--quick]
"""

import argparse
import functools
import os
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "examples", "linear_attention"))
import example_gated_delta_rule_fwd as gdn  # noqa: E402
from example_linear_attn_fwd import linear_attn_fwd, make_inputs, ref_chunked  # noqa: E402

from tilelang.errors import UserError  # noqa: E402
from tilelang.profiler import do_bench_in_turn  # noqa: E402

CHUNK = 64
# (block_V, num_stages, threads) tried per shape; the best is reported.
CONFIGS = [(64, 2, 128), (32, 2, 128), (128, 2, 128), (64, 3, 128)]
GDN_CONFIGS = [(64, 1, 128), (32, 1, 128), (64, 2, 128), (32, 2, 128)]


def shapes(quick):
    rows = [(8, 32, 4096, 128, 128, decay) for decay in (None, "head", "token")]
    if not quick:
        for decay in (None, "token"):
            rows += [(8, 32, 4096, 64, 64, decay), (2, 32, 16384, 128, 128, decay), (32, 16, 2048, 128, 128, decay)]
    return rows


def gdn_shapes(quick):
    return [(8, 32, 4096, 128, 128)] + ([] if quick else [(8, 32, 4096, 64, 64), (2, 32, 16384, 128, 128)])


def build(factory, *args):
    """The kernel, or None (said on stdout) for a configuration this GPU cannot run: more shared
    memory than a block may have, on an A100 for the deeper pipelines at d128."""
    try:
        return factory(*args)
    except UserError as err:
        print(f"skipped {factory.__name__}{args}: {str(err).splitlines()[0]}")
        return None


def run(kernels, ref_fn, inputs, sizes, kind):
    """Each kernel checked against the torch reference, then all and torch timed in turn (the GPU's
    clocks drift); the row of the best kernel."""
    batch, heads, seq, dim_k, dim_v = sizes
    ref = ref_fn(*inputs)
    kernels = {config: kernel for config, kernel in kernels.items() if kernel is not None}
    fns = {"torch": functools.partial(ref_fn, *inputs)}
    for config, kernel in kernels.items():
        err = max_relative_error(kernel(*inputs), ref)  # a wrong kernel's time means nothing
        assert err < 1e-2, f"{kind} {config}: differs from torch by {err:.3g} of the output's largest value"
        fns[config] = functools.partial(kernel, *inputs)
    ms = do_bench_in_turn(fns, rounds=3, rep=30)
    best = min(kernels, key=lambda c: ms[c])
    flops = 2 * batch * heads * seq * (CHUNK * (dim_k + dim_v) + 2 * dim_k * dim_v)
    return (*sizes, kind, best, ms[best], ms["torch"], flops / ms[best] / 1e9)


def max_relative_error(out, ref):
    return ((out.float() - ref.float()).abs().max() / ref.float().abs().max()).item()


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--quick", action="store_true", help="b8 h32 s4096 d128 only")
    args = parser.parse_args()
    rows = []
    for batch, heads, seq, dim_k, dim_v, decay in shapes(args.quick):
        inputs = [x for x in make_inputs(batch, heads, seq, dim_k, dim_v, decay, "float16", "cuda") if x is not None]
        kernels = {
            config: build(linear_attn_fwd, batch, heads, seq, dim_k, dim_v, decay, "float16", None, CHUNK, *config)
            for config in CONFIGS
            if dim_v % config[0] == 0
        }
        rows.append(run(kernels, ref_chunked, inputs, (batch, heads, seq, dim_k, dim_v), str(decay)))
    for batch, heads, seq, dim_k, dim_v in gdn_shapes(args.quick):
        inputs = gdn.make_inputs(batch, heads, seq, dim_k, dim_v, "float16", "cuda")
        kernels = {
            config: build(gdn.gated_delta_rule_fwd, batch, heads, seq, dim_k, dim_v, "float16", None, CHUNK, *config)
            for config in GDN_CONFIGS
            if dim_v % config[0] == 0
        }
        rows.append(run(kernels, gdn.ref_chunked, inputs, (batch, heads, seq, dim_k, dim_v), "gdn"))
    print(f"{'b':>3} {'h':>3} {'seq':>6} {'dk':>4} {'dv':>4} {'kind':>6} {'best config':>14} {'tilelang ms':>11} "
          f"{'torch ms':>9} {'speedup':>7} {'TFLOP/s':>7}")  # fmt: skip
    for b, h, s, dk, dv, kind, cfg, ours, theirs, tflops in rows:
        print(f"{b:3d} {h:3d} {s:6d} {dk:4d} {dv:4d} {kind:>6} {str(cfg):>14} {ours:11.3f} {theirs:9.3f} "
              f"{theirs / ours:7.2f} {tflops:7.0f}")  # fmt: skip


if __name__ == "__main__":
    main()

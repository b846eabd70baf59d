"""Row top-k and fused MoE routing beside torch, same run, same inputs.

Top-k: our example kernel (best of a few (rows a block, threads, split) shapes) beside torch.topk, on router
rows (N = 64..256 experts) and vocabulary rows (N = 32768, k = 8), fp32.
Routing: the fused softmax + top-k + renormalization kernel beside torch.softmax, torch.topk and the
division (what a Mixtral-style router runs), fp32 logits.
Each line also gives the HBM bandwidth of reading the input once and writing the k outputs.

Every function of a row is timed in turn, median of rounds (the GPU's clocks drift between runs).
Run on a GPU machine:
    python benchmark/topk/benchmark_topk.py [--quick] [--only topk|routing]
"""

import argparse
import functools
import os
import sys

import torch

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "examples", "topk"))
from example_moe_routing import check_routing, moe_routing, torch_routing  # noqa: E402
from example_topk import check_topk, topk  # noqa: E402

from tilelang.profiler import do_bench_in_turn  # noqa: E402

PEAK_HBM_GBS = 4800  # the H200's HBM3e
# (rows a block, threads, split): router rows on a warp (or half, or a quarter); vocabulary rows on a
# block (64 or 32 entries a thread at N = 32768), or cut into `split` parts of a block each and merged
# by a second kernel (more, smaller blocks: one block's loads run while another's rounds do).
SMALL_CONFIGS = [(4, 128, 1), (8, 256, 1), (8, 128, 1), (16, 256, 1)]
LARGE_CONFIGS = [(1, 512, 1), (1, 1024, 1), (1, 256, 4), (1, 256, 8), (1, 128, 8), (1, 128, 16)]
# (M tokens, N, k)
TOPK_SHAPES = [
    (4096, 64, 2),
    (16384, 128, 6),
    (65536, 256, 8),
    (4096, 256, 8),
    (4096, 32768, 8),
    (16384, 32768, 8),
]
ROUTING_SHAPES = [(4096, 64, 2), (16384, 64, 2), (16384, 128, 6), (4096, 256, 8), (65536, 256, 8)]


def configs(N, split=True):
    """Shapes whose threads a row are at most the row's entries (the router's: a warp at least)."""
    chosen = SMALL_CONFIGS if N <= 512 else LARGE_CONFIGS
    return [c for c in chosen if c[1] // c[0] <= max(N, 32) and (split or c[2] == 1)]


def bench_topk(M, N, k):
    X = torch.randn(M, N, device="cuda")
    fns = {}
    cfgs = configs(N)
    for config, kernel in zip(cfgs, topk.par_compile([(M, N, k, *c) for c in cfgs])):
        x = torch.randn(M, N, device="cuda")  # fresh inputs: a kernel that wrote nothing must not pass
        check_topk(x, *kernel(x), k)
        fns[config] = functools.partial(kernel, X)
    fns["torch.topk"] = functools.partial(torch.topk, X, k, dim=-1)
    ms = do_bench_in_turn(fns, rounds=3)
    best = min(cfgs, key=lambda c: ms[c])
    return M, N, k, best, ms[best], ms["torch.topk"], 4 * M * N + 8 * M * k


def bench_routing(M, E, k):
    logits = torch.randn(M, E, device="cuda")
    fns = {}
    cfgs = configs(E, split=False)
    for config, kernel in zip(cfgs, moe_routing.par_compile([(M, E, k, *c[:2]) for c in cfgs])):
        x = torch.randn(M, E, device="cuda")
        check_routing(x, *kernel(x), k)
        fns[config] = functools.partial(kernel, logits)
    fns["torch"] = functools.partial(torch_routing, logits, k)
    ms = do_bench_in_turn(fns, rounds=3)
    best = min(cfgs, key=lambda c: ms[c])
    return M, E, k, best, ms[best], ms["torch"], 4 * M * E + 8 * M * k


def print_rows(title, what, rows):
    print(title)
    print(
        f"{'M':>6} {what:>6} {'k':>2} {'best (rows, threads, split)':>28} {'ours us':>8} {'GB/s':>6} "
        f"{'torch us':>9} {'GB/s':>6} {'speedup':>7}"
    )
    for M, N, k, best, ours, ref, moved in rows:
        print(
            f"{M:6d} {N:6d} {k:2d} {str(best):>28} {ours * 1e3:8.1f} {moved / ours / 1e6:6.0f} "
            f"{ref * 1e3:9.1f} {moved / ref / 1e6:6.0f} {ref / ours:7.3f}"
        )


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--quick", action="store_true", help="two shapes of each")
    parser.add_argument("--only", choices=["topk", "routing"], default=None)
    args = parser.parse_args()
    topk_shapes = TOPK_SHAPES[::3] if args.quick else TOPK_SHAPES
    routing_shapes = ROUTING_SHAPES[::3] if args.quick else ROUTING_SHAPES
    if args.only != "routing":
        print_rows(
            f"Row top-k, fp32 in, values and int32 indices out; speedup = torch.topk / ours (HBM peak {PEAK_HBM_GBS})",
            "N",
            [bench_topk(*shape) for shape in topk_shapes],
        )
    if args.only != "topk":
        print_rows(
            "\nMoE routing, fp32 logits: softmax, top-k, renormalized weights; speedup = torch / ours",
            "E",
            [bench_routing(*shape) for shape in routing_shapes],
        )


if __name__ == "__main__":
    main()

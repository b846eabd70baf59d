"""GEMV and skinny split-K GEMM (fp16, fp32 accumulation) beside torch, same run, same inputs.

GEMV, y = A @ x with A [N, K]: our example kernel (best of a few tile shapes) beside torch.matmul(A, x)
and the linear-layer form F.linear(x[1, K], A), with the HBM bandwidth each achieves against the
H200's 4.8 TB/s peak. The L2 is flushed before each run: a decode step reads its weights from HBM.

Split-K GEMM, C = A @ B with M = 16..64: the example's kernel without a split, with the split
`choose_split_k` picks, and the best of 64- and 128-column tiles with splits 1..16 (atomic combine
into fp32 C, and reduce combine into fp16 C), beside torch.matmul(A, B).

Every function of a row is timed in turn, median of rounds (the GPU's clocks drift between runs).
Run on a GPU machine:
    python benchmark/gemv/benchmark_gemv.py [--quick] [--only gemv|splitk]
"""

import argparse
import functools
import math
import os
import sys

import torch
import torch.nn.functional as F

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "examples", "gemv"))
from example_gemm_splitk import choose_split_k, default_block_m, default_stages, matmul_splitk  # noqa: E402
from example_gemv import gemv  # noqa: E402
from skinny_common import PEAK_HBM_GBS, gbs, num_sms, randn, ref_matmul  # noqa: E402

from tilelang.profiler import do_bench_in_turn  # noqa: E402

# GEMV tiles (block_N, block_K, threads, prefetch): each thread loads block_N * block_K / threads fp16
# per K step, 4 or 8 loads of 128 bits; fewer rows per block read x more often, more rows make fewer
# blocks; prefetch issues the next step's loads before this step's multiply-adds.
GEMV_TILES = [(4, 1024, 128), (2, 2048, 128), (8, 512, 128), (8, 1024, 128), (8, 1024, 256), (4, 2048, 256)]
GEMV_CONFIGS = [(*tile, prefetch) for prefetch in (False, True) for tile in GEMV_TILES]
# (N, K): square decode projections and a Llama-3-8B-sized MLP's up (14336 x 4096) and down (4096 x 14336).
GEMV_SHAPES = [(4096, 4096), (8192, 8192), (16384, 16384), (14336, 4096), (4096, 14336)]
# (M, N, K): a few decode tokens through the same kind of layers.
SPLITK_SHAPES = [(16, 4096, 4096), (32, 4096, 8192), (64, 4096, 8192), (32, 14336, 4096), (32, 4096, 14336)]
SPLITK_BLOCK_NS, SPLITK_BLOCK_K = (64, 128), 128
SPLITS = [1, 2, 4, 8, 16]


def bench_gemv(N, K):
    A, x = randn(N, K), randn(K)
    x1 = x.view(1, K)
    fns = {}
    # par_compile: the kernels lowered one by one, nvcc run for all of them at once.
    for config, kernel in zip(GEMV_CONFIGS, gemv.par_compile([(N, K, *c) for c in GEMV_CONFIGS])):
        # Fresh inputs for the check: a kernel that wrote nothing must not pass on a recycled output.
        a, v = randn(N, K), randn(K)
        torch.testing.assert_close(kernel(a, v), ref_matmul(a, v).half(), rtol=1e-2, atol=5e-2)
        fns[config] = functools.partial(kernel, A, x)
    fns["torch.matmul"] = functools.partial(torch.matmul, A, x)
    fns["F.linear"] = functools.partial(F.linear, x1, A)
    ms = do_bench_in_turn(fns, rounds=3)
    best = min(GEMV_CONFIGS, key=lambda c: ms[c])
    moved = 2 * (N * K + K + N)
    return N, K, best, ms[best], ms["torch.matmul"], ms["F.linear"], moved


def splitk_configs(M, N, K, sms):
    """(combine, block_N, split) to try: splits 1..16 leaving at least 2 K steps each, and the split
    choose_split_k picks for each tile width; the "reduce" combine only with a split."""
    k_blocks = math.ceil(K / SPLITK_BLOCK_K)
    configs = []
    for block_N in SPLITK_BLOCK_NS:
        auto = choose_split_k(M, N, K, default_block_m(M), block_N, SPLITK_BLOCK_K, sms)
        splits = sorted({s for s in SPLITS if k_blocks // s >= 2} | {auto})
        configs += [(combine, block_N, s) for combine in ("atomic", "reduce") for s in splits]
    return [c for c in configs if c[0] == "atomic" or c[2] > 1]


def bench_splitk(M, N, K, sms):
    A, B = randn(M, K), randn(K, N)
    block_M = default_block_m(M)
    configs = splitk_configs(M, N, K, sms)
    stages = {block_N: default_stages(block_M, block_N, SPLITK_BLOCK_K) for block_N in SPLITK_BLOCK_NS}
    args = [(M, N, K, block_M, bn, SPLITK_BLOCK_K, split, combine, 128, stages[bn]) for combine, bn, split in configs]
    kernels = matmul_splitk.par_compile(args)
    fns = {}
    for config, kernel in zip(configs, kernels):
        a, b = randn(M, K), randn(K, N)
        torch.testing.assert_close(kernel(a, b).float(), ref_matmul(a, b), rtol=1e-2, atol=5e-2)
        fns[config] = functools.partial(kernel, A, B)
    fns["torch"] = functools.partial(torch.matmul, A, B)
    ms = do_bench_in_turn(fns, rounds=3)
    # The example's defaults: 64-column tiles, unsplit and with choose_split_k's split.
    auto = choose_split_k(M, N, K, block_M, 64, SPLITK_BLOCK_K, sms)
    rows = []
    for combine in ("atomic", "reduce"):
        best = min((c for c in configs if c[0] == combine), key=lambda c: ms[c])
        out_bytes = (4 if combine == "atomic" else 2) * M * N
        moved = 2 * (M * K + K * N) + out_bytes
        at_auto = ms[combine, 64, auto] if auto > 1 or combine == "atomic" else float("nan")
        rows.append((M, N, K, combine, ms["atomic", 64, 1], auto, at_auto, best[1:], ms[best], ms["torch"], moved))
    return rows


def print_gemv(rows):
    print(f"GEMV y = A @ x, fp16, HBM peak {PEAK_HBM_GBS} GB/s; best of the tiles {GEMV_TILES}, prefetch or not")
    print(
        f"{'N':>6} {'K':>6} {'best tile, prefetch':>26} {'ours us':>8} {'GB/s':>6} {'%peak':>6} "
        f"{'matmul us':>9} {'GB/s':>6} {'linear us':>9} {'GB/s':>6} {'vs matmul':>9} {'vs linear':>9}"
    )
    for N, K, tile, ours, mv, linear, moved in rows:
        print(
            f"{N:6d} {K:6d} {str(tile):>26} {ours * 1e3:8.1f} {gbs(moved, ours):6.0f} "
            f"{gbs(moved, ours) / PEAK_HBM_GBS:6.1%} {mv * 1e3:9.1f} {gbs(moved, mv):6.0f} "
            f"{linear * 1e3:9.1f} {gbs(moved, linear):6.0f} {mv / ours:9.3f} {linear / ours:9.3f}"
        )


def print_splitk(rows, sms):
    print(
        f"\nSplit-K GEMM C = A @ B, fp16 in, {SPLITK_BLOCK_K}-deep K steps, {sms} SMs; atomic: fp32 C, reduce: "
        f"fp16 C; split 1 and auto: 64-column tiles; best: (tile columns, split); speedup = torch / best"
    )
    print(
        f"{'M':>3} {'N':>6} {'K':>6} {'combine':>7} {'tiles':>5} {'split 1 us':>10} {'auto':>4} {'us':>7} "
        f"{'best':>9} {'us':>7} {'GB/s':>6} {'torch us':>8} {'GB/s':>6} {'speedup':>7}"
    )
    for M, N, K, combine, one, auto, at_auto, best, at_best, torch_ms, moved in rows:
        tiles = math.ceil(M / default_block_m(M)) * math.ceil(N / 64)
        print(
            f"{M:3d} {N:6d} {K:6d} {combine:>7} {tiles:5d} {one * 1e3:10.1f} {auto:4d} {at_auto * 1e3:7.1f} "
            f"{str(best):>9} {at_best * 1e3:7.1f} {gbs(moved, at_best):6.0f} {torch_ms * 1e3:8.1f} "
            f"{gbs(moved, torch_ms):6.0f} {torch_ms / at_best:7.3f}"
        )


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--quick", action="store_true", help="two shapes of each")
    parser.add_argument("--only", choices=["gemv", "splitk"], default=None)
    args = parser.parse_args()
    gemv_shapes = GEMV_SHAPES[:2] if args.quick else GEMV_SHAPES
    splitk_shapes = SPLITK_SHAPES[:2] if args.quick else SPLITK_SHAPES
    sms = num_sms()
    if args.only != "splitk":
        print_gemv([bench_gemv(N, K) for N, K in gemv_shapes])
    if args.only != "gemv":
        print_splitk([row for M, N, K in splitk_shapes for row in bench_splitk(M, N, K, sms)], sms)


if __name__ == "__main__":
    main()

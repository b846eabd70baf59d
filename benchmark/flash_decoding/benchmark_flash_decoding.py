"""Flash decoding (paged KV cache, GQA, split-KV + combine) beside torch SDPA, same run, same inputs.

H=32 query heads, H_kv=8, D=128, fp16, 64-token pages handed out in a random order; B = 1, 8, 64 with
KV lengths 4096, 16384, 65536 (B=64: 65536 only in the mix), and mixed (the three lengths in turn).
For each row: our kernel with the split `choose_num_splits` picks (16 rows, 2 stages) and the best
of a few splits, row paddings (16: mma.sync fed by cp.async; 64: wgmma fed by TMA on Hopper) and
pipeline depths; torch SDPA on K/V already gathered into dense [B, H_kv, max_len, D] (a boolean mask
for the shorter sequences of a mixed batch: SDPA then reads max_len keys for every sequence), and the
same SDPA with the gather (cache[block_table], what a paged cache costs torch). Bandwidth is the KV
bytes the sequences hold (sum of lengths x H_kv x D x 2 x 2 bytes) over the time, against the H200's
4.8 TB/s; the target is 80%. The L2 is flushed before each run: a decode step reads its KV cache from
HBM.

Every function of a row is timed in turn, median of rounds (the GPU's clocks drift between runs).
Run on a GPU machine:
    python benchmark/flash_decoding/benchmark_flash_decoding.py [--quick]
"""

import argparse
import functools
import os
import sys

import torch
import torch.nn.functional as F

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "examples", "flash_decoding"))
from decode_common import PEAK_HBM_GBS, gather_dense, gbs, kv_bytes, make_inputs, num_sms, ref_decode  # noqa: E402
from example_flash_decoding import choose_num_splits, flash_decoding  # noqa: E402

from tilelang.profiler import do_bench_in_turn  # noqa: E402

HEADS, KV_HEADS, DIM, PAGE = 32, 8, 128, 64
LENGTHS = (4096, 16384, 65536)
# Rows the group of query heads is padded to: 16 rows are mma.sync fed by cp.async; 64 rows on Hopper
# are wgmma fed by a TMA producer warpgroup.
ROWS = (16, 64)


def cases(quick):
    """(name, lengths): each batch size with each length alone, then mixed (B=64 at 65536 only mixed:
    alone it would be 17 GB of cache, 34 GB more gathered for SDPA)."""
    rows = []
    for B in (1, 8, 64):
        for n in LENGTHS[:2] if quick or B == 64 else LENGTHS:
            rows.append((f"B={B} L={n}", [n] * B))
        if B > 1:
            rows.append((f"B={B} mixed", [LENGTHS[i % 3] for i in range(B)]))
    return rows


def sdpa(q, K, V, mask):
    """Decode attention on dense K, V [B, H_kv, L, D] (GQA in SDPA), q [B, H, D]."""
    return F.scaled_dot_product_attention(q.unsqueeze(2), K, V, attn_mask=mask, enable_gqa=True).squeeze(2)


def dense(cache, block_table, max_len):
    return gather_dense(cache, block_table)[:, :max_len].transpose(1, 2)  # [B, H_kv, max_len, D]


def bench(lengths, sms):
    q, k_cache, v_cache, table, seqlens = make_inputs(lengths, HEADS, KV_HEADS, DIM, PAGE, "cuda")
    B, max_pages = table.shape
    auto = choose_num_splits(B, KV_HEADS, max(lengths), sms)
    splits = sorted({max(1, auto // 2), auto, 2 * auto})
    configs = [(s, rows, 2) for s in splits for rows in ROWS] + [(auto, rows, 3) for rows in ROWS]
    nb = k_cache.shape[0]
    args = [(B, HEADS, KV_HEADS, DIM, PAGE, nb, max_pages, s, rows, 64, 128, st) for s, rows, st in configs]
    ref = ref_decode(q, k_cache, v_cache, table, seqlens)
    fns = {}
    for config, kernel in zip(configs, flash_decoding.par_compile(args)):
        call = functools.partial(kernel, q, k_cache, v_cache, table, seqlens)
        torch.testing.assert_close(call().float(), ref, rtol=1e-2, atol=1e-2)
        fns[config] = call
    max_len = max(lengths)
    # Keys past a sequence's length are masked (no mask when all lengths are equal: the flash backend).
    mask = None
    if min(lengths) < max_len:
        mask = (torch.arange(max_len, device="cuda")[None, :] < seqlens[:, None].long())[:, None, None, :]
    K, V = dense(k_cache, table, max_len).contiguous(), dense(v_cache, table, max_len).contiguous()
    try:
        torch.testing.assert_close(sdpa(q, K, V, mask).float(), ref, rtol=1e-2, atol=1e-2)
        fns["sdpa"] = functools.partial(sdpa, q, K, V, mask)
        fns["gather+sdpa"] = lambda: sdpa(q, dense(k_cache, table, max_len), dense(v_cache, table, max_len), mask)
    except RuntimeError as e:  # (no SDPA backend for this shape and mask on this torch)
        print(f"  torch SDPA: {e}".splitlines()[0])
        fns["sdpa"] = fns["gather+sdpa"] = None
    ms = do_bench_in_turn(fns, rounds=3)
    best = min(configs, key=lambda c: ms[c])
    return auto, ms[auto, 16, 2], best, ms[best], ms["sdpa"], ms["gather+sdpa"], kv_bytes(seqlens, KV_HEADS, DIM)


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--quick", action="store_true", help="lengths 4096 and 16384 only")
    args = parser.parse_args()
    sms = num_sms()
    print(
        f"Flash decoding, H={HEADS} H_kv={KV_HEADS} D={DIM} fp16, {PAGE}-token pages, {sms} SMs; HBM peak "
        f"{PEAK_HBM_GBS} GB/s; auto: choose_num_splits, the example's 16 rows and 2 stages; best: (splits, rows, "
        f"stages) of splits auto/2, auto, 2 x auto with rows {ROWS}, and 3 stages at auto"
    )
    print(
        f"{'case':>14} {'auto':>4} {'us':>8} {'GB/s':>6} {'%peak':>6} {'best':>12} {'us':>8} {'GB/s':>6} "
        f"{'%peak':>6} {'sdpa us':>8} {'GB/s':>6} {'+gather us':>10} {'vs sdpa':>7}"
    )
    for name, lengths in cases(args.quick):
        auto, at_auto, best, at_best, sdpa_ms, gather_ms, moved = bench(lengths, sms)
        print(
            f"{name:>14} {auto:4d} {at_auto * 1e3:8.1f} {gbs(moved, at_auto):6.0f} "
            f"{gbs(moved, at_auto) / PEAK_HBM_GBS:6.1%} {str(best):>12} {at_best * 1e3:8.1f} "
            f"{gbs(moved, at_best):6.0f} {gbs(moved, at_best) / PEAK_HBM_GBS:6.1%} {sdpa_ms * 1e3:8.1f} "
            f"{gbs(moved, sdpa_ms):6.0f} {gather_ms * 1e3:10.1f} {sdpa_ms / at_best:7.3f}"
        )


if __name__ == "__main__":
    main()

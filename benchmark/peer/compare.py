"""Latencies of two runs of benchmark/peer/run_regressions.sh side by side, one row per kernel:
the wheel's latency over ours (above 1: we are faster), and the geometric mean of those ratios.

    python benchmark/peer/compare.py perf_ours.jsonl perf_anchor.jsonl
"""

import json
import math
import sys


def load(path: str) -> dict:
    out = {}
    with open(path) as f:
        for line in f:
            rec = json.loads(line)
            for r in rec["results"] or []:
                key = f"{rec['file'].replace('regression_', '')}:{r.get('case', '')}:{r.get('name')}"
                out[key] = float(r["latency"])
    return out


def main(ours_path: str, anchor_path: str) -> None:
    ours, anchor = load(ours_path), load(anchor_path)
    ratios = []
    for key in sorted(set(ours) | set(anchor)):
        o, a = ours.get(key), anchor.get(key)
        ratio = a / o if o and a else None
        if ratio:
            ratios.append(ratio)
        fmt = lambda v: f"{v:.5f}" if v else "-"  # noqa: E731
        print(f"{key:70s} ours {fmt(o):>9} wheel {fmt(a):>9} ratio {f'{ratio:.3f}' if ratio else '-'}")
    if ratios:
        geo = math.exp(sum(map(math.log, ratios)) / len(ratios))
        faster = sum(r >= 0.995 for r in ratios)
        print(f"{len(ratios)} kernels timed by both: {faster} at least as fast, geomean {geo:.3f}")


if __name__ == "__main__":
    main(*sys.argv[1:3])

"""RMSNorm and softmax bandwidth (bytes read + written / time) beside torch's, same run, fp16.

Rows of 4096 and 8192 elements, 8192 rows. torch: F.rms_norm and torch.softmax.
Run on a GPU machine: python benchmark/norm/benchmark_norm.py
"""

import os
import sys

import torch
import torch.nn.functional as F

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "..", "examples", "norm"))
sys.path.insert(0, os.path.join(HERE, "..", "..", "examples", "softmax"))
from example_rms_norm import ref_rms_norm, rms_norm  # noqa: E402
from example_softmax import softmax  # noqa: E402

from tilelang.profiler import do_bench  # noqa: E402

CONFIGS = {4096: dict(blk_m=1, threads=256), 8192: dict(blk_m=1, threads=512)}


def main():
    rows = []
    for M, N in [(8192, 4096), (8192, 8192)]:
        x = torch.randn(M, N, device="cuda", dtype=torch.float16)
        w = torch.randn(N, device="cuda", dtype=torch.float16)
        cfg = CONFIGS[N]
        norm = rms_norm(M, N, cfg["blk_m"], cfg["threads"])
        torch.testing.assert_close(norm(x, w), ref_rms_norm(x, w), rtol=1e-2, atol=1e-2)
        moved = 2 * M * N * 2 + N * 2
        rows.append(
            (
                "rms_norm",
                M,
                N,
                do_bench(lambda norm=norm, x=x, w=w: norm(x, w)),
                do_bench(lambda x=x, w=w, N=N: F.rms_norm(x, (N,), w, 1e-6)),
                moved,
            )
        )
        soft = softmax(M, N, cfg["blk_m"], cfg["threads"])
        torch.testing.assert_close(soft(x), torch.softmax(x.float(), -1).half(), rtol=1e-2, atol=1e-3)
        rows.append(
            (
                "softmax",
                M,
                N,
                do_bench(lambda soft=soft, x=x: soft(x)),
                do_bench(lambda x=x: torch.softmax(x, -1)),
                2 * M * N * 2,
            )
        )
    print(
        f"{'op':9} {'rows':>5} {'cols':>5} {'tilelang ms':>11} {'GB/s':>6} {'torch ms':>9} {'GB/s':>6} {'speedup':>7}"
    )
    for name, M, N, ours, theirs, moved in rows:
        print(
            f"{name:9} {M:5d} {N:5d} {ours:11.4f} {moved / ours / 1e6:6.0f} {theirs:9.4f} "
            f"{moved / theirs / 1e6:6.0f} {theirs / ours:7.3f}"
        )


if __name__ == "__main__":
    main()

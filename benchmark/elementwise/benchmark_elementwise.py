"""Bandwidth of tilelang's element-wise add beside torch's `a + b`, same run, same inputs.

Prints one row per (dtype, size): time and achieved bandwidth (bytes read + written / time) of each.
Run on a GPU machine: python benchmark/elementwise/benchmark_elementwise.py
"""

import argparse
import os
import sys

import torch

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "..", "examples", "elementwise"))
from example_elementwise_add import vector_add  # noqa: E402

from tilelang.profiler import do_bench  # noqa: E402


def bench(n_bytes_per_operand: int, dtype: torch.dtype, block: int, threads: int):
    n = n_bytes_per_operand // torch.tensor([], dtype=dtype).element_size()
    a = torch.randn(n, device="cuda").to(dtype)
    b = torch.randn(n, device="cuda").to(dtype)
    kernel = vector_add(n, block=block, threads=threads, dtype=str(dtype).removeprefix("torch."))
    c = kernel(a, b)
    torch.testing.assert_close(c, a + b)
    moved = 3 * n * a.element_size()
    ours = do_bench(lambda: kernel(a, b))
    theirs = do_bench(lambda: a + b)
    return n, ours, theirs, moved


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--mib", type=int, default=256, help="MiB per operand")
    args = parser.parse_args()
    rows = []
    for dtype, block, threads in [(torch.float32, 1024, 256), (torch.float16, 2048, 256), (torch.float32, 2048, 256)]:
        n, ours, theirs, moved = bench(args.mib << 20, dtype, block, threads)
        rows.append((str(dtype).removeprefix("torch."), n, block, threads, ours, theirs, moved))
    print(
        f"{'dtype':8} {'elements':>11} {'tile':>5} {'thr':>4} {'tilelang ms':>11} {'GB/s':>7} "
        f"{'torch ms':>9} {'GB/s':>7} {'ratio':>6}"
    )
    for dt, n, block, threads, ours, theirs, moved in rows:
        print(
            f"{dt:8} {n:11d} {block:5d} {threads:4d} {ours:11.4f} {moved / ours / 1e6:7.0f} "
            f"{theirs:9.4f} {moved / theirs / 1e6:7.0f} {theirs / ours:6.3f}"
        )


if __name__ == "__main__":
    main()

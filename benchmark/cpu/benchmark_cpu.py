"""The CPU target beside torch on the CPU, same process, same cores: element-wise add (target:
within 2x of torch) and GEMM fp32 512^3 (target: within 5x of torch's matmul), plus the GEMM
example's fp16 kernel for reference. Median of repeated calls after a warm-up.

    python benchmark/cpu/benchmark_cpu.py [--threads N]
"""

import argparse
import os
import statistics
import sys
import time

import torch

import tilelang

EXAMPLES = os.path.join(os.path.dirname(__file__), "..", "..", "examples")
sys.path[:0] = [os.path.join(EXAMPLES, "elementwise"), os.path.join(EXAMPLES, "gemm")]
from example_elementwise_add import vector_add  # noqa: E402
from example_gemm import matmul  # noqa: E402  (the GPU example's GEMM, unchanged: on the CPU each block is a task)


def median_ms(fn, repeat=30):
    fn()
    times = []
    for _ in range(repeat):
        start = time.perf_counter()
        fn()
        times.append(time.perf_counter() - start)
    return statistics.median(times) * 1e3


def main(threads=None):
    threads = threads or os.cpu_count()
    torch.set_num_threads(threads)
    os.environ["TVM_NUM_THREADS"] = str(threads)  # TVM's pool: one worker per core, as torch
    rows = []
    with tilelang.use_target("cpu"):
        n = 1 << 22
        a, b = torch.randn(n), torch.randn(n)
        add = vector_add(n)
        torch.testing.assert_close(add(a, b), a + b)
        ours, ref = median_ms(lambda: add(a, b)), median_ms(lambda: a + b)
        rows.append(("add fp32 4M", "2x", ours, ref))
        shapes = ((512, 512, 512, (64, 64, 32), "float32"), (1024, 1024, 1024, (64, 128, 64), "float32"))
        for M, N, K, blocks, dtype in shapes:
            x, y = torch.randn(M, K), torch.randn(K, N)
            best = None
            for cfg in (blocks, (32, 64, 64), (64, 128, 64)):
                kernel = matmul(M, N, K, *cfg, dtype=dtype, accum_dtype="float32", num_stages=2)
                torch.testing.assert_close(kernel(x, y), x @ y, rtol=1e-4, atol=1e-3)
                t = median_ms(lambda kernel=kernel, x=x, y=y: kernel(x, y), 10)
                best = t if best is None else min(best, t)
            rows.append((f"gemm {dtype} {M}x{N}x{K}", "5x", best, median_ms(lambda x=x, y=y: x @ y, 10)))
    print(f"CPU: {os.cpu_count()} cores, {threads} threads; torch {torch.__version__}")
    print(f"{'kernel':<26}{'tilelang ms':>12}{'torch ms':>10}{'ours/torch':>12}{'target':>8}")
    for name, target, ours, ref in rows:
        print(f"{name:<26}{ours:>12.3f}{ref:>10.3f}{ours / ref:>12.2f}{'<=' + target:>8}")


if __name__ == "__main__":
    parser = argparse.ArgumentParser()
    parser.add_argument("--threads", type=int, default=None)
    main(parser.parse_args().threads)

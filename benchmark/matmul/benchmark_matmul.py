"""GEMM throughput of tilelang's example kernel beside torch.matmul (cuBLAS), same run.

For each shape and dtype it tries a few tile configurations and reports the best, with the ratio to
cuBLAS. Run on a GPU machine:
    python benchmark/matmul/benchmark_matmul.py [--quick] [--no-wgmma] [--no-tma] [--no-ws]
On Hopper it also tries the persistent example (one block per SM walking the tiles).
"""

import argparse
import functools
import os
import sys
import time

import torch

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "examples", "gemm"))
from example_gemm import matmul  # noqa: E402
from example_gemm_persistent import matmul_persistent  # noqa: E402

import tilelang  # noqa: E402
from tilelang.profiler import do_bench_in_turn  # noqa: E402

# (block_M, block_N, block_K, threads, num_stages, rasterization panel): the best of sweeps on the
# H200 over tiles 64..256, 128/256 threads, 2-8 stages and panels 0/4/8/16. With TMA and a producer
# warpgroup (Hopper), 128 x 256 tiles over two consumer warpgroups lead; with cp.async, 128 x 128.
HOPPER_CONFIGS = [
    (128, 256, 64, 256, 4, 8),
    (128, 256, 64, 256, 4, 16),
    (128, 256, 64, 256, 3, 8),
    (128, 128, 64, 128, 4, 8),
]
CONFIGS = [(128, 128, 32, 128, 3, 8), (128, 128, 64, 128, 3, 8), (128, 128, 32, 128, 4, 8), (128, 256, 64, 256, 3, 8)]
# The persistent example (examples/gemm/example_gemm_persistent.py; the last entry: tile rows per
# group) also tried on Hopper, where its producer loads the next tile during this one's epilogue.
PERSISTENT_CONFIGS = [(128, 256, 64, 256, 4, 8)]
# A GEMM as users write it (issue 22): no T.use_swizzle (panel 0: the compiler's choice), 3 stages;
# reported on its own row beside the tuned best.
PLAIN_CONFIGS = [(128, 128, 32, 128, 3, 0), (128, 128, 64, 128, 3, 0), (128, 256, 64, 256, 3, 0)]
SHAPES = [(4096, 4096, 4096), (8192, 8192, 8192), (4096, 28672, 8192), (8192, 4096, 14336)]


def print_cold_compiles(dtype, pass_configs):
    """Cold compiles (issue 22), each phase timed: the plain 128 x 256 GEMM built from nothing in a
    cache folder chosen after import (the precompiled host header not there yet: it is built beside
    the compile, in the background), then the plain 128 x 128 one in that folder, as every later new
    kernel is built."""
    import tempfile

    from tilelang import env
    from tilelang.codegen import host_pch

    was_enabled, folder = env.is_cache_enabled(), os.environ.get("TILELANG_CACHE_DIR")
    tilelang.disable_cache()  # (no kernel from this process's memory either)
    try:
        with tempfile.TemporaryDirectory() as tmp:
            os.environ["TILELANG_CACHE_DIR"] = tmp
            for label, config in (("first", PLAIN_CONFIGS[2]), ("next", PLAIN_CONFIGS[0])):
                bm, bn, bk, threads, stages, panel = config
                start = time.perf_counter()
                func = matmul.factory(4096, 4096, 4096, bm, bn, bk, dtype, "float", threads, stages, panel)
                kernel = tilelang.compile(func, out_idx=[-1], pass_configs=pass_configs)
                kernel._ensure_built()
                phases = ", ".join(f"{k} {v:.2f}" for k, v in kernel.compile_times.items() if k != "wall")
                print(f"cold compile, {label} kernel ({bm}x{bn}): {time.perf_counter() - start:.2f} s ({phases})")
                host_pch.wait()
    finally:
        if folder is None:
            os.environ.pop("TILELANG_CACHE_DIR", None)
        else:
            os.environ["TILELANG_CACHE_DIR"] = folder
        if was_enabled:
            tilelang.enable_cache()


FRESH_PROCESS = """
import os, sys, time
start = time.perf_counter()
sys.path.insert(0, {examples!r})
import tilelang
imported = time.perf_counter()
from example_gemm import matmul
kernel = tilelang.compile(matmul.factory(4096, 4096, 4096, {config}, {dtype!r}, "float", {threads}, {stages}, {panel}),
                          out_idx=[-1])
kernel._ensure_built()
done = time.perf_counter()
phases = ", ".join(f"{{k}} {{v:.2f}}" for k, v in kernel.compile_times.items() if k != "wall")
print(f"import tilelang {{imported - start:.2f}} s, then the kernel {{done - imported:.2f}} s ({{phases}})")
"""


def print_fresh_process_compile(dtype):
    """A user's first kernel: a new process, an empty cache folder, `import tilelang` included (the
    host unit's precompiled header is built while TVM is imported, `codegen/host_pch.start_early`)."""
    import subprocess
    import tempfile

    bm, bn, bk, threads, stages, panel = PLAIN_CONFIGS[2]
    examples = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "examples", "gemm")
    code = FRESH_PROCESS.format(examples=examples, config=f"{bm}, {bn}, {bk}", dtype=dtype, threads=threads,
                                stages=stages, panel=panel)  # fmt: skip
    with tempfile.TemporaryDirectory() as tmp:
        env = {**os.environ, "TILELANG_CACHE_DIR": tmp}
        out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True)
    last = (out.stdout.strip().splitlines() or [out.stderr.strip()[-300:]])[-1]
    print(f"cold compile, new process and empty cache ({bm}x{bn}): {last}")


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--quick", action="store_true", help="fp16 square shapes and two configurations only")
    parser.add_argument("--no-wgmma", action="store_true", help="force mma.sync on Hopper (tl.disable_wgmma)")
    parser.add_argument("--no-tma", action="store_true", help="cp.async copies on Hopper (tl.disable_tma_lower)")
    parser.add_argument("--no-ws", action="store_true", help="no producer warpgroup (tl.disable_warp_specialized)")
    args = parser.parse_args()
    dtypes = ["float16"] if args.quick else ["float16", "bfloat16"]
    shapes = SHAPES[:2] if args.quick else SHAPES
    hopper = torch.cuda.get_device_capability() == (9, 0) and not (args.no_wgmma or args.no_tma)
    configs = HOPPER_CONFIGS if hopper else CONFIGS
    configs = configs[:2] if args.quick else configs
    configs = [("tiles", *c) for c in configs] + [("persistent", *c) for c in (PERSISTENT_CONFIGS if hopper else [])]
    plain = [("tiles", *c) for c in PLAIN_CONFIGS]
    num_sms = torch.cuda.get_device_properties(0).multi_processor_count
    pass_configs = {
        "tl.disable_wgmma": args.no_wgmma,
        "tl.disable_tma_lower": args.no_tma,
        "tl.disable_warp_specialized": args.no_ws,
    }
    print_fresh_process_compile(dtypes[0])
    print_cold_compiles(dtypes[0], pass_configs)
    rows = []
    for dtype in dtypes:
        for M, N, K in shapes:
            a = torch.randn(M, K, device="cuda", dtype=getattr(torch, dtype))
            b = torch.randn(K, N, device="cuda", dtype=getattr(torch, dtype))
            fns, compile_s = {}, {}
            for config in configs + plain:
                kind, bm, bn, bk, threads, stages, panel = config
                start = time.time()
                if kind == "persistent":
                    args_ = (M, N, K, bm, bn, bk, num_sms, dtype, "float", threads, stages, panel)
                    func = matmul_persistent.factory(*args_)
                else:
                    func = matmul.factory(M, N, K, bm, bn, bk, dtype, "float", threads, stages, panel)
                kernel = tilelang.compile(func, out_idx=[-1], pass_configs=pass_configs)
                kernel._ensure_built()
                compile_s[config] = time.time() - start
                # Fresh inputs for the check: a kernel that wrote nothing must not pass on a recycled
                # output buffer that still holds an earlier configuration's (correct) result.
                x, y = torch.randn_like(a), torch.randn_like(b)
                torch.testing.assert_close(kernel(x, y), x @ y, rtol=2e-2, atol=2e-1)
                fns[config] = functools.partial(kernel, a, b)
            fns["cuBLAS"] = functools.partial(torch.matmul, a, b)
            # Every configuration and cuBLAS timed in turn (the GPU's clocks drift).
            ms = do_bench_in_turn(fns, rounds=3, rep=60)
            flops = 2 * M * N * K
            for label, group in (("tuned", configs), ("plain", plain)):
                best = min(group, key=lambda c: ms[c])
                tf = flops / ms[best] / 1e9
                rows.append((dtype, M, N, K, label, best, tf, flops / ms["cuBLAS"] / 1e9, compile_s[best]))
    print(
        f"{'dtype':9} {'M':>5} {'N':>6} {'K':>6} {'kernel':>6} {'best config':>38} {'tilelang TF/s':>13} "
        f"{'cuBLAS TF/s':>11} {'ratio':>6} {'compile s':>9}"
    )
    for dtype, M, N, K, label, tile, ours, theirs, comp in rows:
        print(
            f"{dtype:9} {M:5d} {N:6d} {K:6d} {label:>6} {str(tile):>38} {ours:13.0f} {theirs:11.0f} "
            f"{ours / theirs:6.3f} {comp:9.1f}"
        )


if __name__ == "__main__":
    main()

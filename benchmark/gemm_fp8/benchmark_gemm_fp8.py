"""fp8 GEMM throughput of tilelang's examples beside cuBLASLt (torch._scaled_mm), same run.

Two kernels, both e4m3 with A (M x K) and B (N x K) K-major, bf16 output:
- per-tensor scales (examples/gemm_fp8/example_gemm_fp8.py, its tiled and persistent kernels),
  beside cuBLASLt's per-tensor fp8 GEMM with fast accumulation (`use_fast_accum=True`: the tensor
  cores' own accumulation, as ours) and, for reference, with cuBLASLt's periodic promotion to fp32
  (`use_fast_accum=False`);
- 1 x 128 / 128 x 128 block scales (example_gemm_fp8_blockscale.py, DeepGEMM's promotion every
  K block), beside cuBLASLt's block-scaled GEMM where torch and CUDA offer it (CUDA 12.9+, sm_90)
  and the per-tensor cuBLASLt figure as the bound (same tensor-core work, no scales to apply).

For each shape a few tile configurations of each kernel are timed in turn with cuBLASLt (the GPU's
clocks drift) and the best is reported with its ratio. The best configuration per shape and GPU is
kept in $TILELANG_CACHE_DIR/benchmark_gemm_fp8.json; a later run times only that one (the kernels
themselves come from tilelang's disk cache) unless --search is given. Run on a GPU machine:
    python benchmark/gemm_fp8/benchmark_gemm_fp8.py [--quick] [--search]
"""

import argparse
import functools
import json
import os
import sys
import time

import torch

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "examples", "gemm_fp8"))
from example_gemm_fp8 import gemm_fp8, gemm_fp8_persistent  # noqa: E402
from example_gemm_fp8_blockscale import gemm_fp8_blockscale  # noqa: E402
from fp8_quant import (  # noqa: E402
    BLOCK,
    assert_close,
    quantize_1x128,
    quantize_128x128,
    quantize_per_tensor,
    reference_blockscale,
    reference_per_tensor,
)

from tilelang import env  # noqa: E402
from tilelang.profiler import do_bench_in_turn  # noqa: E402

# Per-tensor: (kernel, block_M, block_N, block_K, threads, num_stages, rasterization panel or, for
# the persistent kernel, tile rows per group). 128-byte fp8 rows (block_K = 128) for the widest
# swizzle; 128 x 256 over two consumer warpgroups, as the fp16 GEMM's best (benchmark/matmul). With
# 4 stages the C tile goes out without staging in shared memory (no room left); the persistent
# kernel's producer loads the next tile during this one's epilogue.
PER_TENSOR_CONFIGS = [
    ("tiles", 128, 256, 128, 256, 3, 8),
    ("tiles", 128, 256, 128, 256, 4, 8),
    ("tiles", 128, 256, 128, 256, 3, 16),
    ("tiles", 256, 128, 128, 256, 3, 8),
    ("tiles", 128, 128, 128, 256, 5, 8),
    ("persistent", 128, 256, 128, 256, 4, 8),
    ("persistent", 128, 256, 128, 256, 3, 8),
]
# Block scales: (block_M, block_N, threads, num_stages, panel); block_K is the scale block, 128.
# Two fp32 accumulators per thread bound the tile: 128 x 128 over two warpgroups (they take turns
# at the tensor cores, one promoting while the other multiplies), or 192 x 128 over three.
BLOCKSCALE_CONFIGS = [
    (128, 128, 256, 4, 8),
    (128, 128, 256, 6, 8),
    (192, 128, 384, 4, 8),
    (64, 256, 256, 4, 8),
]
SHAPES = [(4096, 4096, 4096), (8192, 8192, 8192), (4096, 28672, 8192), (8192, 4096, 14336)]
CACHE = os.path.join(env.cache_dir(), "benchmark_gemm_fp8.json")


def load_cache():
    try:
        with open(CACHE) as f:
            return json.load(f)
    except (OSError, ValueError):
        return {}


def save_cache(cache):
    os.makedirs(os.path.dirname(CACHE), exist_ok=True)
    with open(CACHE + ".tmp", "w") as f:
        json.dump(cache, f, indent=1)
    os.replace(CACHE + ".tmp", CACHE)


def inputs(M, N, K):
    """Both kernels' operands from the same random A and B: {kind: (a, scale(s)_a, b, scale(s)_b)},
    the block scales as fp8_quant makes them, A's (M, K/128) and B's (N/128, K/128)."""
    a, b = torch.randn(M, K, device="cuda"), torch.randn(N, K, device="cuda")
    return {
        "per-tensor": (*quantize_per_tensor(a), *quantize_per_tensor(b)),
        "blockscale": (*quantize_1x128(a), *quantize_128x128(b)),
    }


def kernel_args(kind, operands):
    """A kernel's arguments, laid out before any timing: the block-scale kernel takes A's scales
    K-block-major, (K/128, M)."""
    a, sa, b, sb = operands
    return (a, b, sa, sb) if kind == "per-tensor" else (a, b, sa.T.contiguous(), sb)


def cublas_args(kind, operands):
    """torch._scaled_mm's arguments: B as a K x N column-major view; block scales A's outer-dim-major
    (M, K/128) and B's as (K/128, N/128)."""
    a, sa, b, sb = operands
    return (a, b.T, sa, sb) if kind == "per-tensor" else (a, b.T, sa.T.contiguous().T, sb.T)


def compile_checked(kind, config, shape, operands, ref):
    """Compile one configuration and check it on `operands` (fresh ones) against `ref`."""
    M, N, K = shape
    if kind == "per-tensor":
        which, bm, bn, bk, threads, stages, panel = config
        if which == "persistent":
            num_sms = torch.cuda.get_device_properties(0).multi_processor_count
            kernel = gemm_fp8_persistent(M, N, K, num_sms, bm, bn, bk, "bfloat16", threads, stages, panel)
        else:
            kernel = gemm_fp8(M, N, K, bm, bn, bk, "bfloat16", threads, stages, panel)
    else:
        bm, bn, threads, stages, panel = config
        kernel = gemm_fp8_blockscale(M, N, K, bm, bn, "bfloat16", threads, stages, panel)
    out = kernel(*kernel_args(kind, operands))
    # The per-tensor kernel leaves the whole K to the tensor cores' accumulation.
    assert_close(out, ref, tensor_core_depth=K if kind == "per-tensor" else BLOCK)
    # A later configuration that wrote nothing must not pass on this buffer, recycled by torch.
    out.zero_()
    del out
    return kernel


def bench_shape(shape, configs):
    """Time every configuration of `configs` (kind -> list) and cuBLASLt in turn on one shape.
    Returns ({kind: best config}, {name: TFLOP/s}, {(kind, config): compile seconds}); a
    configuration that fails to compile or to match the reference is reported and left out."""
    M, N, K = shape
    timed, check = inputs(M, N, K), inputs(M, N, K)
    refs = {
        "per-tensor": reference_per_tensor(*check["per-tensor"]),
        "blockscale": reference_blockscale(*check["blockscale"]),
    }
    fns, compile_s, ok = {}, {}, {kind: [] for kind in configs}
    for kind, group in configs.items():
        args = kernel_args(kind, timed[kind])
        for config in group:
            start = time.time()
            try:
                kernel = compile_checked(kind, config, shape, check[kind], refs[kind])
            except Exception as e:  # noqa: BLE001 (reported, and the other configurations still run)
                print(f"{kind} {shape} {config} left out: {type(e).__name__}: {str(e)[:300]}")
                continue
            compile_s[(kind, config)] = time.time() - start
            fns[(kind, config)] = functools.partial(kernel, *args)
            ok[kind].append(config)
    # cuBLASLt checked too (the operands' layout as passed; its accumulation allowed the whole K).
    scaled_mm = functools.partial(torch._scaled_mm, out_dtype=torch.bfloat16)
    assert_close(scaled_mm(*cublas_args("per-tensor", check["per-tensor"])), refs["per-tensor"], tensor_core_depth=K)
    pt = cublas_args("per-tensor", timed["per-tensor"])
    fns["cuBLASLt"] = functools.partial(scaled_mm, *pt, use_fast_accum=True)
    fns["cuBLASLt promoted"] = functools.partial(scaled_mm, *pt)
    try:  # needs CUDA 12.9+ and sm_90
        out = scaled_mm(*cublas_args("blockscale", check["blockscale"]))
        assert_close(out, refs["blockscale"], tensor_core_depth=K)
        fns["cuBLASLt block"] = functools.partial(scaled_mm, *cublas_args("blockscale", timed["blockscale"]))
    except (RuntimeError, AssertionError) as e:
        print(f"cuBLASLt's block-scaled GEMM not timed: {str(e).strip().splitlines()[0][:200]}")
        fns["cuBLASLt block"] = None
    del refs, check
    torch.cuda.empty_cache()
    ms = do_bench_in_turn(fns, rounds=3, rep=60)
    tflops = {name: 2 * M * N * K / t / 1e9 for name, t in ms.items()}
    best = {kind: max(group, key=lambda c: tflops[(kind, c)]) for kind, group in ok.items() if group}
    # Every configuration's figure, for pruning the lists above.
    figures = ", ".join(f"{name}: {tf:.0f}" for name, tf in tflops.items() if isinstance(name, str))
    print(f"{M} x {N} x {K} ({figures})")
    for kind, group in ok.items():
        for config in group:
            print(f"  {kind:10} {str(config):40} {tflops[(kind, config)]:6.0f} TFLOP/s")
    return best, tflops, compile_s


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--quick", action="store_true", help="the square shapes and two configurations each")
    parser.add_argument("--search", action="store_true", help="time every configuration even if a best is cached")
    args = parser.parse_args()
    assert torch.cuda.get_device_capability() >= (8, 9), "fp8 tensor cores need sm_89 or newer"
    shapes = SHAPES[:2] if args.quick else SHAPES
    all_configs = {"per-tensor": PER_TENSOR_CONFIGS, "blockscale": BLOCKSCALE_CONFIGS}
    if args.quick:
        all_configs = {kind: group[:2] for kind, group in all_configs.items()}
    gpu = torch.cuda.get_device_name()
    cache = load_cache()
    rows = []
    for shape in shapes:
        key = f"{gpu} {shape}"
        cached = cache.get(key)
        if cached and not args.search:
            configs = {kind: [tuple(c)] for kind, c in cached.items()}
        else:
            configs = all_configs
        best, tf, compile_s = bench_shape(shape, configs)
        cache[key] = {kind: list(c) for kind, c in best.items()}
        save_cache(cache)
        for kind, config in best.items():
            theirs = tf["cuBLASLt block"] if kind == "blockscale" else tf["cuBLASLt"]
            rows.append((kind, *shape, config, tf[(kind, config)], theirs, tf["cuBLASLt"], tf["cuBLASLt promoted"],
                         compile_s[(kind, config)]))  # fmt: skip
    print(f"GPU: {gpu}; TFLOP/s (2*M*N*K / median time); bf16 output")
    print("per-tensor rows: cuBLASLt = the per-tensor fp8 GEMM with fast accumulation (ours accumulates the same way);")
    print("blockscale rows: cuBLASLt = its 1x128/128x128 block-scaled GEMM (nan: not available here), and")
    print("'/ pt' = the ratio to the per-tensor fast-accumulation figure, the bound for block scales.")
    print(
        f"{'kernel':10} {'M':>5} {'N':>6} {'K':>6} {'best config':>40} {'tilelang':>8} {'cuBLASLt':>8} "
        f"{'ratio':>6} {'pt fast':>7} {'/ pt':>6} {'pt promoted':>11} {'compile s':>9}"
    )
    for kind, M, N, K, config, ours, theirs, pt_fast, pt_promoted, comp in rows:
        print(
            f"{kind:10} {M:5d} {N:6d} {K:6d} {str(config):>40} {ours:8.0f} {theirs:8.0f} {ours / theirs:6.3f} "
            f"{pt_fast:7.0f} {ours / pt_fast:6.3f} {pt_promoted:11.0f} {comp:9.1f}"
        )


if __name__ == "__main__":
    main()

"""Hash the generated CUDA (device and host source) of every example, on sm_80, sm_89 and sm_90a.

A refactoring of the compiler that must not change generated code is checked by running this
before and after and comparing the two outputs (`diff`). No GPU and no nvcc needed: kernels are
lowered and their sources generated, never built.

    python testing/tools/hash_generated_code.py > before.txt     # ... change ...
    python testing/tools/hash_generated_code.py > after.txt && diff before.txt after.txt

`--dump DIR` also writes each source, to see what a difference is.
"""

from __future__ import annotations

import argparse
import hashlib
import os
import sys

ROOT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..")
for sub in ("gemm", "flash_attention", "deepseek_mla", "copy", "elementwise", "norm", "softmax"):
    sys.path.insert(0, os.path.join(ROOT, "examples", sub))
sys.path.insert(0, os.path.join(ROOT, "testing", "python"))

os.environ.setdefault("TILELANG_DISABLE_CACHE", "1")

import tilelang  # noqa: E402

WS_OFF = {"tl.disable_warp_specialized": True}
TMA_OFF = {"tl.disable_tma_lower": True}
WGMMA_OFF = {"tl.disable_wgmma": True}
MULTICAST = {"tl.enable_tma_multicast": True}
STAGING_OFF = {"tl.disable_fragment_store_staging": True}


def cases():
    """(name, jit factory, args, extra pass configs, targets)."""
    import example_elementwise_add as ew
    import example_gemm as gemm
    import example_gemm_persistent as gp
    import example_gqa_fwd_bshd as gqa
    import example_mha_fwd_bhsd as bhsd
    import example_mha_fwd_bshd as bshd
    import example_mla_decode as mla
    import example_mla_decode_ws as mla_ws
    import example_rms_norm as rms
    import example_softmax as sm
    import example_transpose as tr

    every = ("sm_80", "sm_89", "sm_90a")
    hopper = ("sm_90a",)
    yield "transpose", tr.transpose, (1000, 777), {}, every
    yield "vector_add", ew.vector_add, (1000003,), {}, every
    yield "fused_scale_add_relu", ew.fused_scale_add_relu, (1000, 1000), {}, every
    yield "rms_norm", rms.rms_norm, (1000, 4096), {}, every
    yield "softmax", sm.softmax, (1000, 4096), {}, every
    for cfg in [
        (128, 128, 32, "float16", "float", 128, 3, 0),
        (128, 256, 64, "float16", "float", 256, 4, 8),
        (128, 256, 64, "bfloat16", "float", 256, 3, 16),
        (128, 128, 64, "float16", "float", 128, 4, 8),
    ]:
        yield f"gemm{cfg}", gemm.matmul, (4096, 4096, 4096, *cfg), {}, every
        yield f"gemm{cfg}-dyn-edge", gemm.matmul, (1000, 1000, 1000, *cfg), {}, every
    g = (4096, 4096, 4096, 128, 256, 64, "float16", "float", 256, 4, 8)
    for name, extra in [
        ("ws_off", WS_OFF),
        ("tma_off", TMA_OFF),
        ("wgmma_off", WGMMA_OFF),
        ("multicast", MULTICAST),
        ("staging_off", STAGING_OFF),
    ]:
        yield f"gemm-{name}", gemm.matmul, g, extra, hopper
    yield "gemm_persistent", gp.matmul_persistent, (4096, 4096, 4096, 128, 256, 64, 132), {}, every
    yield (
        "gemm_persistent-edge",
        gp.matmul_persistent,
        (1000, 1000, 1000, 128, 128, 64, 132, "float16", "float", 256, 3),
        {},
        every,
    )
    for causal in (False, True):
        for cfg in [(64, 64, 1, 128), (128, 128, 2, 256), (128, 176, 2, 256), (128, 64, 2, 256)]:
            yield f"fa_bshd{cfg}-c{causal}", bshd.flashattn, (8, 32, 4096, 128, causal, *cfg), {}, every
        yield f"fa_bshd-d64-c{causal}", bshd.flashattn, (8, 32, 4096, 64, causal, 128, 128, 2, 256), {}, every
        yield f"fa_bhsd-c{causal}", bhsd.flashattn, (2, 8, 1000, 1000, 128, causal, 128, 128, 2, 256), {}, every
        yield f"fa_gqa-c{causal}", gqa.flashattn, (2, 32, 8, 1024, 128, causal, 128, 128, 2, 256), {}, every
        fa = (8, 32, 4096, 128, causal, 128, 128, 2, 256)
        yield f"fa_bshd-multicast-c{causal}", bshd.flashattn, fa, MULTICAST, hopper
        yield f"fa_bshd-ws_off-c{causal}", bshd.flashattn, fa, WS_OFF, hopper
    for dtype in ("float16", "bfloat16"):
        for cfg in [(64, 64, 1), (64, 64, 2), (64, 64, 4), (32, 64, 4)]:
            yield f"mla{cfg}-{dtype}", mla.mla_decode, (64, 128, 1, 8192, 512, 64, *cfg, dtype), {}, every
        yield f"mla_ws-{dtype}", mla_ws.mla_decode_ws, (64, 128, 8192, 512, 64, 64, dtype), {}, hopper
    import dynamic_kernels as dk

    class Plain:  # a factory that is not a @tilelang.jit one
        def __init__(self, fn, out_idx):
            self.factory, self.out_idx, self.pass_configs = fn, out_idx, None

    yield "dynamic.vector_add", Plain(dk.vector_add, [-1]), (), {}, every
    yield "dynamic.vector_add64", Plain(dk.vector_add, [-1]), (1024, 256, "int64"), {}, every
    import tilelang.language as T

    m, n, k = T.dynamic("m"), T.dynamic("n"), T.dynamic("k")
    yield "dynamic.gemm_m", Plain(dk.matmul, [-1]), (m, 4096, 4096), {}, every
    yield "dynamic.gemm_mnk", Plain(dk.matmul, [-1]), (m, n, k), {}, every


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--dump", help="write every source into this folder")
    parser.add_argument("--only", help="only cases whose name contains this")
    args = parser.parse_args()
    for name, jitted, fargs, extra, targets in cases():
        if args.only and args.only not in name:
            continue
        for target in targets:
            try:
                func = jitted.factory(*fargs)
                configs = {**(jitted.pass_configs or {}), **extra}
                kernel = tilelang.compile(func, out_idx=jitted.out_idx, target=target, pass_configs=configs)
                sources = {"kernel": kernel.get_kernel_source(), "host": kernel.get_host_source()}
            except Exception as err:  # noqa: BLE001 (an error is a result to compare too)
                sources = {"error": f"{type(err).__name__}: {err}"}
            for part, text in sources.items():
                digest = hashlib.sha256(text.encode()).hexdigest()[:16]
                print(f"{name:60} {target:7} {part:6} {digest}", flush=True)
                if args.dump:
                    os.makedirs(args.dump, exist_ok=True)
                    safe = "".join(c if c.isalnum() or c in "-_." else "_" for c in name)
                    with open(os.path.join(args.dump, f"{safe}.{target}.{part}.cu"), "w") as f:
                        f.write(text)


if __name__ == "__main__":
    main()

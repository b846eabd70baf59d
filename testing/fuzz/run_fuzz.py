"""A shape fuzzer against torch: random problems of the families in fuzz_kernels.py, each compiled and,
on a GPU, run and compared with torch. Without a GPU (or with --compile-only) each is only compiled
to CUDA for a random target (sm_80, sm_89, sm_90a), which still finds internal errors; with
--device cpu each runs on the CPU target against torch (numbers without a GPU: the front end, the
tile ops' semantics and the edge guards, not the GPU lowering).

Every case ends as one of: ok; a wrong answer (a bug: keep the case as a test once fixed); an
internal error (a bug); a UserError (acceptable when it names the user's kernel line: "-->"), or a
UserError without a location (a diagnostics bug). The summary counts each; the failing cases are
printed with their arguments so that one can be re-run alone (--only "family(args)").

    python testing/fuzz/run_fuzz.py --seed 0 --cases 10000 --budget-s 3600      # on the H200
    python testing/fuzz/run_fuzz.py --seed 0 --cases 200 --compile-only          # anywhere
    python testing/fuzz/run_fuzz.py --seed 0 --cases 500 --device cpu            # numbers, anywhere
"""

from __future__ import annotations

import argparse
import os
import random
import sys
import time
import traceback

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import fuzz_kernels as kernels  # noqa: E402

import tilelang  # noqa: E402
from tilelang.errors import CompilerError, UserError  # noqa: E402

SIZES = [1, 2, 7, 16, 31, 64, 97, 128, 130, 255, 256, 383, 512]
TILES = [16, 32, 64, 128, 256]
GEMM_DTYPES = [("float16", "float32"), ("bfloat16", "float32"), ("float32", "float32"), ("int8", "int32"),
               ("float8_e4m3", "float32")]  # fmt: skip


def _gemm(rng):
    dtype, accum = rng.choice(GEMM_DTYPES)
    args = dict(
        M=rng.choice(SIZES), N=rng.choice(SIZES), K=rng.choice(SIZES), bm=rng.choice(TILES[1:4]),
        bn=rng.choice(TILES[1:5]), bk=rng.choice(TILES[1:4]), stages=rng.choice([0, 1, 2, 3, 4]),
        threads=rng.choice([128, 256]), trans_a=rng.random() < 0.3, trans_b=rng.random() < 0.5,
        dtype=dtype, accum=accum, a_fragment=rng.random() < 0.2,
    )  # fmt: skip
    return "gemm", args


def _copy(rng):
    return "copy", dict(M=rng.choice(SIZES), N=rng.choice(SIZES), bm=rng.choice(TILES), bn=rng.choice(TILES),
                        threads=rng.choice([32, 64, 128, 256]), dtype=rng.choice(["float16", "float32", "int8"]),
                        via=rng.choice(["shared", "fragment"]))  # fmt: skip


def _row_reduce(rng):
    bn = rng.choice(TILES[:4])
    return "row_reduce", dict(M=rng.choice(SIZES), N=bn * rng.choice([1, 2, 3]), bm=rng.choice(TILES[:4]), bn=bn,
                              threads=rng.choice([64, 128, 256]), dtype=rng.choice(["float16", "float32"]),
                              kind=rng.choice(["sum", "max"]))  # fmt: skip


def _softmax(rng):
    return "softmax", dict(M=rng.choice(SIZES), N=rng.choice([32, 64, 128, 256]), bm=rng.choice([1, 2, 4, 8, 16]),
                           threads=rng.choice([32, 64, 128]), dtype=rng.choice(["float16", "float32"]))  # fmt: skip


def _attention(rng):
    bn = rng.choice([32, 64, 128])
    return "attention", dict(batch=rng.choice([1, 2]), heads=rng.choice([1, 3]), seq=bn * rng.choice([1, 2, 5]),
                             dim=rng.choice([64, 128]), causal=rng.random() < 0.5, bm=rng.choice([64, 128]), bn=bn,
                             stages=rng.choice([1, 2]), threads=rng.choice([128, 256]))  # fmt: skip


FAMILIES = [_gemm, _gemm, _gemm, _copy, _row_reduce, _softmax, _attention]


def _inputs(torch, family, a, dev="cuda"):
    def rand(shape, dtype):
        if dtype.startswith("int"):
            return torch.randint(-4, 4, shape, device=dev, dtype=getattr(torch, dtype))
        if dtype.startswith("float8"):
            return torch.randn(shape, device=dev).to(torch.float8_e4m3fn)
        return torch.randn(shape, device=dev, dtype=getattr(torch, dtype))

    if family == "gemm":
        A = rand((a["K"], a["M"]) if a["trans_a"] else (a["M"], a["K"]), a["dtype"])
        B = rand((a["N"], a["K"]) if a["trans_b"] else (a["K"], a["N"]), a["dtype"])
        return [A, B], kernels.gemm_reference(A, B, a["trans_a"], a["trans_b"]), [2]
    if family == "copy":
        A = rand((a["M"], a["N"]), a["dtype"])
        return [A], A, [1]
    if family == "row_reduce":
        A = rand((a["M"], a["N"]), a["dtype"])
        ref = A.float().sum(1) if a["kind"] == "sum" else A.float().amax(1)
        return [A], ref, [1]
    if family == "softmax":
        A = rand((a["M"], a["N"]), a["dtype"])
        return [A], torch.softmax(A.float(), dim=1), [1]
    q, k, v = (torch.randn(a["batch"], a["heads"], a["seq"], a["dim"], device=dev, dtype=torch.float16) for _ in "qkv")
    ref = torch.nn.functional.scaled_dot_product_attention(q.float(), k.float(), v.float(), is_causal=a["causal"])
    return [q, k, v], ref, [3]


def _tolerance(family, a):
    if family == "gemm":
        if a["dtype"].startswith("int"):
            return 0, 0
        k = a["K"]
        if a["dtype"] in ("float32",):  # tf32 on the tensor cores
            return 1e-2, 1e-2 * max(1, k**0.5)
        if a["dtype"].startswith("float8"):
            return 2e-2, 1e-1 * max(1, k**0.5)
        return 1e-2, 2e-2 * max(1, k**0.5)
    if family == "copy":
        return 0, 0
    return 1e-2, 1e-2


def run_case(family, args, target, compile_only, device="cuda"):
    """('ok' | 'wrong' | 'internal' | 'user' | 'user-no-line', detail). `device` "cpu": run on the CPU target."""
    factory = getattr(kernels, family)
    try:
        func = factory(**args)
        if compile_only:
            kernel = tilelang.compile(func, target=target)
            kernel.get_kernel_source()
            return "ok", ""
        import torch

        inputs, ref, out_idx = _inputs(torch, family, args, device)
        kernel = tilelang.compile(func, out_idx=out_idx, target="cpu" if device == "cpu" else None)
        out = kernel(*inputs)
    except UserError as e:
        text = str(e)
        return ("user" if "-->" in text else "user-no-line"), text.splitlines()[0][:200]
    except CompilerError as e:
        return "internal", str(e).splitlines()[0][:300]
    except Exception as e:  # noqa: BLE001 - anything else is a crash: a bug
        return "internal", f"{type(e).__name__}: {str(e).splitlines()[0][:300] if str(e) else ''}\n" + "".join(
            traceback.format_exc(limit=3)
        )[-600:]
    rtol, atol = _tolerance(family, args)
    got = out.float() if hasattr(out, "float") else out
    bad = ~((got - ref.float()).abs() <= atol + rtol * ref.float().abs())
    if bad.any():
        worst = float((got - ref.float()).abs().max())
        return "wrong", f"{int(bad.sum())} of {bad.numel()} elements, max err {worst:.3g}"
    return "ok", ""


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--cases", type=int, default=200)
    parser.add_argument("--budget-s", type=float, default=None, help="stop after this many seconds")
    parser.add_argument("--compile-only", action="store_true", help="compile to CUDA only (no GPU needed)")
    parser.add_argument("--family", default=None, help="draw only this family (gemm, copy, ...)")
    parser.add_argument("--device", choices=["cuda", "cpu"], default="cuda", help="cpu: run on the CPU target")
    args = parser.parse_args()
    compile_only = args.compile_only
    if not compile_only and args.device == "cuda":
        import torch

        compile_only = not torch.cuda.is_available()
    rng = random.Random(args.seed)
    counts, failures, user_errors = {}, [], {}
    start = time.time()
    families = [f for f in FAMILIES if args.family is None or f.__name__ == "_" + args.family]
    for case in range(args.cases):
        if args.budget_s is not None and time.time() - start > args.budget_s:
            break
        family, kw = rng.choice(families)(rng)
        target = rng.choice(["sm_80", "sm_89", "sm_90a"]) if compile_only else None
        status, detail = run_case(family, kw, target, compile_only, args.device)
        counts[status] = counts.get(status, 0) + 1
        if status == "user":
            user_errors[detail[:90]] = user_errors.get(detail[:90], 0) + 1
        if status not in ("ok", "user"):
            failures.append((case, family, kw, target, status, detail))
            print(f"[{case}] {status}: {family}({kw}) target={target}\n    {detail}", flush=True)
    total = sum(counts.values())
    print(f"\n{total} cases in {time.time() - start:.0f} s (seed {args.seed}, "
          f"{'compile only' if compile_only else f'run against torch on {args.device}'}): {counts}")  # fmt: skip
    for text, n in sorted(user_errors.items(), key=lambda x: -x[1]):
        print(f"  UserError x{n}: {text}")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())

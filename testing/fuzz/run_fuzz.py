"""A shape fuzzer against torch: random problems of the families in fuzz_kernels.py, each compiled and,
on a GPU, run and compared with torch. Without a GPU (or with --compile-only) each is only compiled
to CUDA for a random target (sm_80, sm_89, sm_90a), which still finds internal errors; with
--device cpu each runs on the CPU target against torch (numbers without a GPU: the front end, the
tile ops' semantics and the edge guards, not the GPU lowering).

Every case ends as one of: ok; a wrong answer (a bug: keep the case as a test once fixed); an
internal error (a bug); a UserError (acceptable when it names the user's kernel line: "-->"), or a
UserError without a location (a diagnostics bug). The summary counts each; the failing cases are
printed with their arguments (to re-run one: run_case(family, args, target, ...)).

With --jobs N the cases go to N worker processes (each compiles and runs every N-th case; the drawn
cases do not depend on N); a worker that crashes or hangs in a case gets the case
counted as an internal error and a fresh process for the rest. --resume with the same --log-dir runs the
cases that a run stopped by --budget-s did not finish (with any --jobs).

    python testing/fuzz/run_fuzz.py --seed 0 --cases 10000 --jobs 16 --log-dir /tmp/fz   # on the H200
    python testing/fuzz/run_fuzz.py --seed 0 --cases 200 --compile-only          # anywhere
    python testing/fuzz/run_fuzz.py --seed 0 --cases 200 --compile-only --build  # and nvcc
    python testing/fuzz/run_fuzz.py --seed 0 --cases 500 --device cpu            # numbers, anywhere
"""

from __future__ import annotations

import argparse
import glob
import json
import os
import random
import subprocess
import sys
import tempfile
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


def run_case(family, args, target, compile_only, device="cuda", build=False):
    """('ok' | 'wrong' | 'internal' | 'user' | 'user-no-line', detail). `device` "cpu": run on the CPU target;
    `build` with `compile_only`: the device code through nvcc too."""
    factory = getattr(kernels, family)
    try:
        func = factory(**args)
        if compile_only:
            kernel = tilelang.compile(func, target=target)
            source = kernel.get_kernel_source()
            if build:
                from tilelang.codegen import cuda

                cuda.compile_object(source, kernel.target)
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


def draw(seed: int, cases: int, family: str | None, compile_only: bool) -> list[tuple]:
    """The run's cases, (index, family, arguments, target), in the order the seed gives them."""
    rng = random.Random(seed)
    families = [f for f in FAMILIES if family is None or f.__name__ == "_" + family]
    drawn = []
    for case in range(cases):
        name, kw = rng.choice(families)(rng)
        drawn.append((case, name, kw, rng.choice(["sm_80", "sm_89", "sm_90a"]) if compile_only else None))
    return drawn


def _cuda_broken() -> bool:
    """Whether this process's CUDA context is lost (an illegal access is sticky: every later case would fail)."""
    import torch

    if not torch.cuda.is_available():
        return False
    try:
        torch.cuda.synchronize()
        return False
    except Exception:  # noqa: BLE001 - any error here means the context is gone
        return True


def run_worker(cases: list[tuple], compile_only: bool, device: str, log: str, build: bool = False) -> int:
    """Runs `cases` in order, appending a line to `log` before ("start") and after ("case") each. Exits with 3
    after a case that broke the CUDA context, so that the parent starts a fresh process for the rest."""
    with open(log, "a") as out:
        for case, family, kw, target in cases:
            out.write(json.dumps({"start": case}) + "\n")
            out.flush()
            status, detail = run_case(family, kw, target, compile_only, device, build)
            out.write(json.dumps({"case": case, "family": family, "args": kw, "target": target, "status": status,
                                  "detail": detail}) + "\n")  # fmt: skip
            out.flush()
            if status in ("wrong", "internal") and device == "cuda" and _cuda_broken():
                return 3
    return 0


def _read_log(path: str) -> tuple[dict, int | None]:
    """(finished cases by index, the case started and not finished or None) from a worker's log."""
    done, started = {}, None
    if os.path.exists(path):
        with open(path) as f:
            for line in f:
                try:
                    entry = json.loads(line)
                except ValueError:  # a line cut by a kill
                    continue
                if "start" in entry:
                    started = entry["start"]
                else:
                    done[entry["case"]] = entry
                    started = None
    return done, started


EARLIER = "earlier.jsonl"  # with --resume: the cases that earlier runs into the same folder finished


def shares(cases: list[tuple], jobs: int, k: int, log_dir: str) -> list[tuple]:
    """Worker k's cases: every jobs-th of those that no earlier run into `log_dir` finished."""
    earlier = _read_log(os.path.join(log_dir, EARLIER))[0]
    return [c for c in cases if c[0] not in earlier][k::jobs]


def run_parallel(argv: list[str], cases: list[tuple], jobs: int, budget_s: float | None, case_timeout_s: float,
                 log_dir: str, resume: bool = False) -> dict:  # fmt: skip
    """Runs `cases` in `jobs` worker processes (case k in worker k % jobs), each a fresh interpreter running
    this script with --worker; a worker that dies or hangs past `case_timeout_s` on a case gets that case
    recorded as an internal error (in its log) and is restarted after it. With `resume`, the cases that
    `log_dir` already holds count as run (a run stopped by its budget goes on). Returns the finished cases by
    index."""
    os.makedirs(log_dir, exist_ok=True)
    earlier = os.path.join(log_dir, EARLIER)
    if resume:  # the finished cases of the run(s) before go to one file; the rest is shared out afresh
        done = _read_log(earlier)[0]
        for name in sorted(glob.glob(os.path.join(log_dir, "worker*.jsonl"))):
            done.update(_read_log(name)[0])
        with open(earlier, "w") as out:
            out.writelines(json.dumps(entry) + "\n" for _, entry in sorted(done.items()))
    for name in glob.glob(os.path.join(log_dir, "worker*.jsonl*")) + ([] if resume else glob.glob(earlier)):
        os.remove(name)
    share = [shares(cases, jobs, k, log_dir) for k in range(jobs)]
    procs: dict[int, subprocess.Popen] = {}

    def start(k: int, after: int) -> None:
        log = os.path.join(log_dir, f"worker{k}.jsonl")
        cmd = [
            sys.executable,
            os.path.abspath(__file__),
            *argv,
            "--worker",
            str(k),
            "--after",
            str(after),
            "--log",
            log,
        ]
        procs[k] = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=open(log + ".err", "a"))

    def lose(k: int, case: int, why: str) -> None:
        """Records `case` as an internal error in worker k's log (where its "start" line is)."""
        entry = next(c for c in share[k] if c[0] == case)
        with open(os.path.join(log_dir, f"worker{k}.jsonl"), "a") as out:
            out.write("\n" + json.dumps({"case": case, "family": entry[1], "args": entry[2], "target": entry[3],
                                         "status": "internal", "detail": why}) + "\n")  # fmt: skip
        print(f"[{case}] internal: {entry[1]}({entry[2]})\n    {why}", flush=True)

    for k in range(jobs):
        if share[k]:
            start(k, -1)
    began = reported = time.time()
    while procs:
        time.sleep(1.0)
        if budget_s is not None and time.time() - began > budget_s:
            break
        if time.time() - reported > 60:
            reported = time.time()
            done = sum(len(_read_log(os.path.join(log_dir, f"worker{k}.jsonl"))[0]) for k in range(jobs))
            print(f"{done} cases done in {reported - began:.0f} s", flush=True)
        for k, proc in list(procs.items()):
            log = os.path.join(log_dir, f"worker{k}.jsonl")
            code = proc.poll()
            _, started = _read_log(log)
            if code is None:
                idle = time.time() - os.path.getmtime(log) if os.path.exists(log) else 0.0
                if started is not None and idle > case_timeout_s:
                    proc.kill()
                    proc.wait()
                    lose(k, started, f"no result after {case_timeout_s:.0f} s (a hang): worker restarted")
                    start(k, started)
                continue
            del procs[k]
            if code == 0:
                continue
            done, _ = _read_log(log)
            if started is not None:  # died inside a case
                lose(k, started, f"the process died in this case (exit code {code})")
                start(k, started)
            elif code == 3 and done:  # left a broken CUDA context behind: go on in a fresh process
                start(k, max(done))
            else:
                print(f"worker {k} exited with code {code}; see {log}.err", flush=True)
    for proc in procs.values():
        proc.kill()
    finished = _read_log(os.path.join(log_dir, EARLIER))[0]
    for k in range(jobs):
        finished.update(_read_log(os.path.join(log_dir, f"worker{k}.jsonl"))[0])
    return finished


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--cases", type=int, default=200)
    parser.add_argument("--budget-s", type=float, default=None, help="stop after this many seconds")
    parser.add_argument("--compile-only", action="store_true", help="compile to CUDA only (no GPU needed)")
    parser.add_argument("--build", action="store_true", help="with --compile-only: nvcc compiles each kernel too")
    parser.add_argument("--family", default=None, help="draw only this family (gemm, copy, ...)")
    parser.add_argument("--device", choices=["cuda", "cpu"], default="cuda", help="cpu: run on the CPU target")
    parser.add_argument("--jobs", type=int, default=1, help="worker processes (each compiles and runs its cases)")
    parser.add_argument("--case-timeout-s", type=float, default=300, help="with --jobs: a case running longer hangs")
    parser.add_argument("--log-dir", default=None, help="with --jobs: the workers' logs (default: a temporary one)")
    parser.add_argument("--resume", action="store_true", help="with --jobs and --log-dir: go on from those logs")
    parser.add_argument("--worker", type=int, default=None, help=argparse.SUPPRESS)
    parser.add_argument("--after", type=int, default=-1, help=argparse.SUPPRESS)
    parser.add_argument("--log", default=None, help=argparse.SUPPRESS)
    args = parser.parse_args()
    compile_only = args.compile_only
    if not compile_only and args.device == "cuda" and args.jobs == 1:
        import torch

        compile_only = not torch.cuda.is_available()
    cases = draw(args.seed, args.cases, args.family, compile_only)
    if args.worker is not None:
        mine = [c for c in shares(cases, args.jobs, args.worker, os.path.dirname(args.log)) if c[0] > args.after]
        return run_worker(mine, compile_only, args.device, args.log, args.build)
    start = time.time()
    if args.jobs > 1:
        argv = [a for a in sys.argv[1:]]
        finished = run_parallel(argv, cases, args.jobs, args.budget_s, args.case_timeout_s,
                                args.log_dir or tempfile.mkdtemp(prefix="fuzz-"), args.resume)  # fmt: skip
        results = [(e["case"], e["family"], e["args"], e["target"], e["status"], e["detail"])
                   for _, e in sorted(finished.items())]  # fmt: skip
    else:
        results = []
        for case, family, kw, target in cases:
            if args.budget_s is not None and time.time() - start > args.budget_s:
                break
            status, detail = run_case(family, kw, target, compile_only, args.device, args.build)
            results.append((case, family, kw, target, status, detail))
            if status not in ("ok", "user"):
                print(f"[{case}] {status}: {family}({kw}) target={target}\n    {detail}", flush=True)
    return summarize(results, args.seed, compile_only, args.device, time.time() - start)


def summarize(results: list[tuple], seed: int, compile_only: bool, device: str, seconds: float) -> int:
    """Prints the counts, the failures (parallel runs) and the UserErrors by message; 1 if any case failed."""
    counts, user_errors, failures = {}, {}, []
    for case, family, kw, target, status, detail in results:
        counts[status] = counts.get(status, 0) + 1
        if status == "user":
            user_errors[detail[:90]] = user_errors.get(detail[:90], 0) + 1
        if status not in ("ok", "user"):
            failures.append(f"[{case}] {status}: {family}({kw}) target={target}\n    {detail}")
    print(f"\n{len(results)} cases in {seconds:.0f} s (seed {seed}, "
          f"{'compile only' if compile_only else f'run against torch on {device}'}): {counts}")  # fmt: skip
    for line in failures:
        print(line)
    for text, n in sorted(user_errors.items(), key=lambda x: -x[1]):
        print(f"  UserError x{n}: {text}")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())

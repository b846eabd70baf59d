"""Every example under compute-sanitizer (issue 25): memcheck (out-of-bounds and misaligned accesses),
racecheck (shared-memory hazards between threads), synccheck (barriers not every thread reaches,
invalid named-barrier use) and initcheck (reads of global memory nothing wrote), on the GPU machine.

Each example folder's GPU tests (examples/<family>/test_*.py, marked gpu) run at their small test
sizes in one pytest process per (tool, file) under `compute-sanitizer --tool <tool>`; the table at
the end says, per tool and example, "clean", the sanitizer's error count, or why it did not finish.

    python testing/sanitizers/run_sanitizers.py                      # every tool, every example
    python testing/sanitizers/run_sanitizers.py --tools racecheck --examples gemm flash_attention
    python testing/sanitizers/run_sanitizers.py --quick               # the first test case of each file

Sanitized kernels run 10-100x slower (racecheck the most): --timeout bounds each run.
"""

from __future__ import annotations

import argparse
import glob
import os
import re
import shutil
import subprocess
import sys
import time

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
TOOLS = ("memcheck", "racecheck", "synccheck", "initcheck")
_SUMMARY = re.compile(r"ERROR SUMMARY: (\d+) error")


def sanitizer() -> str:
    found = shutil.which("compute-sanitizer")
    if found:
        return found
    cuda = os.environ.get("CUDA_HOME", "/usr/local/cuda")
    path = os.path.join(cuda, "bin", "compute-sanitizer")
    if os.path.exists(path):
        return path
    sys.exit("compute-sanitizer not found (on PATH or in $CUDA_HOME/bin)")


def command(tool: str, test_file: str, quick: bool) -> list[str]:
    """compute-sanitizer running one example test file's GPU tests in pytest."""
    flags = ["--tool", tool, "--error-exitcode", "99", "--print-limit", "20"]
    if tool == "racecheck":
        flags += ["--racecheck-report", "hazard"]
    if tool == "memcheck":
        flags += ["--leak-check", "no"]
    pytest = [sys.executable, "-m", "pytest", "-q", "-x", "-m", "gpu", "-p", "no:cacheprovider", test_file]
    if quick:
        pytest += ["--maxfail=1", "-k", "not persistent"]  # the cheapest cases
    return [sanitizer(), *flags, *pytest]


def verdict(returncode: int | None, output: str) -> str:
    if returncode is None:
        return "timeout"
    errors = [int(n) for n in _SUMMARY.findall(output)]
    if returncode == 99 or any(errors):
        return f"{sum(errors)} errors"
    if returncode != 0:
        if "no tests ran" in output or "deselected" in output and " passed" not in output:
            return "no tests"
        return f"test failed (rc {returncode})"
    return "clean"


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--tools", nargs="+", default=list(TOOLS), choices=TOOLS)
    parser.add_argument("--examples", nargs="+", default=None, help="example folders (default: all)")
    parser.add_argument("--timeout", type=float, default=600, help="seconds per (tool, file)")
    parser.add_argument("--quick", action="store_true", help="skip the larger cases (persistent GEMMs)")
    parser.add_argument("--log-dir", default=os.environ.get("OUT", "/tmp"), help="full sanitizer output here")
    args = parser.parse_args()
    files = sorted(glob.glob(os.path.join(ROOT, "examples", "*", "test_*.py")))
    if args.examples:
        files = [f for f in files if os.path.basename(os.path.dirname(f)) in args.examples]
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([ROOT, os.environ.get("PYTHONPATH", "")]))
    # One kernel cache for all runs: each (tool, file) pays the compile once at most.
    env.setdefault("TILELANG_CACHE_DIR", os.path.join(args.log_dir, "sanitizer-cache"))
    table = {}
    for test_file in files:
        name = os.path.relpath(test_file, os.path.join(ROOT, "examples"))
        for tool in args.tools:
            start = time.time()
            try:
                run = subprocess.run(command(tool, test_file, args.quick), cwd=os.path.dirname(test_file), env=env,
                                     capture_output=True, text=True, timeout=args.timeout)  # fmt: skip
                code, output = run.returncode, run.stdout + run.stderr
            except subprocess.TimeoutExpired as e:
                code, output = None, (e.stdout or b"").decode(errors="replace") if isinstance(e.stdout, bytes) else ""
            table[(name, tool)] = verdict(code, output)
            log = os.path.join(args.log_dir, f"sanitize-{tool}-{name.replace('/', '_')}.log")
            with open(log, "w") as f:
                f.write(output)
            print(f"{name:52s} {tool:10s} {table[(name, tool)]:>24s} {time.time() - start:6.0f} s", flush=True)
    print(f"\n{'example':52s} " + " ".join(f"{t:>12s}" for t in args.tools))
    for test_file in files:
        name = os.path.relpath(test_file, os.path.join(ROOT, "examples"))
        print(f"{name:52s} " + " ".join(f"{table[(name, t)]:>12s}" for t in args.tools))
    return 0 if all(v == "clean" for v in table.values()) else 1


if __name__ == "__main__":
    sys.exit(main())

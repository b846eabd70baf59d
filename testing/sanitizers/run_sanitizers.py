"""Every example under compute-sanitizer (issue 25): memcheck (out-of-bounds and misaligned accesses),
racecheck (shared-memory hazards between threads), synccheck (barriers not every thread reaches,
invalid named-barrier use) and initcheck (reads of global memory nothing wrote), on the GPU machine.

Each example folder's GPU tests (examples/<family>/test_*.py, marked gpu) run at their small test
sizes in one pytest process per (tool, test function) under `compute-sanitizer --tool <tool>`; the table at
the end says, per tool and example, "clean", the sanitizer's error count, or why it did not finish.
The kernels of the tests' references (torch, cuBLAS, cuDNN) run unchecked, or their reports are left
out (REFERENCE_KERNELS), under every tool but initcheck.

    python testing/sanitizers/run_sanitizers.py                      # every tool, every example
    python testing/sanitizers/run_sanitizers.py --tools racecheck --examples gemm flash_attention
    python testing/sanitizers/run_sanitizers.py --quick               # each function's first and last case

Sanitized kernels run 10-100x slower (racecheck the most): --timeout bounds each run.
"""

from __future__ import annotations

import argparse
import ast
import concurrent.futures
import glob
import os
import re
import shutil
import subprocess
import sys
import time

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
TOOLS = ("memcheck", "racecheck", "synccheck", "initcheck")
_SUMMARY = re.compile(r"(?:ERROR SUMMARY: |RACECHECK SUMMARY: \d+ hazards? displayed \()(\d+) error")


def sanitizer() -> str:
    found = shutil.which("compute-sanitizer")
    if found:
        return found
    cuda = os.environ.get("CUDA_HOME", "/usr/local/cuda")
    path = os.path.join(cuda, "bin", "compute-sanitizer")
    if os.path.exists(path):
        return path
    sys.exit("compute-sanitizer not found (on PATH or in $CUDA_HOME/bin)")


# Kernels of the references the tests compare against, by mangled name: not ours to check. torch's
# SDPA (CUTLASS fmha, flash, cuDNN) and elementwise kernels run unchecked (REFERENCE_KERNELS_UNCHECKED:
# instrumenting them took most of a sanitized run's time). cuBLAS's are checked (racecheck with them
# unchecked ended in "The Sanitizer failed to handle a hardware exception" in three GEMM tests), and
# their reports are left out of the verdict: racecheck reports hazards in the warp-specialized nvjet
# kernels that it cannot follow.
# initcheck checks every kernel, the references' included: it follows which bytes were written, and
# bytes a kernel it does not check wrote stay uninitialized to it (the tests' `.item()` copies of
# torch's comparison results were reported so: 2-10 "Host API memory access error"s per flash-attention
# test); a reference kernel reading bytes nothing wrote is our kernel's output left unwritten.
REFERENCE_KERNELS_UNCHECKED = "fmha|pytorch_flash|cudnn|at6native|at4cuda"
CHECKS_EVERY_KERNEL = ("initcheck",)
REFERENCE_KERNELS = (
    REFERENCE_KERNELS_UNCHECKED + "|nvjet|xmma|cutlass|cublas|^ampere_.*gemm|gemv2[NT]_kernel|splitKreduce"
)
PRINT_LIMIT = 200
_REPORT = re.compile(r"^=+ (?:Error|Warning|Invalid|Uninitialized|Barrier|Program hit)")
_WHERE = re.compile(r"^=+\s+(?:(?:Write|Read) Thread \([\d,]+\) )?at (\S+?)\+0x")


def command(tool: str, tests, quick: bool, exclude: str | None = REFERENCE_KERNELS_UNCHECKED) -> list[str]:
    """compute-sanitizer running GPU tests in pytest: `tests` a test file, a node id or a list of node ids
    (`exclude`: a regex of kernel names left unchecked; they still run)."""
    flags = ["--tool", tool, "--error-exitcode", "99", "--print-limit", str(PRINT_LIMIT)]
    if exclude and tool not in CHECKS_EVERY_KERNEL:
        flags += ["--kernel-name-exclude", f"regex={exclude}"]
    if tool == "racecheck":
        flags += ["--racecheck-report", "hazard"]
    if tool == "memcheck":
        flags += ["--leak-check", "no"]
    tests = [tests] if isinstance(tests, str) else list(tests)
    pytest = [sys.executable, "-m", "pytest", "-q", "-x", "-m", "gpu", "-p", "no:cacheprovider", *tests]
    if quick:
        pytest += ["--maxfail=1", "-k", "not persistent"]  # the cheapest cases
    return [sanitizer(), *flags, *pytest]


def exclusion_works() -> bool:
    """Whether this compute-sanitizer takes `--kernel-name-exclude regex=` (CUDA 12.x and later do)."""
    probe = [sanitizer(), "--kernel-name-exclude", f"regex={REFERENCE_KERNELS_UNCHECKED}", "--error-exitcode", "99",
             sys.executable, "-c", "import torch; torch.ones(4, device='cuda').sum().item()"]  # fmt: skip
    try:
        return subprocess.run(probe, capture_output=True, timeout=300).returncode == 0
    except subprocess.TimeoutExpired:
        return False


def reports_by_kernel(output: str) -> dict[str, int]:
    """The sanitizer's displayed reports counted by the kernel named in each (its first "at kernel+0x")."""
    counts, open_report = {}, False
    for line in output.splitlines():
        if _REPORT.match(line):
            open_report = True
        elif open_report and (where := _WHERE.match(line)):
            counts[where[1]] = counts.get(where[1], 0) + 1
            open_report = False
    return counts


def verdict(returncode: int | None, output: str, tool: str = "racecheck") -> str:
    if returncode is None:
        return "timeout"
    if "Internal Sanitizer Error" in output:
        return "sanitizer failed"
    errors = sum(int(n) for n in _SUMMARY.findall(output))
    if returncode == 99 or errors:
        shown = reports_by_kernel(output)
        ours = sum(
            n for kernel, n in shown.items() if tool in CHECKS_EVERY_KERNEL or not re.search(REFERENCE_KERNELS, kernel)
        )
        if ours or not shown or sum(shown.values()) >= PRINT_LIMIT or " failed" in output:
            return f"{errors or ours} errors"
        return "clean"  # every report names a reference kernel (cuBLAS)
    if returncode != 0:
        if "no tests ran" in output or "deselected" in output and " passed" not in output:
            return "no tests"
        return f"test failed (rc {returncode})"
    return "clean"


def test_functions(test_file: str) -> list[str]:
    """The file's top-level test functions marked gpu (by a decorator or the module's pytestmark), each run
    with all its parameters as one unit."""
    with open(test_file) as f:
        tree = ast.parse(f.read())
    module_gpu = any(isinstance(node, ast.Assign) and any(getattr(t, "id", "") == "pytestmark" for t in node.targets)
                     and "gpu" in ast.unparse(node.value) for node in tree.body)  # fmt: skip
    return [node.name for node in tree.body if isinstance(node, ast.FunctionDef) and node.name.startswith("test_")
            and (module_gpu or any("gpu" in ast.unparse(d) for d in node.decorator_list))]  # fmt: skip


def end_cases(test_file: str, functions: list[str]) -> dict[str, list[str]]:
    """{function: pytest node ids of its first and last case} (`file::test_x[parameters]`), from
    pytest's collection. Both ends: a parameter list often starts or ends with a degenerate case (no
    block kept, no slot used) and the other end is a full one."""
    out = subprocess.run([sys.executable, "-m", "pytest", "--collect-only", "-q", "-p", "no:cacheprovider", test_file],
                         cwd=os.path.dirname(test_file), capture_output=True, text=True)  # fmt: skip
    return {fn: end_case_ids(out.stdout, test_file, fn) for fn in functions}


def end_case_ids(collected: str, test_file: str, function: str) -> list[str]:
    """The first and last node ids of `function` in pytest's `--collect-only -q` listing, as paths to
    `test_file`; `file::function` (all its cases) when the listing does not name it."""
    ids = []
    for line in collected.splitlines():
        name, _, params = line.strip().partition("::")[2].partition("[")
        if name == function:
            ids.append(f"{test_file}::{function}" + (f"[{params}" if params else ""))
    return sorted({ids[0], ids[-1]}, key=ids.index) if ids else [f"{test_file}::{function}"]


def merge(verdicts: list[str]) -> str:
    """One example's verdict from its test functions': errors summed, else the first problem, else clean."""
    errors = [int(v.split()[0]) for v in verdicts if v.endswith(" errors")]
    if errors:
        return f"{sum(errors)} errors"
    problems = [v for v in verdicts if v not in ("clean", "no tests")]
    if problems:
        return problems[0]
    return "clean" if "clean" in verdicts else "no tests"


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--tools", nargs="+", default=list(TOOLS), choices=TOOLS)
    parser.add_argument("--examples", nargs="+", default=None, help="example folders (default: all)")
    parser.add_argument("--timeout", type=float, default=600, help="seconds per (tool, test function)")
    parser.add_argument("--quick", action="store_true", help="each function's first and last case (no persistent GEMM)")
    parser.add_argument("--jobs", type=int, default=1, help="sanitizer processes at once (they share the GPU)")
    parser.add_argument("--log-dir", default=os.environ.get("OUT", "/tmp"), help="full sanitizer output here")
    args = parser.parse_args()
    files = sorted(glob.glob(os.path.join(ROOT, "examples", "*", "test_*.py")))
    if args.examples:
        files = [f for f in files if os.path.basename(os.path.dirname(f)) in args.examples]
    os.makedirs(args.log_dir, exist_ok=True)  # (a folder given on the command line may not exist yet)
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([ROOT, os.environ.get("PYTHONPATH", "")]))
    # One kernel cache for all runs: each (tool, file) pays the compile once at most.
    env.setdefault("TILELANG_CACHE_DIR", os.path.join(args.log_dir, "sanitizer-cache"))
    # Tool by tool: the first tool's runs fill the kernel cache for the others'.
    exclude = REFERENCE_KERNELS_UNCHECKED if exclusion_works() else None
    print(f"reference kernels (torch, cuBLAS, cuDNN): {'not checked' if exclude else 'checked too'}", flush=True)
    units = [(f, fn, tool) for tool in args.tools for f in files for fn in test_functions(f)]
    # --quick: two cases a function (racecheck and initcheck run each kernel 10-100x slower, and some
    # functions have 30 cases: 14 of 56 runs timed out at 240 s on the H200 with all of them).
    node = {(f, fn): f"{f}::{fn}" for f in files for fn in test_functions(f)}
    if args.quick:
        node = {(f, fn): ids for f in files for fn, ids in end_cases(f, test_functions(f)).items()}
    name_of = {f: os.path.relpath(f, os.path.join(ROOT, "examples")) for f in files}

    def run(unit):
        test_file, function, tool = unit
        start = time.time()
        try:
            cmd = command(tool, node[(test_file, function)], args.quick, exclude)
            done = subprocess.run(cmd, cwd=os.path.dirname(test_file), env=env, capture_output=True, text=True,
                                  timeout=args.timeout)  # fmt: skip
            code, output = done.returncode, done.stdout + done.stderr
        except subprocess.TimeoutExpired as e:
            code, output = None, (e.stdout or b"").decode(errors="replace") if isinstance(e.stdout, bytes) else ""
        result = verdict(code, output, tool)
        log = os.path.join(args.log_dir, f"sanitize-{tool}-{name_of[test_file].replace('/', '_')}-{function}.log")
        with open(log, "w") as f:
            f.write(output)
        print(f"{name_of[test_file] + '::' + function:72s} {tool:10s} {result:>20s} {time.time() - start:6.0f} s",
              flush=True)  # fmt: skip
        return result

    with concurrent.futures.ThreadPoolExecutor(max(1, args.jobs)) as pool:
        results = dict(zip(units, pool.map(run, units)))
    table = {(f, tool): merge([v for (uf, _, ut), v in results.items() if uf == f and ut == tool])
             for f in files for tool in args.tools}  # fmt: skip
    print(f"\n{'example':52s} " + " ".join(f"{t:>12s}" for t in args.tools))
    for test_file in files:
        print(f"{name_of[test_file]:52s} " + " ".join(f"{table[(test_file, t)]:>12s}" for t in args.tools))
    return 0 if all(v in ("clean", "no tests") for v in table.values()) else 1


if __name__ == "__main__":
    sys.exit(main())

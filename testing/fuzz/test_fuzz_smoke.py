"""The fuzzer keeps working: a few cases of every family compiled for sm_80 and sm_90a and run against
torch on the CPU target, and on a GPU run against torch there. The full runs are `run_fuzz.py` (see its docstring)."""

import random

import pytest
import run_fuzz


@pytest.mark.parametrize("family", [f for f in dict.fromkeys(run_fuzz.FAMILIES)])
def test_every_family_compiles(family):
    rng = random.Random(7)
    for target in ("sm_80", "sm_90a"):
        for _ in range(2):
            name, kw = family(rng)
            status, detail = run_fuzz.run_case(name, kw, target, compile_only=True)
            assert status in ("ok", "user"), (name, kw, target, detail)


@pytest.mark.gpu
@pytest.mark.parametrize("family", [f for f in dict.fromkeys(run_fuzz.FAMILIES)])
def test_every_family_matches_torch(family):
    rng = random.Random(11)
    for _ in range(3):
        name, kw = family(rng)
        status, detail = run_fuzz.run_case(name, kw, None, compile_only=False)
        assert status in ("ok", "user"), (name, kw, detail)


@pytest.mark.parametrize("family", [f for f in dict.fromkeys(run_fuzz.FAMILIES)])
def test_every_family_matches_torch_on_the_cpu(family):
    rng = random.Random(13)
    for _ in range(4):
        name, kw = family(rng)
        status, detail = run_fuzz.run_case(name, kw, None, compile_only=False, device="cpu")
        assert status in ("ok", "user"), (name, kw, detail)


def test_parallel_run_matches_the_sequential_one(tmp_path):
    """--jobs splits the same drawn cases over worker processes: the summary is the sequential run's, also
    for a run stopped by its budget and resumed with another number of workers."""
    import os
    import subprocess
    import sys

    script = os.path.join(os.path.dirname(os.path.abspath(__file__)), "run_fuzz.py")
    base = [sys.executable, script, "--seed", "5", "--cases", "8", "--device", "cpu"]
    logs = ["--log-dir", str(tmp_path)]
    summaries = []
    for extra in ([], ["--jobs", "2"], ["--jobs", "2", "--budget-s", "0", *logs], ["--jobs", "3", "--resume", *logs]):
        run = subprocess.run(base + extra, capture_output=True, text=True, timeout=600)
        summaries.append(next(line for line in run.stdout.splitlines() if " cases in " in line))
        assert run.returncode == 0 or "--budget-s" in extra, run.stdout + run.stderr
    assert summaries[0].startswith("8 cases in ") and summaries[3].startswith("8 cases in ")
    assert summaries[0].split("): ")[1] == summaries[1].split("): ")[1] == summaries[3].split("): ")[1]

"""tilelang.testing: a GPU fault ends the test process, so it shows as one failure, not as every
later GPU test of that process failing (checked with a stand-in error, no GPU)."""

import os
import subprocess
import sys
import textwrap

import pytest

ROOT = os.path.join(os.path.dirname(__file__), "..", "..")


def _run(tmp_path, *args):
    (tmp_path / "conftest.py").write_text(
        textwrap.dedent(
            f"""
            import sys
            sys.path.insert(0, {os.path.abspath(ROOT)!r})
            import pytest
            from tilelang.testing import end_process_after_cuda_fault

            @pytest.hookimpl(trylast=True)
            def pytest_runtest_logreport(report):
                end_process_after_cuda_fault(report)
            """
        )
    )
    (tmp_path / "test_fault.py").write_text(
        textwrap.dedent(
            """
            import pytest

            @pytest.mark.parametrize("i", range(8))
            def test_kernel(i):
                if i == 2:
                    raise RuntimeError("CUDA error: misaligned address")
            """
        )
    )
    cmd = [sys.executable, "-m", "pytest", "-q", "-rf", "-p", "no:cacheprovider", *args, str(tmp_path)]
    env = {k: v for k, v in os.environ.items() if not k.startswith("PYTEST_XDIST")}  # this run may be a worker
    return subprocess.run(cmd, capture_output=True, text=True, cwd=tmp_path, env=env, timeout=300).stdout


def test_a_serial_run_stops_at_the_fault(tmp_path):
    out = _run(tmp_path)
    assert "1 failed, 2 passed" in out and "test_kernel[2] faulted on the GPU" in out


def test_under_xdist_a_fresh_worker_runs_the_rest(tmp_path):
    pytest.importorskip("xdist")
    out = _run(tmp_path, "-n", "2")
    assert "7 passed" in out and "misaligned address" in out and "crashed while running" in out

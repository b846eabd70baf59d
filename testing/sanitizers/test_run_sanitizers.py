"""run_sanitizers.py reads compute-sanitizer's verdicts right and builds its command lines (CPU)."""

import run_sanitizers as rs


def test_verdicts():
    assert rs.verdict(0, "========= ERROR SUMMARY: 0 errors\n1 passed") == "clean"
    assert rs.verdict(99, "========= ERROR SUMMARY: 3 errors") == "3 errors"
    assert rs.verdict(None, "") == "timeout"
    assert rs.verdict(1, "FAILED test_x.py::test_y\n1 failed") == "test failed (rc 1)"


def test_command(monkeypatch):
    monkeypatch.setattr(rs, "sanitizer", lambda: "/cuda/bin/compute-sanitizer")
    cmd = rs.command("racecheck", "examples/gemm/test_example_gemm.py", quick=True)
    assert cmd[:3] == ["/cuda/bin/compute-sanitizer", "--tool", "racecheck"] and "--racecheck-report" in cmd
    assert cmd[cmd.index("-m", cmd.index("pytest") - 1) + 1] == "pytest" or "pytest" in cmd
    assert cmd[-2:] == ["-k", "not persistent"] and "examples/gemm/test_example_gemm.py" in cmd

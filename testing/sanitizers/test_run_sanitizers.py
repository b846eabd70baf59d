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


def test_merge_of_an_examples_functions():
    assert rs.merge(["clean", "no tests", "clean"]) == "clean"
    assert rs.merge(["clean", "2 errors", "timeout", "3 errors"]) == "5 errors"
    assert rs.merge(["clean", "timeout", "test failed (rc 1)"]) == "timeout"
    assert rs.merge(["no tests"]) == "no tests"


def test_units_are_the_files_test_functions(tmp_path):
    test_file = tmp_path / "test_x.py"
    test_file.write_text("import pytest\n\ndef helper():\n    pass\n\n@pytest.mark.gpu\ndef test_a():\n    pass\n\n"
                         "def test_b(x):\n    pass\n\nclass TestC:\n    def test_d(self):\n        pass\n")  # fmt: skip
    assert rs.test_functions(str(test_file)) == ["test_a"]
    test_file.write_text("import pytest\n\npytestmark = pytest.mark.gpu\n\ndef test_a():\n    pass\n\n"
                         "def test_b():\n    pass\n")  # fmt: skip
    assert rs.test_functions(str(test_file)) == ["test_a", "test_b"]

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
    exclude = cmd[cmd.index("--kernel-name-exclude") + 1]
    assert exclude == "regex=" + rs.REFERENCE_KERNELS and "," not in exclude  # a comma separates keys
    assert "--kernel-name-exclude" not in rs.command("memcheck", "t.py", quick=False, exclude=None)


def test_reference_kernels_are_torchs_not_ours():
    import re

    ours = ["main", "main_kernel", "mla_decode_kernel", "gemv_kernel", "flash_fwd", "sm90_gemm", "topk_kernel"]
    theirs = [
        "nvjet_sm90_hsh_128x72_64x8_4x2_h_bz_NNT",
        "fmha_cutlassF_f32_aligned_64x128_rf_sm80",
        "_ZN2at6native29vectorized_elementwise_kernelILi4E",
        "sm90_xmma_gemm_f16f16_f16f32",
        "_ZN13pytorch_flash15flash_fwd_kernel",
        "cudnn_generated_fort_native_sdpa_sm90",
        "gemv2T_kernel_val",
    ]
    assert not [k for k in ours if re.search(rs.REFERENCE_KERNELS, k)]
    assert all(re.search(rs.REFERENCE_KERNELS, k) for k in theirs)


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

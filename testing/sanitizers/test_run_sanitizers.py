"""run_sanitizers.py reads compute-sanitizer's verdicts right and builds its command lines (CPU)."""

import os
import shutil
import subprocess

import pytest
import run_sanitizers as rs


def _hazard(kernel):
    return ("========= Error: Potential RAW hazard detected at __shared__ 0x388c0 in block (0,1,0) :\n"
            f"=========     Write Thread (96,0,0) at {kernel}+0x35d0 in device.cu:315\n"
            f"=========     Read Thread (224,0,0) at {kernel}+0x37b0 in device.cu:323\n")  # fmt: skip


def test_verdicts():
    assert rs.verdict(0, "========= ERROR SUMMARY: 0 errors\n1 passed") == "clean"
    ours, cublas = _hazard("mla_decode_kernel"), _hazard("nvjet_sm90_hsh_128x72_64x8_4x2_h_bz_NNT")
    summary = "========= RACECHECK SUMMARY: 2 hazards displayed (448 errors, 0 warnings)\n1 passed"
    assert rs.verdict(99, ours + cublas + summary) == "448 errors"
    assert rs.verdict(99, cublas + cublas + summary) == "clean"  # only the reference's (cuBLAS) reports
    assert rs.verdict(99, cublas + summary.replace("1 passed", "1 failed")) == "448 errors"
    assert rs.reports_by_kernel(ours + cublas + cublas) == {
        "mla_decode_kernel": 1,
        "nvjet_sm90_hsh_128x72_64x8_4x2_h_bz_NNT": 2,
    }
    memcheck = "========= Invalid __global__ read of size 4 bytes\n=========     at main_kernel+0x1a0\n"
    assert rs.verdict(99, memcheck + "========= ERROR SUMMARY: 1 error") == "1 errors"
    assert rs.verdict(1, "========= Internal Sanitizer Error: The Sanitizer failed to handle") == "sanitizer failed"
    assert rs.verdict(99, "========= ERROR SUMMARY: 3 errors") == "3 errors"
    assert rs.verdict(None, "") == "timeout"
    assert rs.verdict(1, "FAILED test_x.py::test_y\n1 failed") == "test failed (rc 1)"
    # initcheck: a reference kernel reading bytes nothing wrote is an output of ours left unwritten
    uninit = "========= Uninitialized __global__ memory read of size 4 bytes\n=========     at {}+0x1a0\n"
    torch_read = uninit.format("_ZN2at6native29vectorized_elementwise_kernelILi4E")
    assert rs.verdict(99, torch_read + "========= ERROR SUMMARY: 1 error", "initcheck") == "1 errors"
    assert rs.verdict(99, torch_read + "========= ERROR SUMMARY: 1 error", "racecheck") == "clean"


def test_command(monkeypatch):
    monkeypatch.setattr(rs, "sanitizer", lambda: "/cuda/bin/compute-sanitizer")
    cmd = rs.command("racecheck", "examples/gemm/test_example_gemm.py", quick=True)
    assert cmd[:3] == ["/cuda/bin/compute-sanitizer", "--tool", "racecheck"] and "--racecheck-report" in cmd
    assert cmd[cmd.index("-m", cmd.index("pytest") - 1) + 1] == "pytest" or "pytest" in cmd
    assert cmd[-2:] == ["-k", "not persistent"] and "examples/gemm/test_example_gemm.py" in cmd
    exclude = cmd[cmd.index("--kernel-name-exclude") + 1]
    assert exclude == "regex=" + rs.REFERENCE_KERNELS_UNCHECKED and "," not in exclude  # a comma separates keys
    assert "--kernel-name-exclude" not in rs.command("memcheck", "t.py", quick=False, exclude=None)
    assert "--kernel-name-exclude" not in rs.command("initcheck", "t.py", quick=False)  # every kernel checked


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
    assert re.search(rs.REFERENCE_KERNELS_UNCHECKED, "fmha_cutlassF_f32_aligned_64x128_rf_sm80")
    assert not re.search(rs.REFERENCE_KERNELS_UNCHECKED, "nvjet_sm90_hsh_128x72_64x8_4x2_h_bz_NNT")  # checked


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


@pytest.mark.skipif(shutil.which("nvcc") is None, reason="nvcc not installed")
def test_the_racecheck_probe_builds(tmp_path):
    # probes/named_barrier_race.cu: run on the GPU machine by hand (its header says how); kept buildable.
    probe = os.path.join(os.path.dirname(__file__), "probes", "named_barrier_race.cu")
    cmd = ["nvcc", "-gencode", "arch=compute_90a,code=sm_90a", "-o", str(tmp_path / "probe"), probe]
    subprocess.run(cmd, check=True, capture_output=True)


def test_quick_runs_each_functions_first_and_last_case(monkeypatch):
    monkeypatch.setattr(rs, "sanitizer", lambda: "/cuda/bin/compute-sanitizer")
    listing = (
        "test_example_gemm.py::test_gemm[float16-128]\n"
        "test_example_gemm.py::test_gemm[float16-256]\n"
        "test_example_gemm.py::test_gemm[bfloat16-128]\n"
        "test_example_gemm.py::test_gemm_persistent\n"
        "test_example_gemm.py::test_generated_cuda_compiles[sm_80]\n"
        "\n5 tests collected in 1.2s\n"
    )
    path = "/x/examples/gemm/test_example_gemm.py"
    ids = rs.end_case_ids(listing, path, "test_gemm")
    assert ids == [path + "::test_gemm[float16-128]", path + "::test_gemm[bfloat16-128]"]
    assert rs.end_case_ids(listing, path, "test_gemm_persistent") == [path + "::test_gemm_persistent"]
    assert rs.end_case_ids(listing, path, "test_missing") == [path + "::test_missing"]  # all of it
    cmd = rs.command("racecheck", ids, quick=True)
    assert cmd[cmd.index("no:cacheprovider") + 1 :][:2] == ids


def test_end_cases_from_pytests_collection():
    sparse = os.path.join(rs.ROOT, "examples", "sparse_attention", "test_example_sparse_attention.py")
    cases = rs.end_cases(sparse, rs.test_functions(sparse))
    assert len(cases) == 2 and all(len(ids) == 2 for ids in cases.values())
    assert cases["test_nsa_fwd"][0].startswith(sparse + "::test_nsa_fwd[")

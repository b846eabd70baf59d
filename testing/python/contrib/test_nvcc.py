"""tilelang.contrib.nvcc: compute versions from targets (and from the GPU, faked here), the
feature predicates, and compile_cuda through the installed nvcc."""

import shutil

import pytest

from tilelang.contrib import nvcc
from tilelang.errors import UserError
from tilelang.utils import target as target_utils


def test_compute_version_of_targets():
    assert nvcc.get_target_compute_version("sm_90a") == "9.0"
    assert nvcc.get_target_compute_version("sm_89") == "8.9"
    assert nvcc.get_target_compute_version({"kind": "cuda", "arch": "sm_80"}) == "8.0"
    assert nvcc.get_target_compute_version("sm_120") == "12.0"
    assert float(nvcc.get_target_compute_version("sm_90a")) >= 9.0  # how examples use it


def test_compute_version_of_the_gpu(monkeypatch):
    monkeypatch.setattr(target_utils, "detect_arch", lambda: "sm_86")
    assert nvcc.get_target_compute_version() == "8.6"
    monkeypatch.setattr(target_utils, "detect_arch", lambda: "sm_90a")
    assert nvcc.get_target_compute_version() == "9.0" and nvcc.have_tensorcore()
    monkeypatch.setattr(target_utils, "detect_arch", lambda: None)
    with pytest.raises(UserError, match="no GPU is visible"):  # raised at the call: the traceback shows the user's line
        nvcc.get_target_compute_version()
    assert not nvcc.have_tensorcore()


def test_parse_and_arch():
    assert nvcc.parse_compute_version("9.0") == (9, 0)
    assert nvcc.get_target_arch("9.0") == "90a" and nvcc.get_target_arch((8, 9)) == "89"
    # raised at the call: the traceback shows the user's line
    with pytest.raises(UserError, match="not of the form 'major.minor'"):
        nvcc.parse_compute_version("sm_90")


def test_feature_predicates():
    assert nvcc.have_fp16("7.0") and not nvcc.have_fp16("5.0")
    assert nvcc.have_bf16("8.0") and not nvcc.have_bf16("7.5")
    assert nvcc.have_fp8("8.9") and not nvcc.have_fp8("8.6")
    assert nvcc.have_tensorcore("7.0") and not nvcc.have_tensorcore("6.1")
    assert nvcc.have_tensorcore(target="sm_80")
    assert nvcc.have_tma("sm_90a") and not nvcc.have_tma("sm_80")
    assert nvcc.is_hopper("sm_90a") and not nvcc.is_hopper("sm_89")
    assert nvcc.have_mbarrier("sm_90a") and nvcc.have_pdl("sm_90a")


needs_nvcc = pytest.mark.skipif(shutil.which("nvcc") is None, reason="needs nvcc")


@needs_nvcc
def test_compile_cuda_and_version():
    code = 'extern "C" __global__ void fill(float* x) { x[threadIdx.x] = 1.0f; }'
    ptx = nvcc.compile_cuda(code, target_format="ptx", arch="sm_80")
    assert b".target sm_80" in ptx and b".entry fill" in ptx
    cubin = nvcc.compile_cuda(code, target_format="cubin", arch="sm_90a")
    assert cubin[:4] == b"\x7fELF"
    assert len(nvcc.get_cuda_version()) >= 2 and nvcc.get_cuda_version() >= (11, 0)
    with pytest.raises(RuntimeError, match="nvcc failed"):
        nvcc.compile_cuda("this is not CUDA", arch="sm_80")
    with pytest.raises(UserError, match="target_format"):  # raised at the call: the traceback shows the user's line
        nvcc.compile_cuda(code, target_format="obj", arch="sm_80")

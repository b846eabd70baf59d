"""The jit layer: factories, out_idx, targets, and the errors a wrong call gets (CPU-only checks)."""

import pytest
import torch

import tilelang
import tilelang.language as T
from tilelang.errors import UserError
from tilelang.jit.kernel import normalize_out_idx
from tilelang.utils.target import arch_of, determine_target


@tilelang.jit(out_idx=[-1], target="sm_80")
def scale(N, factor=2.0, dtype="float32"):
    @T.prim_func
    def main(A: T.Tensor((N,), dtype), B: T.Tensor((N,), dtype)):
        with T.Kernel(T.ceildiv(N, 128), threads=128) as bx:
            for i in T.Parallel(128):
                B[bx * 128 + i] = A[bx * 128 + i] * factor

    return main


def test_factory_caches_per_arguments():
    assert scale(256) is scale(256)
    assert scale(256) is not scale(512)
    assert scale(256, factor=3.0) is not scale(256)


def test_kernel_knows_params_and_outputs():
    k = scale(256)
    assert [p.name for p in k.params] == ["A", "B"]
    assert k.out_idx == [1]
    assert "__global__" in k.get_kernel_source() and "scale_kernel" in k.get_kernel_source()
    assert "tl_kernel_scale_kernel().launch( &cuda_config" in k.get_host_source()


def test_normalize_out_idx():
    assert normalize_out_idx(-1, 3) == [2]
    assert normalize_out_idx([0, -1], 3) == [0, 2]
    assert normalize_out_idx(None, 3) == []
    with pytest.raises(ValueError, match="out of range"):
        normalize_out_idx(3, 3)


@pytest.mark.parametrize(
    "spec,arch",
    [
        ("sm_80", "sm_80"),
        ("sm_89", "sm_89"),
        ("sm_90", "sm_90a"),
        ("sm_90a", "sm_90a"),
        ({"kind": "cuda", "arch": "sm_80"}, "sm_80"),
        ("cuda -arch=sm_89", "sm_89"),
        ("nvidia/nvidia-a100", "sm_80"),
    ],
)
def test_explicit_targets_need_no_gpu(spec, arch):
    target = determine_target(spec)
    assert arch_of(target) == arch and target.host.kind.name == "cuda_host"


def test_unknown_target_is_a_clear_error():
    with pytest.raises(UserError, match="unknown target"):  # raised at the call: the traceback shows the user's line
        determine_target("vulkan-ish")


@pytest.mark.skipif(torch.cuda.is_available(), reason="checks the message given without a GPU")
def test_cuda_target_without_gpu_says_what_to_do():
    with pytest.raises(UserError, match="sm_90a"):  # raised at the call: the traceback shows the user's line
        determine_target("cuda")


@pytest.fixture(scope="module")
def built():
    k = scale(4096)
    k._ensure_built()  # nvcc, once; the library loads without a GPU
    return k


@pytest.mark.parametrize(
    "make,expect",
    [
        (lambda: torch.randn(4096, dtype=torch.float16), "dtype float16 instead of float32"),
        (lambda: torch.randn(100), "shape [100] instead of [4096]"),
        (lambda: torch.randn(64, 64), "2 dimensions instead of 1"),
        (lambda: torch.randn(8192)[::2], "non-contiguous"),
        (lambda: torch.randn(4096), "instead of a CUDA device"),
        (lambda: 3.0, "got float 3.0"),
    ],
)
def test_argument_errors_name_parameter_expected_and_got(built, make, expect):
    with pytest.raises(ValueError) as info:
        built(make())
    text = str(info.value)
    assert "parameter 'A'" in text and "shape [4096] and dtype float32" in text and expect in text


def test_wrong_number_of_inputs(built):
    with pytest.raises(ValueError, match=r"takes 1 input tensors \(A\)"):
        built(torch.randn(4096), torch.randn(4096))


def test_one_static_output_is_allocated_by_the_launcher():
    from tilelang.codegen import cuda

    k = scale(256)
    assert "__tvm_ffi_scale__alloc_out" in k.get_host_source()  # the launcher's own allocation
    assert "TVMFFIEnvTensorAlloc" in k.get_host_source()
    cuda.compile_object(k.get_kernel_source(), k.target, host_src=k.get_host_source())
    # Inputs given as outputs too (no out_idx): nothing to allocate.
    plain = tilelang.compile(scale.factory(256), target="sm_80")
    assert "__alloc_out" not in plain.get_host_source()

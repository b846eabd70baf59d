"""Scalar and pointer kernel parameters on the CPU: what the kernel records about them, the launcher it
gets, and the errors of a wrong argument (the GPU runs are in test_scalar_params_gpu.py)."""

import json

import pytest
import scalar_kernels
import torch

import tilelang
from tilelang.jit.params import Param, check_argument, diagnose, params_of

TARGET = "cuda -arch=sm_90a"


def test_scalar_and_pointer_parameters_are_recorded():
    a, b, n, s = params_of(scalar_kernels.scale_prefix())
    assert a.kind == b.kind == "tensor"
    assert (n.kind, n.dtype, n.shape) == ("scalar", "int32", ())
    assert (s.kind, s.dtype) == ("scalar", "float32")
    assert n.describe() == "a Python int (int32)" and s.describe() == "a Python float (float32)"
    p, _ = params_of(scalar_kernels.double_through_pointer())
    assert (p.kind, p.dtype) == ("pointer", "handle")
    for q in (n, s, p):
        assert Param.from_json(json.loads(json.dumps(q.to_json()))) == q


def test_the_launcher_passes_scalars_to_the_kernel():
    kernel = tilelang.compile(scalar_kernels.scale_prefix(), target=TARGET)
    host = kernel.get_host_source()
    assert "auto cuda_arg_2 = n;" in host and "auto cuda_arg_3 = s;" in host
    assert "(n + 127) >> 7" in host  # the grid comes from the scalar
    assert "float* __restrict__ B_ptr, int n, float s)" in kernel.get_kernel_source()


@pytest.mark.parametrize(
    "args, message",
    [
        ((1.5, 2.0), "parameter 'n' (argument #2) expects a Python int (int32), got float 1.5"),
        ((2**40, 2.0), "got 1099511627776, which does not fit in int32"),
        ((True, 2.0), "expects a Python int (int32), got bool True"),
        ((5, "x"), "parameter 's' (argument #3) expects a Python float (float32), got str 'x'"),
    ],
)
def test_a_wrong_scalar_is_named(args, message):
    params = params_of(scalar_kernels.scale_prefix())
    a = torch.zeros(1024)
    with pytest.raises(ValueError, match=message.replace("(", r"\(").replace(")", r"\)")):
        diagnose(params, (a, a, *args), "scale_prefix")


def test_a_pointer_takes_a_tensor_or_an_address():
    p, _ = params_of(scalar_kernels.double_through_pointer())
    check_argument(p, torch.zeros(4), 0, "k", device=False)
    check_argument(p, 0x7F0000000000, 0, "k")
    with pytest.raises(ValueError, match="expects a CUDA tensor .* or a device address as an int, got str"):
        check_argument(p, "a", 0, "k")
    with pytest.raises(ValueError, match="got a cpu tensor"):
        check_argument(p, torch.zeros(4), 0, "k")


def test_the_profiler_does_not_invent_scalars():
    from tilelang.profiler.tensor_supply import TensorSupplyType, supply_tensor

    n = params_of(scalar_kernels.scale_prefix())[2]
    with pytest.raises(ValueError, match="parameter 'n' is a scalar .* pass the arguments yourself"):
        supply_tensor(n, TensorSupplyType.Auto, device="cpu")

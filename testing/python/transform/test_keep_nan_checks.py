"""keep_nan_checks: `x != x` / `x == x` on floats keep their IEEE meaning (a NaN test) instead of
folding to False / True; on the CPU target, with numbers."""

import pytest
import torch

import tilelang
import tilelang.language as T
from tilelang.codegen import cuda


def nan_flags(dtype="float32"):
    @T.prim_func
    def main(X: T.Tensor((128,), dtype), Y: T.Tensor((128,), "int32"), Z: T.Tensor((128,), "int32")):
        with T.Kernel(1, threads=128):
            for i in T.Parallel(128):
                Y[i] = T.if_then_else(X[i] != X[i], 1, 0)
                Z[i] = T.if_then_else(X[i] == X[i], 1, 0)

    return main


@pytest.mark.parametrize("dtype", ["float32", "float16", "bfloat16"])
def test_on_the_cpu(dtype):
    x = torch.randn(128).to(getattr(torch, dtype))
    x[[3, 77]] = float("nan")
    y, z = torch.zeros(128, dtype=torch.int32), torch.zeros(128, dtype=torch.int32)
    tilelang.compile(nan_flags(dtype), target="cpu")(x, y, z)
    assert torch.equal(y, x.isnan().int()) and torch.equal(z, (~x.isnan()).int())


@pytest.mark.parametrize("arch", ["sm_80", "sm_90a"])
@pytest.mark.parametrize("dtype", ["float32", "float16"])
def test_generated_code_tests_for_nan(arch, dtype):
    kernel = tilelang.compile(nan_flags(dtype), target=arch)
    src = kernel.get_kernel_source()
    body = src[src.index("__global__ void __launch_bounds__") :]
    assert body.count(" != ") == 2  # isnan: the value compared with itself, not folded away
    cuda.compile_object(src, kernel.target, host_src=kernel.host_source)


def test_integers_still_fold():
    @T.prim_func
    def main(X: T.Tensor((128,), "int32"), Y: T.Tensor((128,), "int32")):
        with T.Kernel(1, threads=128):
            for i in T.Parallel(128):
                Y[i] = T.if_then_else(X[i] != X[i], 1, 0)

    src = tilelang.compile(main, target="sm_80").get_kernel_source()
    assert "isnan" not in src and "X_ptr" not in src[src.index("__global__ void __launch_bounds__"):]

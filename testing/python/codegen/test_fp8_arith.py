"""fp8 arithmetic and comparisons compute in float32 in the generated CUDA (`codegen/fp8_arith.py`):
cuda_fp8.h has no operators, so `a + b` and `a != b` of two fp8 values did not compile."""

import re

import pytest
import torch

import tilelang
import tilelang.language as T
from tilelang.codegen import cuda

FP8 = {"float8_e4m3": "__nv_fp8_e4m3", "float8_e5m2": "__nv_fp8_e5m2"}


def scale_and_flag(dtype, n=128):
    """B = A * 2 + A reversed, in A's dtype; F = 1 where A is not zero, + 2 where A < its reverse."""

    @T.prim_func
    def main(A: T.Tensor((n,), dtype), B: T.Tensor((n,), dtype), F: T.Tensor((n,), "int32")):
        with T.Kernel(1, threads=n):
            tx = T.get_thread_binding()
            a = T.alloc_local((2,), dtype)
            a[0] = A[tx]
            a[1] = A[n - 1 - tx]
            B[tx] = a[0] * T.cast(2, dtype) + a[1]
            F[tx] = T.if_then_else(a[0] != T.cast(0, dtype), 1, 0) + T.if_then_else(a[0] < a[1], 2, 0)

    return main


@pytest.mark.parametrize("dtype", list(FP8))
@pytest.mark.parametrize("arch", ["sm_89", "sm_90a"])  # fp8 kernels need sm_89 or later
def test_fp8_operations_compute_in_float32(dtype, arch):
    kernel = tilelang.compile(scale_and_flag(dtype), out_idx=[1, 2], target=arch)
    src = kernel.get_kernel_source()
    body = src[src.index("__global__ void") :]
    fp8 = FP8[dtype]
    # Comparisons of the two values as floats, arithmetic rounded back to fp8 once per operation.
    assert "((float)a_ptr[0]) < ((float)a_ptr[1])" in body
    assert re.search(r"\(\(float\)a_ptr\[0\]\) != \(\(float\)" + fp8 + r"\(0x0p\+0f", body)
    assert f"(({fp8})(((float)(({fp8})(((float)a_ptr[0]) * ((float){fp8}(0x1p+1f" in body
    cuda.compile_object(src, kernel.target, host_src=kernel.get_host_source())


def test_other_types_are_left_as_they_are():
    src = tilelang.compile(scale_and_flag("float16"), out_idx=[1, 2], target="sm_80").get_kernel_source()
    body = src[src.index("__global__ void") :]
    assert "(float)" not in body and "(a_ptr[0] < a_ptr[1])" in body


@pytest.mark.gpu
@pytest.mark.parametrize("dtype", list(FP8))
def test_fp8_operations_on_gpu(dtype):
    torch_dtype = {"float8_e4m3": torch.float8_e4m3fn, "float8_e5m2": torch.float8_e5m2}[dtype]
    kernel = tilelang.compile(scale_and_flag(dtype), out_idx=[1, 2])
    a = torch.randn(128, device="cuda").to(torch_dtype)
    a[::7] = 0
    b, f = kernel(a)
    x, r = a.float(), a.flip(0).float()
    expect_b = ((x * 2).to(torch_dtype).float() + r).to(torch_dtype)
    torch.testing.assert_close(b.float(), expect_b.float())
    torch.testing.assert_close(f, (x != 0).int() + 2 * (x < r).int())

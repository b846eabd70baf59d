"""Scalar and pointer kernel parameters on the GPU: values reach the kernel, a tensor passed for a
pointer gives its data address (skipped without a GPU)."""

import pytest
import scalar_kernels
import torch

import tilelang

pytestmark = pytest.mark.gpu


@pytest.mark.parametrize("n", [0, 1, 700, 1024])
def test_scalars_reach_the_kernel(n):
    kernel = tilelang.compile(scalar_kernels.scale_prefix())
    a = torch.randn(1024, device="cuda")
    b = torch.full((1024,), -1.0, device="cuda")
    kernel(a, b, n, 0.5)
    torch.testing.assert_close(b[:n], a[:n] * 0.5)
    assert bool((b[n:] == -1).all())


def test_scalars_with_an_allocated_output():
    kernel = tilelang.compile(scalar_kernels.scale_prefix(), out_idx=[1])
    a = torch.randn(1024, device="cuda")
    torch.testing.assert_close(kernel(a, 1024, 3.0), a * 3)


def test_a_pointer_takes_a_tensor_or_its_address():
    kernel = tilelang.compile(scalar_kernels.double_through_pointer(), out_idx=[1])
    a = torch.randn(1024, device="cuda")
    torch.testing.assert_close(kernel(a), a * 2)
    torch.testing.assert_close(kernel(a.data_ptr()), a * 2)

"""Vectors behind a run-time check of dynamic sizes (GPU): the same kernel gives torch's answer
whether the sizes are multiples of the vector (vector branch) or not (one element at a time)."""

import pytest
import torch
from test_vectorize import dynamic_copy, dynamic_gemm

import tilelang

pytestmark = pytest.mark.gpu


@pytest.mark.parametrize("m,n", [(256, 128), (300, 200), (300, 203), (1, 8), (129, 65), (7, 1)])
def test_dynamic_copy(m, n):
    kernel = tilelang.compile(dynamic_copy(), out_idx=[1])
    a = torch.randn(m, n, device="cuda", dtype=torch.float16)
    assert torch.equal(kernel(a), a)


@pytest.mark.parametrize("m,n,k", [(256, 256, 256), (257, 136, 72), (255, 130, 67), (128, 129, 31), (1, 8, 1000)])
def test_dynamic_gemm(m, n, k):
    kernel = tilelang.compile(dynamic_gemm(), out_idx=[2])
    a = torch.randn(m, k, device="cuda", dtype=torch.float16)
    b = torch.randn(k, n, device="cuda", dtype=torch.float16)
    torch.testing.assert_close(kernel(a, b), (a.float() @ b.float()).half(), rtol=1e-2, atol=1e-2)

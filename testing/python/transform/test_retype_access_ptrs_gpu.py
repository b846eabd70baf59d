"""The kernel of test_retype_access_ptrs.py on the GPU: a bfloat16 gemm operand in the bytes a float32
tile used before it; both results against torch."""

import pytest
import torch
from test_retype_access_ptrs import _workspace_then_gemm

import tilelang

pytestmark = pytest.mark.gpu


def test_workspace_then_gemm():
    x = torch.randn(64, 32, device="cuda")
    a, b = torch.randn(64, 64, device="cuda").bfloat16(), torch.randn(64, 64, device="cuda").bfloat16()
    y, c = tilelang.compile(_workspace_then_gemm(), out_idx=[1, 4])(x, a, b)
    torch.testing.assert_close(y, x * 2)
    ref = a.double() @ b.double()
    assert (c.double() - ref).norm() / ref.norm() < 1e-3

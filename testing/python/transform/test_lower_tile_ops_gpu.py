"""A gemm operand loaded by the kernel's own cp.async (test_lower_tile_ops.py's kernel): each
thread's pointer goes where the tile's layout puts its chunk, so the gemm reads B; against torch."""

import pytest
import torch
from test_lower_tile_ops import cp_async_into_a_wgmma_operand

import tilelang

pytestmark = pytest.mark.gpu


def test_cp_async_into_a_gemm_operand():
    a = torch.randn(64, 64, device="cuda", dtype=torch.float16)
    b = torch.randn(64, 128, device="cuda", dtype=torch.float16)
    c = tilelang.compile(cp_async_into_a_wgmma_operand(), out_idx=[2])(a, b)
    torch.testing.assert_close(c, a.float() @ b.float(), rtol=1e-2, atol=1e-2)

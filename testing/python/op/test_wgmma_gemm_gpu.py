"""T.wgmma_gemm on the GPU: two parts of a product issued without a wait, then T.wait_wgmma(0)
(test_wgmma_gemm.py's kernel), against torch."""

import pytest
import torch
from test_wgmma_gemm import two_parts

import tilelang

pytestmark = [pytest.mark.gpu]


def test_two_parts_then_one_wait():
    if torch.cuda.get_device_capability() != (9, 0):
        pytest.skip("wgmma needs sm_90a")
    q, k = torch.randn(64, 128, device="cuda").bfloat16(), torch.randn(64, 128, device="cuda").bfloat16()
    qt, kt = torch.randn(64, 64, device="cuda").bfloat16(), torch.randn(64, 64, device="cuda").bfloat16()
    s = tilelang.compile(two_parts(), out_idx=[4])(q, k, qt, kt)
    ref = q.float() @ k.float().T + qt.float() @ kt.float().T
    torch.testing.assert_close(s, ref, rtol=1e-2, atol=1e-2)

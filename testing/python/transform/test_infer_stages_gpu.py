"""The attention loop that infer_stages splits as FlashAttention-3 does computes what program order
computes (test_infer_stages.py's kernel, against torch)."""

import pytest
import torch
from test_infer_stages import _attention

import tilelang

pytestmark = pytest.mark.gpu


def _reference(q, k, v, causal=False):
    m = torch.full((128,), float("-inf"), device=q.device)
    o = torch.zeros(128, 64, device=q.device)
    rows = torch.arange(128, device=q.device)[:, None] + 256
    for b in range(8):
        s = q.float() @ k[b * 64 : (b + 1) * 64].float().T
        if causal:
            cols = torch.arange(64, device=q.device)[None, :] + b * 64
            s = s + torch.where(rows >= cols, 0.0, float("-inf"))
        m_prev, m = m, torch.maximum(m, s.max(dim=1).values)
        p = torch.exp2(s - m[:, None]).half().float()
        o = o * torch.exp2(m_prev - m)[:, None] + p @ v[b * 64 : (b + 1) * 64].float()
    return o


@pytest.mark.parametrize("variant", ["plain", "causal mask with names"])
def test_split_attention_loop_matches_program_order(variant):
    q = torch.randn(128, 64, device="cuda", dtype=torch.float16)
    k, v = (torch.randn(512, 64, device="cuda", dtype=torch.float16) for _ in range(2))
    kernel = tilelang.compile(_attention(variant), out_idx=[3])
    assert "wgmma_wait<1>" in kernel.get_kernel_source()  # the split schedule
    want = _reference(q, k, v, causal=variant != "plain")
    torch.testing.assert_close(kernel(q, k, v), want, rtol=1e-2, atol=1e-2)

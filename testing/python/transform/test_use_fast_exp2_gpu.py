"""tl::fast_exp2 on the GPU: within a few ulp of torch's exp2 over the range attention uses, and
results below 2^-126 flush to zero (the .ftz of ex2.approx.ftz.f32)."""

import pytest
import torch
from test_use_fast_exp2 import _kernel

import tilelang

pytestmark = pytest.mark.gpu


def test_fast_exp2_is_close_to_exp2():
    k = tilelang.compile(_kernel())
    a = torch.linspace(-120.0, 60.0, 1024, device="cuda")
    b = torch.empty_like(a)
    k(a, b)
    want = torch.exp2(a.double()) + torch.exp(a.double())
    torch.testing.assert_close(b.double(), want, rtol=2e-6, atol=0)


def test_tiny_results_flush_to_zero():
    k = tilelang.compile(_kernel())
    a = torch.full((1024,), -140.0, device="cuda")  # 2^-140: subnormal in float32
    b = torch.empty_like(a)
    k(a, b)
    assert (b == torch.exp(a)).all()  # exp2 part flushed to 0; exp(-140) is 0 in float32 too

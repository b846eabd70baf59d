"""test_hoist_loop_barriers.py's transpose on the GPU: with one barrier before its loop (not one per
iteration), every element arrives."""

import pytest
import torch
from test_hoist_loop_barriers import transpose

import tilelang

pytestmark = pytest.mark.gpu


def test_transpose():
    a = torch.randn(64, 64, device="cuda", dtype=torch.float16)
    b = tilelang.compile(transpose, out_idx=[-1])(a)
    torch.testing.assert_close(b, a.T * 2)

"""The kernel of test_hoist_shared_reads.py on the GPU: a branch on a value another thread wrote to
shared memory and a loop bound thread 0 wrote, after the one barrier."""

import pytest
import torch
from test_hoist_shared_reads import branch_on_shared

import tilelang

pytestmark = pytest.mark.gpu


def test_branch_on_shared():
    a = torch.randint(-5, 6, (128,), dtype=torch.int32, device="cuda")
    b = tilelang.compile(branch_on_shared, out_idx=[-1])(a)
    n = int(a[0]) % 8
    expected = (a.flip(0) > 0).to(torch.int32) + a[:n].sum().to(torch.int32)
    torch.testing.assert_close(b, expected)

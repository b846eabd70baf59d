"""A condition on a table an earlier kernel of the function filled (test_block_uniform_conditions.py's
kernel) runs with its barrier inside the branch, on the GPU: the rows whose table entry is set are
reversed through shared memory, the others left as they were."""

import pytest
import torch
from test_block_uniform_conditions import _table_from_an_earlier_kernel

import tilelang

pytestmark = pytest.mark.gpu


def test_a_table_an_earlier_kernel_wrote():
    x = torch.randn(4, 128, device="cuda", dtype=torch.float16)
    given = torch.tensor([0, -1, 2, -5], device="cuda", dtype=torch.int32)
    y = torch.zeros(4, 128, device="cuda", dtype=torch.float16)
    tilelang.compile(_table_from_an_earlier_kernel())(x, given, y)
    want = torch.where((given >= 0)[:, None], x.flip(1), torch.zeros_like(x))
    torch.testing.assert_close(y, want)

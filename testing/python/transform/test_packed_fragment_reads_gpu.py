"""test_packed_fragment_reads.py's unpacking kernel on the GPU, against torch (strict xfail with it)."""

import pytest
import torch
from test_packed_fragment_reads import unpack_int4

import tilelang

pytestmark = pytest.mark.gpu


@pytest.mark.xfail(strict=True, reason="layout inference: a fragment read as [i, j // 2] by its unpacking loop")
def test_unpack_int4():
    b = torch.randint(0, 256, (64, 64), dtype=torch.uint8, device="cuda")
    c = tilelang.compile(unpack_int4(), out_idx=[-1])(b)
    nibbles = torch.stack((b & 15, b >> 4), dim=-1).reshape(64, 128).to(torch.int8)
    torch.testing.assert_close(c, torch.where(nibbles > 7, nibbles - 16, nibbles))

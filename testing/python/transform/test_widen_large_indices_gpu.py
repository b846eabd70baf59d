"""A tensor of 2**31 elements or more read at the right addresses on the GPU (test_widen_large_indices.py's
kernels, 2.7 GB of int8 and 5.4 GB of float16): past the int32 range an offset would wrap."""

import pytest
import torch
from test_widen_large_indices import gather_rows, tile_loads

import tilelang

pytestmark = pytest.mark.gpu


def test_rows_past_int32():
    B = torch.zeros(160, 4096, 4096, device="cuda", dtype=torch.int8)
    B[150, 7, :64] = torch.arange(1, 65, dtype=torch.int8, device="cuda")
    out = torch.zeros(160, 64, device="cuda", dtype=torch.int8)
    tilelang.compile(gather_rows())(B, out)
    assert torch.equal(out[150], B[150, 7, :64]) and not out[:150].any()


def test_tiles_past_int32():
    B = torch.zeros(160, 4096, 4096, device="cuda", dtype=torch.float16)
    B[159, 64:128, 128:192] = torch.randn(64, 64, device="cuda", dtype=torch.float16)
    out = torch.zeros(160, 64, 64, device="cuda", dtype=torch.float16)
    tilelang.compile(tile_loads())(B, out)
    assert torch.equal(out[159], B[159, 64:128, 128:192])

"""Replicated fragments on the GPU: a value every iteration reads, and a per-row value read along
its row (the kernels of test_infer_layout.py), against torch on random inputs."""

import pytest
import torch
from test_infer_layout import row_value_read_along_its_row, scale_read_by_every_iteration

import tilelang

pytestmark = pytest.mark.gpu


def test_scale_read_by_every_iteration():
    a, s = torch.randn(8, 256, device="cuda"), torch.randn(8, device="cuda")
    b = tilelang.compile(scale_read_by_every_iteration(), out_idx=[-1])(a, s)
    torch.testing.assert_close(b, a * s[:, None])


def test_row_value_read_along_its_row():
    a, s = torch.randn(64, 256, device="cuda"), torch.randn(64, device="cuda")
    b = tilelang.compile(row_value_read_along_its_row(), out_idx=[-1])(a, s)
    torch.testing.assert_close(b, a * (2 * s)[:, None])

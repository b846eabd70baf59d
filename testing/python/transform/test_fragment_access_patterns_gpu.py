"""The kernels of test_fragment_access_patterns.py on the GPU, against torch on random inputs:
fragments indexed by loops around a T.Parallel loop, read by loops they do not cover, read outside
any loop, indexed past their extent, and reduced while replicated."""

import pytest
import torch
from test_fragment_access_patterns import (
    COLUMNS_MOD_4,
    block_sparse_gemm,
    first_rows_of_an_accumulator,
    fragment_indexed_past_its_extent,
    row_max_spread_over_its_holders,
    split_combine,
    squares_by_column_groups,
    sum_of_a_replicated_fragment,
    total_of_block_sums,
)

import tilelang

pytestmark = pytest.mark.gpu


def test_split_combine():
    lse, parts = torch.randn(4, 128, device="cuda"), torch.randn(4, 128, 64, device="cuda")
    out = tilelang.compile(split_combine(), out_idx=[-1])(lse, parts)
    weights = torch.softmax(lse, dim=0)
    torch.testing.assert_close(out, (weights[:, :, None] * parts).sum(0), rtol=1e-4, atol=1e-4)


def test_squares_by_column_groups():
    x = torch.randn(32, 256, device="cuda")
    out = tilelang.compile(squares_by_column_groups(COLUMNS_MOD_4), out_idx=[-1])(x)
    torch.testing.assert_close(out, (x * x).sum(1), rtol=1e-4, atol=1e-3)


def test_row_max_spread_over_its_holders():
    a, b = torch.randn(64, 32, device="cuda").half(), torch.randn(64, 32, device="cuda").half()
    out = tilelang.compile(row_max_spread_over_its_holders(), out_idx=[-1])(a, b)
    row_max = (a.float() @ b.float().T).max(1).values
    expect = row_max[:, None] * torch.arange(1, 17, device="cuda", dtype=torch.float32)[None, :]
    torch.testing.assert_close(out, expect, rtol=1e-2, atol=1e-2)


@pytest.mark.parametrize("density", [0.0, 0.5, 1.0])
def test_block_sparse_gemm(density):
    a, b = torch.randn(128, 256, device="cuda").half(), torch.randn(256, 128, device="cuda").half()
    mask = (torch.rand(8, device="cuda") < density).to(torch.int8)
    out = tilelang.compile(block_sparse_gemm(), out_idx=[-1])(a, b, mask)
    keep = mask.repeat_interleave(32).half()
    torch.testing.assert_close(out, (a * keep[None, :]).float() @ b.float(), rtol=1e-2, atol=1e-2)


def test_total_of_block_sums():
    x = torch.randn(4, 256, device="cuda")
    out = tilelang.compile(total_of_block_sums(), out_idx=[-1])(x)
    torch.testing.assert_close(out, x.sum().reshape(1), rtol=1e-4, atol=1e-3)


def test_fragment_indexed_past_its_extent():
    a, s = torch.randn(64, device="cuda"), torch.randn(1, device="cuda")
    out = tilelang.compile(fragment_indexed_past_its_extent(), out_idx=[-1])(a, s)
    torch.testing.assert_close(out, a + s)


def test_first_rows_of_an_accumulator():
    a, b = torch.randn(64, 32, device="cuda").half(), torch.randn(64, 32, device="cuda").half()
    out = tilelang.compile(first_rows_of_an_accumulator(), out_idx=[-1])(a, b)
    torch.testing.assert_close(out, (a.float() @ b.float().T)[:4].half(), rtol=1e-2, atol=1e-2)


def test_sum_of_a_replicated_fragment():
    x = torch.randn(32, 4, device="cuda")
    out = tilelang.compile(sum_of_a_replicated_fragment(), out_idx=[-1])(x)
    torch.testing.assert_close(out, x.sum(1), rtol=1e-5, atol=1e-5)

"""Thread all-reduce and reducers against torch on random inputs (GPU): T.tvm_thread_allreduce over
thread groups inside a warp, across warps and over partial warps, a two-value (argmax) combiner,
and T.finalize_reducer of replicated reducers."""

import pytest
import torch
from test_allreduce import arg_max, split_k_sum
from test_reducer import column_max, gemv

import tilelang

pytestmark = pytest.mark.gpu


@pytest.mark.parametrize("nx, ny", [(4, 8), (2, 32), (1, 128), (3, 5), (8, 64), (1, 1024)])
def test_sums_over_thread_groups(nx, ny):
    A = torch.randn(ny, nx, device="cuda")
    B = torch.zeros(nx, device="cuda")
    tilelang.compile(split_k_sum(nx, ny))(A, B)
    torch.testing.assert_close(B, A.sum(0), rtol=1e-5, atol=1e-4)


@pytest.mark.parametrize("nx, ny", [(4, 32), (2, 64)])
def test_a_two_value_combiner(nx, ny):
    A = torch.randn(ny, nx, device="cuda")
    V = torch.zeros(nx, device="cuda")
    I = torch.zeros(nx, dtype=torch.int32, device="cuda")
    tilelang.compile(arg_max(nx, ny))(A, V, I)
    values, rows = A.max(0)
    torch.testing.assert_close(V, values)
    assert torch.equal(I.long(), rows)


@pytest.mark.parametrize("threads", [64, 256])
@pytest.mark.parametrize("replication", ["all", "none"])
def test_finalize_reducer_of_identical_copies(threads, replication):
    X = torch.randn(64, 8, device="cuda")
    Y = torch.zeros_like(X)
    tilelang.compile(column_max(8, threads, replication))(X, Y)
    torch.testing.assert_close(Y, X)  # the max of copies that all hold X


def test_gemv_reducer():
    a = torch.randn(256, 256, device="cuda", dtype=torch.float16)
    x = torch.randn(256, device="cuda", dtype=torch.float16)
    o = torch.zeros(256, device="cuda")
    tilelang.compile(gemv())(a, x, o)
    torch.testing.assert_close(o, a.float() @ x.float(), rtol=1e-2, atol=1e-2)

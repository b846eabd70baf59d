"""Reductions between a fragment and a shared tile (`op/reduce.py`, `_through_fragment`): the shared
side goes through a fragment of its own, as TileLang writes them (a community mHC backward kernel
reduces fragments into shared vectors and shared tiles into fragments)."""

import pytest
import torch
import tvm_ffi
from tvm import tirx

import tilelang
import tilelang.language as T
from tilelang.codegen import cuda
from tilelang.op import base

M, N = 64, 32


def mixed(clear=True):
    """Row sums of A from a fragment into a shared vector; row maxes of A from a shared tile into a
    fragment; both written out. With clear=False the sums add to Init."""

    @T.prim_func
    def main(
        A: T.Tensor((M, N), "float32"),
        Init: T.Tensor((M,), "float32"),
        S: T.Tensor((M,), "float32"),
        X: T.Tensor((M,), "float32"),
    ):
        with T.Kernel(1, threads=128):
            a_f = T.alloc_fragment((M, N), "float32")
            a_s = T.alloc_shared((M, N), "float32")
            sums = T.alloc_shared((M,), "float32")
            maxes = T.alloc_fragment((M,), "float32")
            T.copy(A, a_f)
            T.copy(A, a_s)
            T.copy(Init, sums)
            T.reduce_sum(a_f, sums, dim=1, clear=clear)
            T.reduce_max(a_s, maxes, dim=1)
            T.copy(sums, S)
            T.copy(maxes, X)

    return main


def _ops(func):
    out = []

    def on_eval(stmt):
        op = base.parse(stmt)
        if op is not None:
            regions = [base.Region.from_ir(a).buffer.name for a in stmt.value.args[:2]]
            out.append((op.name, *regions))

    tvm_ffi.structural_walk(func.body, [(tirx.Evaluate, on_eval)])
    return out


@pytest.mark.parametrize("clear", [True, False])
def test_the_shared_side_goes_through_a_fragment(clear):
    ops = _ops(mixed(clear))
    into_shared = [("copy", "sums", "sums_frag")] if not clear else []
    assert ops[3:] == [
        *into_shared,
        ("reduce", "a_f", "sums_frag"),
        ("copy", "sums_frag", "sums"),
        ("copy", "a_s", "a_s_frag"),
        ("reduce", "a_s_frag", "maxes"),
        ("copy", "sums", "S"),
        ("copy", "maxes", "X"),
    ]
    scopes = {}

    def on_alloc(alloc):
        scopes[alloc.buffer.name] = alloc.buffer.scope()

    tvm_ffi.structural_walk(mixed(clear).body, [(tirx.AllocBuffer, on_alloc)])
    assert scopes["sums_frag"] == scopes["a_s_frag"] == "local.fragment"


@pytest.mark.parametrize("arch", ["sm_80", "sm_90a"])
def test_mixed_reductions_compile(arch):
    kernel = tilelang.compile(mixed(clear=False), out_idx=[2, 3], target=arch)
    cuda.compile_object(kernel.get_kernel_source(), kernel.target, host_src=kernel.get_host_source())


@pytest.mark.gpu
@pytest.mark.parametrize("clear", [True, False])
def test_mixed_reductions_on_gpu(clear):
    kernel = tilelang.compile(mixed(clear), out_idx=[2, 3])
    a = torch.randn(M, N, device="cuda")
    init = torch.randn(M, device="cuda")
    s, x = kernel(a, init)
    torch.testing.assert_close(s, a.sum(dim=1) + (0 if clear else init), rtol=1e-5, atol=1e-5)
    torch.testing.assert_close(x, a.max(dim=1).values)

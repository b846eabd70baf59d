"""hoist_allocations: tiles allocated inside loop bodies move in front of the loops (CPU: the IR, and a
pipelined loop allocating its tiles inside compiles for sm_80 and sm_90a; GPU: numbers)."""

import pytest
import tvm_ffi
from tvm import tirx

import tilelang
import tilelang.language as T
from tilelang.transform.hoist_allocations import hoist_allocations


def row_sums(M=256, N=512, stages=2):
    """o[i] = sum_j a[i, j], the shared and fragment tiles allocated inside the pipelined loop."""

    @T.prim_func
    def main(a: T.Tensor((M, N), "float16"), o: T.Tensor((M,), "float32")):
        with T.Kernel(M // 128, threads=128) as bm:
            acc = T.alloc_fragment((128,), "float32")
            T.clear(acc)
            for k in T.Pipelined(N // 128, num_stages=stages):
                a_s = T.alloc_shared((128, 128), "float16")
                T.copy(a[bm * 128, k * 128], a_s)
                a_f = T.alloc_fragment((128, 128), "float16")
                T.copy(a_s, a_f)
                for i in T.serial(2):
                    scratch = T.alloc_local((4,), "float32")
                    scratch[i] = 1.0
                for i, j in T.Parallel(128, 128):
                    acc[i] += a_f[i, j]
            T.copy(acc, o[bm * 128])

    return main


def _allocs_in_loops(func):
    found = []

    def on_for(loop):
        body = loop.body.seq if isinstance(loop.body, tirx.SeqStmt) else [loop.body]
        found.extend(s.buffer.name for s in body if isinstance(s, tirx.AllocBuffer))

    tvm_ffi.structural_walk(func.body, [(tirx.For, on_for)])
    return found


def test_allocations_leave_every_loop():
    func = row_sums()
    assert sorted(_allocs_in_loops(func)) == ["a_f", "a_s", "scratch"]
    assert _allocs_in_loops(hoist_allocations(func)) == []


def test_a_function_without_them_is_returned_as_is():
    @T.prim_func
    def main(A: T.Tensor((128,), "float32")):
        with T.Kernel(1, threads=128):
            s = T.alloc_shared((128,), "float32")
            for i in T.serial(4):
                s[i] = A[i]

    assert hoist_allocations(main).same_as(main)


@pytest.mark.parametrize("target", ["sm_80", "sm_90a"])
def test_pipelined_loop_allocating_inside_compiles(target):
    tilelang.compile(row_sums(), target=target)._ensure_built()


@pytest.mark.gpu
def test_row_sums_match_torch():
    import torch

    a = torch.randn(256, 512, device="cuda", dtype=torch.float16)
    o = tilelang.compile(row_sums(), out_idx=[-1])(a)
    torch.testing.assert_close(o, a.float().sum(dim=1), rtol=1e-2, atol=1e-2)

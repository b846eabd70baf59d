"""raise_copy_loops: copy loops in a pipelined body become T.copy (CPU: the IR, and cp.async in the
CUDA a GEMM written with such loops compiles to)."""

import pytest
from tvm import tirx

import tilelang
import tilelang.language as T
from tilelang.op import base
from tilelang.transform.raise_copy_loops import raise_copy_loops
from tilelang.utils.ir import collect


def _gemm(copy_kind="plain", stages=2, M=256, N=256, K=256):
    """C = A @ B^T with its tiles loaded by T.Parallel loops written as `copy_kind` says."""

    @T.prim_func
    def main(A: T.Tensor((M, K), "float16"), B: T.Tensor((N, K), "float16"), C: T.Tensor((M, N), "float32")):
        with T.Kernel(N // 64, M // 64, threads=128) as (bx, by):
            A_s = T.alloc_shared((64, 32), "float16")
            B_s = T.alloc_shared((64, 32), "float16")
            C_l = T.alloc_fragment((64, 64), "float32")
            T.clear(C_l)
            for ko in T.Pipelined(K // 32, num_stages=stages):
                for i, k in T.Parallel(64, 32):
                    if copy_kind == "plain":
                        A_s[i, k] = A[by * 64 + i, ko * 32 + k]
                    elif copy_kind == "transposed":
                        A_s[i, k] = A[ko * 32 + k, by * 64 + i]
                    elif copy_kind == "strided":
                        A_s[i, k] = A[by * 64 + i, ko * 64 + 2 * k]
                    else:  # "scaled": not a plain copy
                        A_s[i, k] = A[by * 64 + i, ko * 32 + k] * T.float16(2)
                for j, k in T.Parallel(64, 32):
                    B_s[j, k] = B[bx * 64 + j, ko * 32 + k]
                T.gemm(A_s, B_s, C_l, transpose_B=True)
            T.copy(C_l, C[by * 64, bx * 64])

    return main


def _copies(func):
    return [base.parse(s) for s in collect(func.body, tirx.Evaluate) if base.is_tile_op(s.value, "copy")]


def test_copy_loops_in_a_pipelined_loop_become_copies_with_the_same_regions():
    copies = _copies(raise_copy_loops(_gemm()))
    assert len(copies) == 3  # A's and B's loads, and the user's store of C
    a = next(c for c in copies if c.call.args[1].source.name == "A_s")
    region = a.call.args[0]
    assert region.source.name == "A" and [str(r.min) for r in region.region] == ["by * 64", "ko * 32"]
    assert [int(r.extent) for r in region.region] == [64, 32]


@pytest.mark.parametrize("kind", ["transposed", "strided", "scaled"])
def test_loops_that_are_not_plain_copies_stay_loops(kind):
    copies = _copies(raise_copy_loops(_gemm(kind)))
    assert sorted(c.call.args[1].source.name for c in copies) == ["B_s", "C"]  # B's loop only (and C's copy)


def test_loops_outside_pipelined_loops_are_left_alone():
    func = _gemm(stages=0)
    assert raise_copy_loops(func).same_as(func)


@pytest.mark.parametrize("target", ["sm_80", "sm_90a"])
def test_a_gemm_loading_with_loops_is_pipelined(target):
    src = tilelang.compile(_gemm(), out_idx=[-1], target=target).get_kernel_source()
    assert "cp_async" in src or "tma_load" in src

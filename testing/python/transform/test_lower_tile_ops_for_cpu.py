"""lower_tile_ops_for_cpu: gemm, reductions and atomics become loops and calls over whole tiles
(CPU: the IR)."""

from tvm import tirx

import tilelang.language as T
from tilelang.op import base
from tilelang.transform.expand_elementwise_ops import expand_elementwise_ops
from tilelang.transform.lower_tile_ops_for_cpu import lower_tile_ops_for_cpu
from tilelang.utils.ir import collect


def _kernel():
    @T.prim_func
    def main(A: T.Tensor((64, 32), "float16"), B: T.Tensor((64, 32), "float16"), S: T.Tensor((64,), "float16")):
        with T.Kernel(1, threads=128):
            A_s = T.alloc_shared((64, 32), "float16")
            B_s = T.alloc_shared((64, 32), "float16")
            C = T.alloc_fragment((64, 64), "float32")
            R = T.alloc_fragment((64,), "float16")
            T.copy(A, A_s)
            T.copy(B, B_s)
            T.gemm(A_s, B_s, C, transpose_B=True, clear_accum=True)
            T.reduce_max(C, R, dim=1)
            T.atomic_add(S[0:64], R)

    return main


def _ops(func):
    return [s for s in collect(func.body, tirx.Evaluate) if base.parse(s) is not None]


def test_no_tile_op_is_left_and_gemm_reads_a_transposed_copy_of_b():
    func = lower_tile_ops_for_cpu(expand_elementwise_ops(_kernel()))
    assert _ops(func) == []
    allocs = {s.buffer.name: str(s.buffer.dtype) for s in collect(func.body, tirx.AllocBuffer)}
    assert allocs["B_s_t"] == "float32"  # B's tile transposed once, in the accumulator's type


def test_atomics_call_the_cpu_functions_with_float32_values_for_half_types():
    func = lower_tile_ops_for_cpu(expand_elementwise_ops(_kernel()))
    externs = [c for c in collect(func.body, tirx.Call) if getattr(c.op, "name", "") == "tirx.call_extern"]
    assert [str(c.args[0].value) for c in externs] == ["tl_cpu_atomic_add_float16"]
    assert str(externs[0].args[2].ty.dtype) == "float32"

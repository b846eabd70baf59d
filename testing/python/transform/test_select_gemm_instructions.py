"""select_gemm_instructions: each T.gemm's instruction and plan, decided from the target, the threads
of its scope and tl.disable_wgmma, recorded on the call; the errors it reports at the user's gemm."""

import pytest
import tvm_ffi
from ir_testing import assert_ir_equal
from tvm import tirx

import tilelang.language as T
from tilelang.errors import UserError
from tilelang.op import gemm as gemm_op
from tilelang.op.gemm import mma, selection, wgmma
from tilelang.options import CompileOptions
from tilelang.transform.select_gemm_instructions import select_gemm_instructions
from tilelang.utils.target import determine_target


def _gemm_kernel(threads=256, dtype="float16", M=128, branch=False):
    @T.prim_func
    def main(A: T.Tensor((M, 64), dtype), B: T.Tensor((64, 128), dtype), C: T.Tensor((M, 128), "float32")):
        with T.Kernel(1, threads=threads):
            A_s = T.alloc_shared((M, 64), dtype)
            B_s = T.alloc_shared((64, 128), dtype)
            C_f = T.alloc_fragment((M, 128), "float32")
            tx = T.get_thread_binding()
            if branch:
                if tx < 128:
                    T.gemm(A_s, B_s, C_f)
            else:
                T.gemm(A_s, B_s, C_f)

    return main


def _on(func, arch):
    return func.with_attr("target", determine_target(arch))


def _with_plan(func, plan):
    """`func` with `plan` recorded on its gemm: what the pass should produce."""

    def on_eval(stmt):
        return tirx.Evaluate(selection.record(stmt.value, plan)) if gemm_op.is_gemm(stmt) else stmt

    return func.with_body(tvm_ffi.structural_map(func.body, [(tirx.Evaluate, on_eval)]))


def _plans(func):
    found = []
    tvm_ffi.structural_walk(
        func.body, [(tirx.Evaluate, lambda s: found.append(gemm_op.Gemm(s.value).plan) if gemm_op.is_gemm(s) else None)]
    )
    return found


def test_wgmma_on_hopper():
    # Two warpgroups over 128 rows: one 64-row instruction each; 128-byte panels for both operands.
    before = _on(_gemm_kernel(), "sm_90a")
    assert_ir_equal(select_gemm_instructions(before), _with_plan(before, wgmma.Plan(2, 1, 3, 3)))


def test_mma_sync_before_hopper_and_when_wgmma_is_switched_off():
    for arch, options in [("sm_80", CompileOptions()), ("sm_90a", CompileOptions(disable_wgmma=True))]:
        before = _on(_gemm_kernel(), arch)
        # 8 warps as 4 x 2 over 128 x 128 (32 x 64 warp tiles: as square as fits, ties to more along M),
        # k16 fp16 instructions.
        assert_ir_equal(select_gemm_instructions(before, options), _with_plan(before, mma.Plan(4, 2, 16)))


def test_the_threads_of_a_thread_branch_decide():
    # Under `if tx < 128` one warpgroup runs the gemm: one warpgroup along M.
    (plan,) = _plans(select_gemm_instructions(_on(_gemm_kernel(branch=True), "sm_90a")))
    assert plan == wgmma.Plan(1, 1, 3, 3)


def test_selecting_again_replaces_the_record():
    once = select_gemm_instructions(_on(_gemm_kernel(), "sm_90a"))
    assert_ir_equal(select_gemm_instructions(once), once)


def test_dtypes_the_target_cannot_multiply_are_an_error_at_the_gemm():
    with pytest.raises(UserError, match=r"(?s)no tensor-core instruction on sm_80 .*float8_e4m3fn.*T.gemm\(A_s"):
        select_gemm_instructions(_on(_gemm_kernel(dtype="float8_e4m3fn"), "sm_80"))

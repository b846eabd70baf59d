"""Pass `select_gemm_instructions`: each `T.gemm` gets its instruction (mma.sync or wgmma) and its
plan, decided once from the target, the threads of the gemm's scope and `tl.disable_wgmma`, and
recorded on the call (`op/gemm/selection.py`).

Before:  T.gemm(A_s, B_s, C_f)                                   (256 threads, sm_90a)
After:   T.gemm(A_s, B_s, C_f, ..., async_operands=0, 2, 2, 1, 3, 3)   # wgmma: 2 x 1 warpgroups,
                                                                       # 128-byte panels for A and B
Every later reader takes the plan from the call: the pipeline planner (which gemms run
asynchronously, the layouts TMA writes), layout inference (registers and operand swizzles),
lowering (the template called) and the descriptor alignment check.

Requires: the user's kernel as traced (thread counts as the user wrote them: warp specialization
adds its producer threads only after lowering). Guarantees: every tl.gemm carries a plan; a UserError
at the gemm for dtypes the target cannot multiply, a K the instruction does not divide, or warps
that cannot tile C.
"""

from __future__ import annotations

from tvm import tirx

from tilelang.op import gemm as gemm_op
from tilelang.op.gemm import selection
from tilelang.options import DEFAULT_OPTIONS, CompileOptions
from tilelang.transform.common import Scope, mutate_with_scope


def select_gemm_instructions(func: tirx.PrimFunc, options: CompileOptions = DEFAULT_OPTIONS) -> tirx.PrimFunc:
    target = func.attrs.get("target") if func.attrs is not None else None
    scope = Scope()

    def on_eval(stmt, recurse):
        if not gemm_op.is_gemm(stmt):
            return stmt
        g = gemm_op.Gemm(stmt.value)
        plan = selection.select(g, target, scope.thread_var()[1], options, stmt.span)
        return tirx.Evaluate(selection.record(stmt.value, plan), span=stmt.span)

    return func.with_body(mutate_with_scope(func.body, scope, {tirx.Evaluate: on_eval}))

"""Which instruction a `T.gemm` runs on, decided once per gemm and recorded on its call.

`transform/select_gemm_instructions.py` calls `select` for every gemm, from the target, the
threads of the gemm's scope and `CompileOptions.disable_wgmma`, and `record`s the result as
integer arguments of the `tl.gemm` call, after its own (a, b, c, trans_a, trans_b, policy, clear,
wg_wait, async_operands, wgmma_only; the last 1 for `T.wgmma_gemm`, which must not fall back):

    mma.sync:  1, warp_m, warp_n, k              (the warps tiling C, the instruction's K)
    wgmma:     2, wg_m, wg_n, swz_a, swz_b       (the warpgroups tiling C, the operands' panel swizzles)

Every later reader (the pipeline planner, wgmma waits, layout inference, lowering, the descriptor
alignment check) takes the plan from the parsed call (`Gemm.plan`), never deciding again.
"""

from __future__ import annotations

from tvm import ir, tirx

from tilelang.errors import UserError, at_span
from tilelang.op.gemm import instructions, mma, wgmma

MMA, WGMMA = 1, 2
_OWN_ARGS = 10  # a, b, c, trans_a, trans_b, policy, clear, wg_wait, async_operands, wgmma_only


def select(g, target, num_threads: int, options=None, span=None, kernel_span=None):
    """The plan of gemm `g` (an mma.Plan or a wgmma.Plan) for `num_threads` threads on `target`.

    Raises: UserError (at `span`) for dtypes no tensor-core instruction of the target multiplies,
    a K the instruction does not divide, or warps that cannot tile C; for a number of threads
    that is not whole warps, at `kernel_span` (the T.Kernel line setting them) too.
    """
    if num_threads % 32:
        raise at_span(
            f"T.gemm needs whole warps; the kernel has {num_threads} threads, not a multiple of 32 "
            f"(use threads={-(-num_threads // 32) * 32})",
            kernel_span,
            span,
        )
    a, b = g.a.buffer, g.b.buffer
    if str(a.dtype) != str(b.dtype):  # (every tensor-core instruction takes two operands of one dtype)
        raise at_span(
            f"T.gemm: the operands have different dtypes: {a.name} is {a.dtype} and {b.name} is {b.dtype}; "
            f"tensor cores multiply two operands of one dtype: convert one of them first (T.copy into a "
            f"tile of the other's dtype)",
            span,
        )
    try:
        inst = instructions.select(target, str(a.dtype), str(b.dtype), str(g.c.buffer.dtype))
    except UserError as err:  # the registry speaks of dtypes: point at the gemm
        raise at_span(str(err), span) from None
    if g.K % inst.k:
        raise at_span(
            f"T.gemm: K = {g.K} is not a multiple of {inst.k}, the K of {inst.name}; use a block_K "
            f"that is a multiple of {inst.k}",
            span,
        )
    p = wgmma.plan(g, target, num_threads, options)
    return p if p is not None else mma.plan(g, inst, num_threads, span)


def record(call: ir.Call, plan) -> ir.Call:
    """`call` (a tl.gemm) with `plan` recorded in place of any earlier record."""
    args = list(call.args[:_OWN_ARGS])
    while len(args) < _OWN_ARGS:  # no async_operands yet (the pipeline planner sets it); T.gemm's wgmma_only 0
        args.append(tirx.const(0, "int32"))
    if isinstance(plan, wgmma.Plan):
        values = [WGMMA, plan.wg_m, plan.wg_n, plan.swz_a, plan.swz_b]
    else:
        values = [MMA, plan.warp_m, plan.warp_n, plan.k, plan.panels_a, plan.panels_b]
    return ir.Call(call.op, args + [tirx.const(v, "int32") for v in values], ret_ty=call.ty)


def recorded(call: ir.Call):
    """The plan recorded on `call` (a tl.gemm), or None before `select_gemm_instructions`."""
    values = [int(a.value) for a in call.args[_OWN_ARGS:]]
    if not values:
        return None
    if values[0] == WGMMA:
        return wgmma.Plan(*values[1:5])
    return mma.Plan(*values[1:6])


def with_own_args(call: ir.Call, own: list) -> ir.Call:
    """`call` with its own arguments (up to async_operands) replaced by `own`, the record kept."""
    assert len(own) == _OWN_ARGS or len(call.args) <= _OWN_ARGS, "a gemm's record follows all its own arguments"
    return ir.Call(call.op, list(own) + list(call.args[_OWN_ARGS:]), ret_ty=call.ty)

"""Pass `fold_accumulator_clear`: zeroing a gemm's accumulator right before it becomes the gemm's
own clear flag (wgmma starts from zero at no cost; zeroing takes a register move per element).

Before:  T.clear(s)                         if P: T.clear(s)
         mbarrier_wait(...)                 else: <mask s>
         T.gemm(q, k, s)                    T.gemm(q, k, s)
After:   mbarrier_wait(...)                 if not P: <mask s>
         T.gemm(q, k, s, clear_accum=1)     T.gemm(q, k, s, clear_accum=P)

Statements between the two may not touch the accumulator; the zeroing must cover the whole tile
the gemm accumulates into (`T.fill(s, 0)`, or a uniform branch of one, as written by
`specialize_uniform_masks`). A run-time clear flag is evaluated when the gemm starts.

The zeroing it folds is a `T.fill` (named); the op folded into is any op on the tensor cores whose
accumulator it is (`TileOp.mma`, `TileOp.with_clear`: a `T.gemm`).

Requires: tile ops as parsed or pipelined (runs before `expand_elementwise_ops`). Guarantees: the
same values; a gemm's clear argument is a constant or a run-time condition.
"""

from __future__ import annotations

from tvm import ir, tirx

from tilelang.op import base, fill
from tilelang.transform.common import Scope, mutate_with_scope
from tilelang.utils.ir import collect, const_int


def _zero_fill(stmt):
    """The fragment `stmt` sets to zero as a whole (`T.fill(buf, 0)`), or None."""
    if not (isinstance(stmt, tirx.Evaluate) and base.is_tile_op(stmt.value, fill.NAME)):
        return None
    region, value = base.Region.from_ir(stmt.value.args[0]), stmt.value.args[1]
    if not isinstance(value, (tirx.FloatImm, tirx.IntImm)) or value.value != 0:
        return None
    return region.buffer if _whole(region) else None


def _whole(region) -> bool:
    return all(const_int(s) == 0 for s in region.starts) and all(
        const_int(e) is not None and const_int(e) == const_int(n) for e, n in zip(region.extents, region.buffer.shape)
    )


def _init(stmt):
    """(fragment, condition under which it is zeroed, what runs otherwise) for `T.fill(s, 0)`
    (condition True, nothing else) or `if P: T.fill(s, 0) else: E`; None for anything else."""
    buf = _zero_fill(stmt)
    if buf is not None:
        return buf, tirx.const(True, "bool"), None
    if isinstance(stmt, tirx.IfThenElse) and not collect(stmt.condition, ir.TensorLoad):
        # (A condition reading memory could change before the gemm evaluates it.)
        buf = _zero_fill(stmt.then_case)
        if buf is not None:
            return buf, stmt.condition, stmt.else_case
    return None


def _touches(stmt, buf) -> bool:
    return any(v.same_as(buf) for v in collect(stmt, ir.Var))


def _fold(stmts):
    out = list(stmts)
    for k, stmt in enumerate(out):
        init = _init(stmt)
        if init is None:
            continue
        buf, cond, otherwise = init
        for j in range(k + 1, len(out)):
            if not _touches(out[j], buf):
                continue
            op = base.parse(out[j]) if isinstance(out[j], tirx.Evaluate) else None
            mma = op.mma() if op is not None else None
            if mma is None or not mma.accumulator.buffer.same_as(buf):
                break
            if mma.clear is not False or not _whole(mma.accumulator):
                break
            out[j] = tirx.Evaluate(op.with_clear(True if const_int(cond) == 1 else cond), span=out[j].span)
            out[k] = (
                tirx.Evaluate(tirx.const(0, "int32"))
                if otherwise is None
                else tirx.IfThenElse(tirx.Not(cond), otherwise, None, span=stmt.span)
            )
            break
    return out


def fold_accumulator_clear(func: tirx.PrimFunc) -> tirx.PrimFunc:
    def on_seq(seq, recurse):
        seq = recurse(seq)
        stmts = _fold(seq.seq) if isinstance(seq, tirx.SeqStmt) else None
        if stmts is None:
            return seq
        kept = [s for s in stmts if not (isinstance(s, tirx.Evaluate) and const_int(s.value) == 0)]
        return tirx.SeqStmt(kept) if len(kept) > 1 else kept[0]

    return func.with_body(mutate_with_scope(func.body, Scope(), {tirx.SeqStmt: on_seq}))

"""Pass `fold_tile_extents`: a tile op's region whose extents are differences of bound values
gets the constant extents they simplify to, and the user's `T.tma_copy` is checked again with them.

    H0 = g * 64                                   H0 = g * 64
    H1 = H0 + 64                            ->    H1 = H0 + 64
    T.tma_copy(Q[b, s, H0:H1, 0:256], Q_s, ...)    T.tma_copy(Q[b, s, H0:H0 + 64, 0:256], Q_s, ...)

While a kernel is traced, `H0 = expr` is still a one-element local buffer (the parser's form of an
assignment), so the slice `H0:H1` has the extent `H1[0] - H0[0]`, which nothing can simplify.
Right after parsing, scalars stored once become bindings (`language/prim_func.py`), and with the
bindings known the extent is the constant 64. The public TileLang simplifies such extents with the
bindings the same way, so kernels slice tiles between bound values. Here every tile op's regions
are simplified once, first in the pipeline, so every later reader (the TMA box plan of
`T.tma_copy`, `lower_tma_copies` and the pipelines deciding whether a `T.copy` can be a TMA load,
the tile shapes of the ops) sees constants where there are constants. Starts are left as written.

`T.tma_copy` checks its tile when it is traced, except for extents that are not constants yet;
those are checked here, once folded: a tile whose extents stay dynamic is a UserError at the
user's line (the TMA unit copies boxes of a size fixed in the tensor map).

Requires: the PrimFunc as parsed (bindings in place of single-store scalars). Guarantees: the same
regions, each extent that simplifies to a constant given the enclosing loops, threads and
bindings replaced by that constant; every user `T.tma_copy` is a tile the TMA unit can copy.
"""

from __future__ import annotations

from tvm import ir, tirx

from tilelang.errors import at_span
from tilelang.op import base, tma
from tilelang.transform.common import Scope, mutate_with_scope
from tilelang.utils.ir import const_int


def fold_tile_extents(func: tirx.PrimFunc) -> tirx.PrimFunc:
    scope = Scope()

    def fold(region, analyzer):
        ranges, changed = [], False
        for r in region.region:
            folded = const_int(analyzer.simplify(r.extent)) if const_int(r.extent) is None else None
            if folded is None:
                ranges.append(r)
            else:
                ranges.append(ir.Range.from_min_extent(r.min, tirx.const(folded, str(r.extent.ty.dtype))))
                changed = True
        return tirx.BufferRegion(region.source, ranges) if changed else region

    def on_eval(stmt, recurse):
        call = stmt.value
        if not base.is_tile_op(call):
            return stmt
        args = [fold(a, scope.analyzer) if isinstance(a, ir.TensorRegion) else a for a in call.args]
        if any(not a.same_as(b) for a, b in zip(args, call.args)):
            call = ir.Call(call.op, args, ret_ty=call.ty)
            stmt = tirx.Evaluate(call, span=stmt.span)
        if base.is_tile_op(call, tma.NAME):
            _check_user_copy(tma.TmaCopy(call, stmt.span))
        return stmt

    return func.with_body(mutate_with_scope(func.body, scope, {tirx.Evaluate: on_eval}))


def _check_user_copy(op: tma.TmaCopy) -> None:
    """The check `T.tma_copy` leaves for later when its extents are not constants when traced."""
    if not op.user:
        return
    tile = tma.tile_of(op.src, op.dst, window=True)
    if not isinstance(tile, str):
        return
    hint = ""
    if tile == tma.DYNAMIC_EXTENTS:
        hint = (
            " (they must simplify to constants given the kernel's bound values, as `H0:H0 + 64` or `H0:H1` "
            "with `H1 = H0 + 64` do: a tensor map copies boxes of a fixed size)"
        )
    raise at_span(f"T.tma_copy of {op.src.describe()} into {op.dst.describe()}: {tile}{hint}", op.span)

"""Pass `legalize_safe_memory_access`: accesses to global tensors past their edge are predicated.

A tile that runs past the tensor's edge (sizes not divisible by the tile) must never read or write
out of bounds. Stores to a global tensor are guarded by their index bounds; loads of a global
tensor whose bounds the store's guard does not already imply read 0 instead.

Before:  C[by * 128 + i, j] = A[by * 128 + i, j]            (C, A: 1000 x 64)
After:   if by * 128 + i < 1000: C[by * 128 + i, j] = A[by * 128 + i, j]

Requires: tile ops expanded to loops. Guarantees: every global access is provably in bounds or
predicated. Bounds that the analyzer proves from loop, thread and block ranges add nothing.
"""

from __future__ import annotations

import tvm_ffi
from tvm import ir, tirx

from tilelang.op import atomic
from tilelang.transform.common import Scope, mutate_with_scope
from tilelang.utils.ir import dtype_of


def _in_bounds(buffer, indices, analyzer):
    """The conjunction of bound checks of `indices` on `buffer` not provable by `analyzer`."""
    conds = []
    for idx, extent in zip(indices, buffer.shape):
        if not analyzer.can_prove(idx < extent):
            conds.append(idx < extent)
        if not analyzer.can_prove(idx >= 0):
            conds.append(idx >= 0)
    if not conds:
        return None
    cond = conds[0]
    for c in conds[1:]:
        cond = tirx.And(cond, c)
    return cond


def _is_global(buffer) -> bool:
    return buffer.scope() == "global"


def legalize_safe_memory_access(func: tirx.PrimFunc) -> tirx.PrimFunc:
    scope = Scope()
    ana = scope.analyzer

    def on_store(store, recurse):
        guard = _in_bounds(store.buffer, store.indices, ana) if _is_global(store.buffer) else None

        def guard_load(load):
            if not _is_global(load.source):
                return load
            if guard is not None:
                with ana.constraint_scope(guard):
                    cond = _in_bounds(load.source, load.indices, ana)
            else:
                cond = _in_bounds(load.source, load.indices, ana)
            if cond is None:
                return load
            return tirx.if_then_else(cond, load, tirx.const(0, dtype_of(load)))

        value = tvm_ffi.structural_map(store.value, [(ir.TensorLoad, guard_load)])
        new = tirx.BufferStore(store.buffer, value, store.indices, span=store.span)
        if guard is not None:
            return tirx.IfThenElse(guard, new, None, span=store.span)
        return new

    def on_eval(stmt, recurse):
        # An element atomic (`T.atomic_add`) writes through the address of its first argument.
        call = stmt.value
        if not (
            isinstance(call, ir.Call)
            and getattr(call.op, "name", "") == "tirx.call_extern"
            and str(call.args[0].value) == atomic.ELEMENT
        ):
            return stmt
        target = call.args[1].args[0]
        guard = _in_bounds(target.source, target.indices, ana) if _is_global(target.source) else None
        return tirx.IfThenElse(guard, stmt, None, span=stmt.span) if guard is not None else stmt

    return func.with_body(mutate_with_scope(func.body, scope, {tirx.BufferStore: on_store, tirx.Evaluate: on_eval}))

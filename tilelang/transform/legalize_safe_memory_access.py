"""Pass `legalize_safe_memory_access`: accesses to global tensors past their edge are predicated.

A tile that runs past the tensor's edge (sizes not divisible by the tile, or a dynamic size
`T.dynamic("m")` known only at call time) must never read or write out of bounds. Stores to a
global tensor are guarded by their index bounds; loads of a global tensor whose bounds the
enclosing guards do not already imply read 0 instead.

Before:  C[by * 128 + i, j] = A[by * 128 + i, j]            (C, A: m x 64, m dynamic)
After:   if by * 128 + i < m: C[by * 128 + i, j] = A[by * 128 + i, j]

Loads are guarded wherever they are: in stored values and indices, in `x = A[i]` bindings, in
`if` conditions and in call arguments (atomics). What the kernel already checks (an `if i < m:` the
user wrote, the condition of a `T.if_then_else`) counts as known, so it adds no second guard.

Atomics are device calls by now, not tile ops: `op/atomic.py` names the element each one works on
through its address (`addressed_element`), and the call runs only when that element (all its lanes,
for T.atomic_addx2/x4) is in bounds: as a statement under an `if`, as a value (an old value
returned, an atomic load) read as 0 otherwise. A gather-scatter's index past the end (a sparse
attention backward whose unused index slots hold the sequence length) then writes nothing.

Requires: tile ops expanded to loops. Guarantees: every global access is provably in bounds or
predicated. Bounds that the analyzer proves from loop, thread and block ranges add nothing.
"""

from __future__ import annotations

import tvm_ffi
from tvm import ir, tirx

from tilelang.op import atomic
from tilelang.transform.common import Scope, assume_sizes_nonnegative, mutate_with_scope
from tilelang.utils.ir import dtype_of, is_if_then_else


def _in_bounds(buffer, indices, scope, lanes: int = 1):
    """The conjunction of bound checks of `indices` on `buffer` that `scope` cannot prove; with
    `lanes`, the elements from `indices` to `lanes - 1` further along the last dimension."""
    conds = []
    for d, (idx, extent) in enumerate(zip(indices, buffer.shape)):
        end = idx + (lanes - 1) if lanes > 1 and d == len(indices) - 1 else idx
        if not scope.provably(None, end, extent):
            conds.append(end < extent)
        if not scope.provably(0, idx, None):
            conds.append(idx >= 0)
    if not conds:
        return None
    cond = conds[0]
    for c in conds[1:]:
        cond = tirx.And(cond, c)
    return cond


def _is_global(buffer) -> bool:
    return buffer.scope() == "global"


def _is_address_of(call) -> bool:
    return isinstance(call, ir.Call) and getattr(call.op, "name", "") == "tirx.address_of"


def legalize_safe_memory_access(func: tirx.PrimFunc) -> tirx.PrimFunc:
    scope = Scope()
    ana = scope.analyzer
    assume_sizes_nonnegative(ana, func)

    def under(cond, fn):
        """fn() with `cond` known to hold (no constraint when cond is None)."""
        if cond is None:
            return fn()
        with ana.constraint_scope(cond):
            return fn()

    def guard_atomic(call):
        """(the bounds of the element an atomic call addresses that `scope` cannot prove, or None;
        the call with the loads in its indices and other arguments guarded)."""
        target, lanes = atomic.addressed_element(call)
        indices = [guard_loads(i) for i in target.indices]
        cond = _in_bounds(target.source, indices, scope, lanes) if _is_global(target.source) else None
        address = tirx.address_of(tirx.BufferLoad(target.source, indices))

        def arg(a):
            if _is_address_of(a) and a.args[0].same_as(target):
                return address
            return under(cond, lambda: guard_loads(a))

        return cond, ir.Call(call.op, [arg(a) for a in call.args], ret_ty=call.ty, span=call.span)

    def guard_loads(expr):
        """`expr` with each global load not provably in bounds reading 0 instead."""

        def on_load(load, mutator):
            load = mutator.default_mutate(load)  # loads inside its indices first
            if not _is_global(load.source):
                return load
            cond = _in_bounds(load.source, load.indices, scope)
            return load if cond is None else tirx.if_then_else(cond, load, tirx.const(0, dtype_of(load)))

        def on_call(call, mutator):
            if atomic.addressed_element(call) is not None:  # an old value returned, an atomic load
                cond, new = guard_atomic(call)
                return new if cond is None else tirx.if_then_else(cond, new, tirx.const(0, dtype_of(new)))
            if _is_address_of(call):
                return call  # an address, not a read (the statement's guard covers it)
            if is_if_then_else(call):
                cond = guard_loads(call.args[0])
                then = under(cond, lambda: guard_loads(call.args[1]))
                other = under(tirx.Not(cond), lambda: guard_loads(call.args[2]))
                return tirx.if_then_else(cond, then, other)
            return mutator.default_mutate(call)

        return tvm_ffi.structural_mutate(expr, [(ir.TensorLoad, on_load), (ir.Call, on_call)])

    def on_store(store, recurse):
        indices = [guard_loads(i) for i in store.indices]
        guard = _in_bounds(store.buffer, indices, scope) if _is_global(store.buffer) else None
        value = under(guard, lambda: guard_loads(store.value))
        new = tirx.BufferStore(store.buffer, value, indices, span=store.span)
        return tirx.IfThenElse(guard, new, None, span=store.span) if guard is not None else new

    def on_eval(stmt, recurse):
        call = stmt.value
        if not isinstance(call, ir.Call):
            return stmt
        if atomic.addressed_element(call) is None:
            value = guard_loads(call)
            return stmt if value.same_as(call) else tirx.Evaluate(value, span=stmt.span)
        guard, value = guard_atomic(call)
        new = tirx.Evaluate(value, span=stmt.span)
        return tirx.IfThenElse(guard, new, None, span=stmt.span) if guard is not None else new

    def on_bind(stmt, recurse):
        value = guard_loads(stmt.value)
        return stmt if value.same_as(stmt.value) else tirx.Bind(stmt.var, value, span=stmt.span)

    def on_if(stmt, recurse):
        cond = guard_loads(stmt.condition)
        then = under(cond, lambda: mutate_with_scope(stmt.then_case, scope, callbacks))
        other = None
        if stmt.else_case is not None:
            other = under(tirx.Not(cond), lambda: mutate_with_scope(stmt.else_case, scope, callbacks))
        return tirx.IfThenElse(cond, then, other, span=stmt.span)

    callbacks = {
        tirx.BufferStore: on_store,
        tirx.Evaluate: on_eval,
        tirx.Bind: on_bind,
        tirx.IfThenElse: on_if,
    }
    return func.with_body(mutate_with_scope(func.body, scope, callbacks))

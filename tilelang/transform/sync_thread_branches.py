"""Passes `expose_thread_branches` and `restore_thread_branches`: barriers for a branch that only the
first n threads run (`if tx < n:` around tile ops, marked by `lower_tile_ops`).

TVM's barrier insertion refuses thread-dependent branches: a `__syncthreads()` inside one would
wait for threads that never come. So around it:

1. `expose_thread_branches` (before barrier insertion) takes the condition away, leaving the
   branch body under a `tl.thread_branch` mark, with a block barrier before and after it when it
   touches shared memory. The barrier before orders the branch after every earlier access by the
   other threads (a gemm of the other warpgroup still reading last iteration's scores); the one
   after makes what it wrote visible to everyone.
2. TVM inserts barriers as if every thread ran the body. Those inside the body order accesses
   within the branch only: the barriers around it settle everything else.
3. `restore_thread_branches` (after barrier insertion) puts the condition back and turns the
   barriers inside into named barriers over the branch's n threads (`bar.sync 4, n`; 4 + depth
   for a branch inside another: ids 1-3 are the consumers' and the ping-pong turns').

Before:  if tx < 128:               1: sync            3: sync
             S[...] = ...              mark(n=128):       if tx < 128:
                                           S[...] = ...       S[...] = ...
                                       sync               sync

Requires: `lower_tile_ops` (the marks), shared memory merged. Guarantees: no `tl.thread_branch`
attribute remains after `restore_thread_branches`.
"""

from __future__ import annotations

import tvm_ffi
from tvm import ir, tirx

from tilelang.layout.fragment import substitute
from tilelang.utils.ir import extern, seq

THREAD_BRANCH = "tl.thread_branch"
_SHARED = ("shared", "shared.dyn")
_FIRST_BARRIER_ID = 4


def mark(condition, body):
    """The then-branch `body` of `if tx < n` (`condition`), marked for the passes here."""
    return tirx.AttrStmt(condition.a, THREAD_BRANCH, condition.b, body)


def _is_mark(stmt) -> bool:
    return isinstance(stmt, tirx.AttrStmt) and stmt.attr_key == THREAD_BRANCH


def _shared_scopes(stmt) -> set:
    """The shared-memory scopes `stmt` accesses."""
    found = set()

    def on_load(node):
        if str(node.source.scope()) in _SHARED:
            found.add(str(node.source.scope()))

    def on_store(node):
        if str(node.buffer.scope()) in _SHARED:
            found.add(str(node.buffer.scope()))

    def on_call(call):
        if isinstance(call.op, ir.Op) and call.op.name == "tirx.tvm_access_ptr":
            data = call.args[1]
            if isinstance(data.ty, ir.PointerType) and str(data.ty.storage_scope) in _SHARED:
                found.add(str(data.ty.storage_scope))

    tvm_ffi.structural_walk(stmt, [(ir.TensorLoad, on_load), (tirx.BufferStore, on_store), (ir.Call, on_call)])
    return found


def _block_sync(scope):
    return tirx.Evaluate(tirx.call_intrin("int32", "tirx.tvm_storage_sync", ir.StringImm(scope)))


def _is_block_sync(stmt) -> bool:
    call = stmt.value if isinstance(stmt, tirx.Evaluate) else None
    return isinstance(call, ir.Call) and isinstance(call.op, ir.Op) and call.op.name == "tirx.tvm_storage_sync"


def expose_thread_branches(func: tirx.PrimFunc) -> tirx.PrimFunc:
    def on_if(node):
        if not _is_mark(node.then_case) or node.else_case is not None:
            return node
        scopes = _shared_scopes(node.then_case.body)
        if not scopes:  # nothing to order: the branch goes back as it was
            return tirx.IfThenElse(node.condition, node.then_case.body, None, span=node.span)
        # TVM's barrier insertion runs once per scope and counts only barriers of its own scope;
        # one barrier of the merged dynamic block orders the static tiles too.
        sync = _block_sync("shared.dyn" if "shared.dyn" in scopes else "shared")
        # Inside, tx is tx % n (equal there): TVM's conflict analysis then sees the branch's
        # threads only, not tiles the other threads' indices would reach.
        mark_ = node.then_case
        tx, n = mark_.node, mark_.value
        body = substitute(mark_.body, {tx: tirx.floormod(tx, n)})
        return seq([sync, tirx.AttrStmt(tx, THREAD_BRANCH, n, body), sync])

    return func.with_body(tvm_ffi.structural_map(func.body, [(tirx.IfThenElse, on_if)], order="post"))


def restore_thread_branches(func: tirx.PrimFunc) -> tirx.PrimFunc:
    def restore(stmt, depth):
        def on_attr(node, recurse):
            if not _is_mark(node):
                return recurse(node)
            tx, n = node.node, node.value
            body = tvm_ffi.structural_map(
                restore(node.body, depth + 1),
                [(tirx.FloorMod, lambda e: tx if e.a.same_as(tx) and tvm_ffi.structural_equal(e.b, n) else e)],
            )
            barrier = extern(f"tl::named_barrier_sync<{_FIRST_BARRIER_ID + depth}, {int(n)}>")
            body = tvm_ffi.structural_map(body, [(tirx.Evaluate, lambda s: barrier if _is_block_sync(s) else s)])
            return tirx.IfThenElse(tirx.LT(node.node, node.value), body, None)

        return tvm_ffi.structural_mutate(stmt, [(tirx.AttrStmt, lambda n, m: on_attr(n, m.default_mutate))])

    return func.with_body(restore(func.body, 0))

"""Pass `hoist_loop_barriers`: a block barrier that TVM's barrier insertion put first in a serial
(or unrolled) loop's body moves before the loop when the loop carries nothing between threads through shared
memory.

TVM puts the barrier that orders a loop after earlier writes (a copy filling `A_s`, then a
`T.Parallel` loop reading it) inside the loop, before the first read: a T.Parallel transposing one
tile into another ran 32 barriers where one does. The barrier at the top of the body orders each
iteration after the previous one too; that is needed only when some shared tile is written in one
iteration and read in another (or read, then written), i.e. when a tile is both read and written
in the loop. When no tile is, one barrier before the loop orders everything the loop reads after
everything written before it, which is all the barrier did. (TVM's insertion orders reads after
writes and writes after reads, never writes after writes: so does this.)

A tile reached through a pointer (`address_of`, `tvm_access_ptr`: cp.async, ldmatrix, TMA, atomics)
counts as read and written; a loop with any other barrier, or any call with side effects, is left
alone.

Before:  for r in range(32):                     After:  T.tvm_storage_sync("shared.dyn")
             T.tvm_storage_sync("shared.dyn")            for r in range(32):
             B_s[f(r, tx)] = A_s[g(r, tx)]                   B_s[f(r, tx)] = A_s[g(r, tx)]

Requires: barriers inserted (`thread_sync`), tiles still separate buffers (before
`merge_shared_tiles`). Guarantees: the same orderings between accesses of different iterations and
of code before the loop.
"""

from __future__ import annotations

import tvm_ffi
from tvm import ir, tirx

from tilelang.utils.ir import collect, is_block_barrier, is_pure_call, loop_with_body, seq, statements

_SHARED = ("shared", "shared.dyn")
_POINTERS = ("tirx.address_of", "tirx.tvm_access_ptr")


def _shared(buf) -> bool:
    return tirx.is_buffer_var(buf) and buf.scope() in _SHARED


def _carries_nothing(body) -> bool:
    """Whether no shared tile is both read and written in `body`, which has no barrier or impure call."""
    if any(is_block_barrier(s) for s in collect(body, tirx.Evaluate)):
        return False
    reads, writes = set(), set()
    for call in collect(body, ir.Call):
        name = call.op.name if isinstance(call.op, ir.Op) else ""
        if not is_pure_call(call) and name not in _POINTERS:
            return False
        if name in _POINTERS:
            tiles = {v for v in collect(call, ir.Var) if _shared(v)}
            reads |= tiles
            writes |= tiles
    reads |= {ld.source for ld in collect(body, ir.TensorLoad) if _shared(ld.source)}
    writes |= {st.buffer for st in collect(body, tirx.BufferStore) if _shared(st.buffer)}
    return not (reads & writes)


def _flat(stmt) -> list:
    """The statements of `stmt`, nested sequences opened (an inner loop's hoisted barrier comes as one)."""
    return [s for part in statements(stmt) for s in (_flat(part) if isinstance(part, tirx.SeqStmt) else [part])]


def hoist_loop_barriers(func: tirx.PrimFunc) -> tirx.PrimFunc:
    def on_for(loop):
        if loop.kind not in (tirx.ForKind.SERIAL, tirx.ForKind.UNROLLED):
            return loop
        stmts = _flat(loop.body)
        if len(stmts) < 2 or not is_block_barrier(stmts[0]):
            return loop
        rest = seq(stmts[1:])
        if not _carries_nothing(rest):
            return loop
        return tirx.SeqStmt([stmts[0], loop_with_body(loop, rest)])

    # Post-order: an inner loop's barrier, once before it, may lead its outer loop's body in turn.
    body = tvm_ffi.structural_map(func.body, [(tirx.For, on_for)], order="post")
    return func if body.same_as(func.body) else func.with_body(body)

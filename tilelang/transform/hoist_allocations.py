"""Pass `hoist_allocations`: a tile allocated inside a loop's body is one buffer for the whole
kernel, allocated in front of the loop.

    for k in T.Pipelined(n, num_stages=2):          a_smem = T.alloc_shared((128, 128))
        a_smem = T.alloc_shared((128, 128))    ->   for k in T.Pipelined(n, num_stages=2):
        T.copy(A[.., k * 128], a_smem)                  T.copy(A[.., k * 128], a_smem)

TileLang kernels allocate where they like (the public examples put tiles inside pipelined loops);
the tile's shape is constant, so allocating it once means the same. The passes after this one see
every tile defined before the loops that use it: the pipeline planner multi-buffers it and moves
its first copies into a prologue in front of the loop, where an allocation inside the body would
leave them using a buffer not yet defined.

Only allocations at the top level of a loop body move (out of every enclosing loop, not out of an
`if`, whose threads may lay the tile out on their own), and only those of a constant shape.

Requires: the PrimFunc as parsed. Guarantees: the same values; no AllocBuffer of constant shape at
the top level of a loop body.
"""

from __future__ import annotations

import tvm_ffi
from tvm import tirx

from tilelang.utils.ir import const_int


def _movable(stmt) -> bool:
    return isinstance(stmt, tirx.AllocBuffer) and all(const_int(d) is not None for d in stmt.buffer.shape)


def _flat(stmt) -> list:
    if isinstance(stmt, tirx.SeqStmt):
        return [s for part in stmt.seq for s in _flat(part)]
    return [stmt]


def hoist_allocations(func: tirx.PrimFunc) -> tirx.PrimFunc:
    def on_for(loop):
        # Inner loops come first (post order): what they hoisted is now in this body's sequence.
        stmts = _flat(loop.body)
        moved = [s for s in stmts if _movable(s)]
        if not moved:
            return loop
        rest = [s for s in stmts if not _movable(s)]
        body = rest[0] if len(rest) == 1 else tirx.SeqStmt(rest)
        new_loop = tirx.For(
            loop.loop_var,
            loop.min,
            loop.extent,
            loop.kind,
            body,
            loop.thread_binding,
            loop.annotations,
            loop.step,
            span=loop.span,
        )
        return tirx.SeqStmt([*moved, new_loop])

    def on_seq(seq):  # [.., [allocs, loop], ..] -> [.., allocs, loop, ..]
        if not any(isinstance(s, tirx.SeqStmt) for s in seq.seq):
            return seq
        return tirx.SeqStmt(_flat(seq), span=seq.span)

    body = tvm_ffi.structural_map(func.body, [(tirx.For, on_for)], order="post")
    if body.same_as(func.body):
        return func
    return func.with_body(tvm_ffi.structural_map(body, [(tirx.SeqStmt, on_seq)], order="post"))

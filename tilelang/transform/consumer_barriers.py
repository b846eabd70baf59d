"""Pass `consumer_barriers`: in a warp-specialized kernel, block barriers inside the consumer branch
wait for the consumer threads only.

`warp_specialize` left the producer and consumer sides in sequence; here they become the two
branches of `if threadIdx.x < C` (C consumer threads). A `__syncthreads()` inside the consumer
branch would also wait for the producer warpgroup, which is blocked on the consumers' empty
barriers: a deadlock. Each becomes `bar.sync 1, C` (id `barrier_ids.CONSUMERS`). The two
consumer warpgroups' turns at the tensor cores (`inject_tma_pipelines`) are dropped when such a barrier lies
inside a turn.

Requires: barrier insertion (`ThreadSync`) done. Guarantees: no `tl.ws_*_branch` attribute remains.
"""

from __future__ import annotations

import tvm_ffi
from tvm import ir, tirx

from tilelang import intrinsics
from tilelang.transform import barrier_ids
from tilelang.transform.warp_specialize import CONSUMER_BRANCH, PRODUCER_BRANCH
from tilelang.utils.ir import extern_name, is_block_barrier


def _without_unsafe_turns(body):
    """The consumer warpgroups' turns at the tensor cores (`tl::pingpong_*`) stay only when no
    barrier over all consumers lies inside a turn (between a warpgroup's `pingpong_sync` and its
    `pingpong_arrive`): the warpgroup would wait there for the other, which waits for its turn.
    Otherwise the turns are dropped."""
    unsafe, in_turn = [], [False]

    def on_eval(stmt):
        name = extern_name(stmt) or ""
        if name == "tl::pingpong_sync":
            in_turn[0] = True
        elif name == "tl::pingpong_arrive":
            in_turn[0] = False
        elif is_block_barrier(stmt) and in_turn[0]:
            unsafe.append(stmt)

    tvm_ffi.structural_walk(body, [(tirx.Evaluate, on_eval)], order="pre")
    if not unsafe:
        return body
    nop = tirx.Evaluate(tirx.const(0, "int32"))
    return tvm_ffi.structural_map(
        body, [(tirx.Evaluate, lambda s: nop if (extern_name(s) or "").startswith("tl::pingpong_") else s)]
    )


def _consumer_only(body, threads: int):
    body = _without_unsafe_turns(body)
    barrier = intrinsics.NAMED_BARRIER_SYNC.stmt({"id": barrier_ids.CONSUMERS, "threads": threads})
    return tvm_ffi.structural_map(body, [(tirx.Evaluate, lambda s: barrier if is_block_barrier(s) else s)])


def _is_side(stmt, key) -> bool:
    return isinstance(stmt, tirx.AttrStmt) and stmt.attr_key == key


def _split(stmts):
    """A statement list holding the producer side followed by the consumer side (barriers
    TVM may have put between them dropped: the sides run concurrently, ordered by mbarriers)."""
    out, k = [], 0
    while k < len(stmts):
        s = stmts[k]
        if not _is_side(s, PRODUCER_BRANCH):
            out.append(s)
            k += 1
            continue
        j = k + 1
        while j < len(stmts) and is_block_barrier(stmts[j]):
            j += 1
        consumer = stmts[j]
        assert _is_side(consumer, CONSUMER_BRANCH), "warp_specialize leaves the consumer side after the producer's"
        tx, threads = consumer.node, int(consumer.value)
        out.append(tirx.IfThenElse(tx < threads, _consumer_only(consumer.body, threads), s.body))
        k = j + 1
    return out


def _lower_func(func: tirx.PrimFunc) -> tirx.PrimFunc:
    def on_seq(node):
        if any(_is_side(s, PRODUCER_BRANCH) for s in node.seq):
            return tirx.SeqStmt(_split(list(node.seq)))
        return node

    return func.with_body(tvm_ffi.structural_map(func.body, [(tirx.SeqStmt, on_seq)]))


def consumer_barriers():
    """A module pass (it runs among TVM's passes)."""

    def run(mod):
        funcs = {gv: _lower_func(f) if isinstance(f, tirx.PrimFunc) else f for gv, f in mod.functions.items()}
        return ir.IRModule(funcs, attrs=mod.attrs)

    return run

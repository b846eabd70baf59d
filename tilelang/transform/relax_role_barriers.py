"""Pass `relax_role_barriers`: no block barrier between the warp roles a kernel writes by hand
(`with T.ws(1): ...` / `with T.ws(0): ...` in a loop), when the roles synchronize themselves through
mbarriers and touch shared memory only through the asynchronous units.

`expose_thread_branches` puts a block barrier before and after every thread branch that touches
shared memory. For roles written by hand in the same loop, a producer whose TMA loads complete on
an mbarrier and a consumer whose wgmma gemms read the tiles once it has waited on that barrier, those
barriers make each role wait for the other's whole iteration: the roles never overlap, and a
pipeline of several stages runs as if it had one. They also order nothing the roles need: a TMA
load lands after a barrier only when its mbarrier says so, and the consumer waits on that; the
producer refills a stage only after the consumers arrived on its "empty" mbarrier.

Before (after expose_thread_branches):          After:
    for k:                                          sync
        sync; [producer]; sync                      for k:
        sync; [consumer]; sync                          [producer]; [consumer]
                                                    sync

A role here is one side of a thread branch (hidden by `expose_thread_branches`) that waits on an
mbarrier, and whose shared-memory accesses are all TMA loads, wgmma operand reads and mbarrier
operations (asynchronous proxy: a block barrier does not order them anyway). Barriers between two
consecutive roles of disjoint threads go; a loop whose body is only such roles keeps one barrier
before it and one after it (ordering the roles against the code around the loop). Any other
barrier stays, and a branch with plain shared loads or stores is no role: its barriers stay.

Requires: `expose_thread_branches` (hidden branches), before TVM's barrier insertion (which finds
no conflict between such roles: it does not see TMA writes). Guarantees: only block barriers are
removed or moved.
"""

from __future__ import annotations

import tvm_ffi
from tvm import ir, tirx

from tilelang import intrinsics
from tilelang.intrinsics import device_call
from tilelang.transform import sync_thread_branches
from tilelang.utils.ir import is_block_barrier, seq

# sync_thread_branches' hidden branch (node: its condition) and each side of it (node: [lo, hi)).
HIDDEN, MARK = sync_thread_branches._HIDDEN, sync_thread_branches.THREAD_BRANCH
_SHARED = ("shared", "shared.dyn")
_ASYNC_CALLS = ("tl::tma_load", "tl::tma_load_multicast")  # write shared memory through address_of


def _is_shared(buffer) -> bool:
    return str(buffer.scope()) in _SHARED


def _role_ranges(stmt) -> list | None:
    """The thread ranges [lo, hi) of `stmt`'s sides when it is a hidden thread branch whose every
    side is a role (see the module docstring), else None."""
    if not (isinstance(stmt, tirx.AttrStmt) and stmt.attr_key == HIDDEN):
        return None
    sides = stmt.body.seq if isinstance(stmt.body, tirx.SeqStmt) else [stmt.body]
    ranges = []
    for side in sides:
        if not (isinstance(side, tirx.AttrStmt) and side.attr_key == MARK and _is_role(side.body)):
            return None
        ranges.append(tuple(int(x) for x in side.node))
    return ranges


def _is_role(body) -> bool:
    waits, allowed, plain = [], set(), []

    def on_eval(stmt):
        found = device_call(stmt)
        if found is None:
            return
        name = found[0]
        if name == "tl::mbarrier_wait":
            waits.append(stmt)
        if name.startswith("tl::mbarrier_") or name in _ASYNC_CALLS:
            # The barrier and the TMA destination: pointers into shared memory, not plain accesses.
            tvm_ffi.structural_walk(stmt.value, [(ir.TensorLoad, lambda ld: allowed.add(ld))])
        elif intrinsics.lookup(stmt) in intrinsics.WGMMAS:
            allowed.update(a for a in stmt.value.args if _is_access_ptr(a))

    def on_store(st):
        if _is_shared(st.buffer):
            plain.append(st)

    def on_load(ld):
        if _is_shared(ld.source) and not any(ld.same_as(a) for a in allowed):
            plain.append(ld)

    def on_call(call):
        if _is_access_ptr(call) and not any(call.same_as(a) for a in allowed):
            data = call.args[1]
            if isinstance(data.ty, ir.PointerType) and str(data.ty.storage_scope) in _SHARED:
                plain.append(call)

    tvm_ffi.structural_walk(body, [(tirx.Evaluate, on_eval)])
    tvm_ffi.structural_walk(body, [(tirx.BufferStore, on_store), (ir.TensorLoad, on_load), (ir.Call, on_call)])
    return bool(waits) and not plain


def _is_access_ptr(node) -> bool:
    return isinstance(node, ir.Call) and isinstance(node.op, ir.Op) and node.op.name == "tirx.tvm_access_ptr"


def _flat(stmt) -> list:
    if isinstance(stmt, tirx.SeqStmt):
        return [s for part in stmt.seq for s in _flat(part)]
    return [stmt]


def _disjoint(a, b) -> bool:
    return all(hi1 <= lo2 or hi2 <= lo1 for lo1, hi1 in a for lo2, hi2 in b)


def _relax(stmts: list) -> list:
    """`stmts` without the block barriers that only separate consecutive roles of disjoint threads."""
    out = []
    k = 0
    while k < len(stmts):
        st = stmts[k]
        if is_block_barrier(st):
            before = next((s for s in reversed(out) if not is_block_barrier(s)), None)
            j = k
            while j < len(stmts) and is_block_barrier(stmts[j]):
                j += 1
            after = stmts[j] if j < len(stmts) else None
            left = _role_ranges(before) if before is not None else None
            right = _role_ranges(after) if after is not None else None
            if left is not None and right is not None and _disjoint(left, right):
                while out and is_block_barrier(out[-1]):
                    out.pop()
                k = j
                continue
        out.append(st)
        k += 1
    return out


def relax_role_barriers(func: tirx.PrimFunc) -> tirx.PrimFunc:
    def on_seq(node):
        stmts = _flat(node)
        relaxed = _relax(stmts)
        return node if len(relaxed) == len(stmts) else seq(relaxed)

    def on_for(loop):
        stmts = _flat(loop.body)
        inner = [s for s in stmts if not is_block_barrier(s)]
        roles = [_role_ranges(s) for s in inner]
        edges = len(stmts) == len(inner) + 2 and is_block_barrier(stmts[0]) and is_block_barrier(stmts[-1])
        if not (edges and inner and all(r is not None for r in roles)):
            return loop
        if not all(_disjoint(a, b) for a, b in zip(roles, roles[1:] + roles[:1])) and len(roles) > 1:
            return loop
        body = tirx.For(
            loop.loop_var,
            loop.min,
            loop.extent,
            loop.kind,
            seq(inner),
            loop.thread_binding,
            loop.annotations,
            loop.step,
            span=loop.span,
        )
        return seq([stmts[0], body, stmts[-1]])

    body = tvm_ffi.structural_map(func.body, [(tirx.SeqStmt, on_seq)], order="post")
    body = tvm_ffi.structural_map(body, [(tirx.For, on_for)], order="post")
    return func if body.same_as(func.body) else func.with_body(body)

"""Pass `warp_specialize`: give a kernel with a `tl.ws` region (made by `inject_tma_pipelines`) its
producer warpgroup, and split the threads into the two roles.

Before (threads = C):                       After (threads = C + 128):
    allocations                                 allocations, the loop's barriers
    pre                                         prelude (barrier init, __syncthreads)
    tl.ws { prelude; producer; consumer }       if threadIdx.x < C:            # consumers
    post                                            pre; consumer loop; post
                                                else:                          # producer warpgroup
                                                    the producer loop, inside the loops/bindings
                                                    that enclose the pipelined loop

The producer was written as if its warpgroup started at thread 0; its thread index is shifted here.
Until barrier insertion the two sides stay in sequence, each in a `tl.ws_*_branch` attribute;
`consumer_barriers` then makes the branch and turns the consumers' block barriers into barriers over
the consumer threads only; `set_register_budgets` gives each side its registers.

Requires: `lower_tile_ops` (per-thread code), before any simplification that knows the thread
count. Guarantees: no `tl.ws` region remains; the two sides are `tl.ws_producer_branch` and
`tl.ws_consumer_branch` attributes (node: threadIdx.x, value: consumer threads).
"""

from __future__ import annotations

import tvm_ffi
from tvm import ir, tirx

from tilelang import intrinsics
from tilelang.errors import CompilerError
from tilelang.layout.fragment import substitute
from tilelang.transform.common import Scope, collect, is_thread_extent, mutate_with_scope
from tilelang.transform.pipelining import checks
from tilelang.transform.pipelining import tma as ptma
from tilelang.transform.pipelining.checks import PRODUCER_THREADS
from tilelang.utils.ir import extern, seq

CONSUMER_BRANCH = "tl.ws_consumer_branch"
PRODUCER_BRANCH = "tl.ws_producer_branch"


def _is_attr(stmt, key) -> bool:
    return isinstance(stmt, tirx.AttrStmt) and stmt.attr_key == key


def _parts(region):
    """(allocations, prelude, producer, consumer) of a `tl.ws` region."""
    stmts = list(region.body.seq) if isinstance(region.body, tirx.SeqStmt) else [region.body]
    allocs = [s for s in stmts if isinstance(s, tirx.AllocBuffer)]
    (prelude,) = [s.body for s in stmts if _is_attr(s, ptma.WS_PRELUDE)]
    (producer,) = [s.body for s in stmts if _is_attr(s, ptma.WS_PRODUCER)]
    (consumer,) = [s.body for s in stmts if _is_attr(s, ptma.WS_CONSUMER)]
    return allocs, prelude, producer, consumer


# The kernel's one `tl.ws` region is found by its key, not by identity: substitutions rebuild the
# nodes around it.
def _is_region(node) -> bool:
    return _is_attr(node, ptma.WS_REGION)


def _contains_region(stmt) -> bool:
    return any(_is_region(a) for a in collect(stmt, tirx.AttrStmt))


def _replace_region(stmt, new):
    return tvm_ffi.structural_map(stmt, [(tirx.AttrStmt, lambda a: new if _is_region(a) else a)])


def _var_reads(stmt) -> list:
    return [ld.source for ld in collect(stmt, ir.TensorLoad) if checks.is_scalar_var(ld.source)]


def _scalar_siblings(stmts, leaf, tx) -> set:
    """Indices of the statements before the `tl.ws` region that compute T.alloc_var scalars the
    producer reads (its trip count, its load coordinates), directly or through other such scalars.
    The planner allowed them (`checks.scalar_prelude`): the producer runs its own copy."""
    needed, keep = _var_reads(leaf), set()
    for j in reversed(range(len(stmts))):
        stores = [st.buffer for st in collect(stmts[j], tirx.BufferStore)]
        if not any(w.same_as(b) for w in stores for b in needed):
            continue
        if not checks.scalar_prelude(stmts[j], tx):
            names = sorted({b.name for b in needed if any(w.same_as(b) for w in stores)})
            raise CompilerError(
                f"warp specialization: the producer warpgroup reads {names}, which a statement it cannot run "
                f"computes; compile with pass_configs={{'tl.disable_warp_specialized': True}}"
            )
        keep.add(j)
        needed += _var_reads(stmts[j])
    return keep


def _own_copy(stmt):
    """`stmt` with fresh loop and bound variables: the consumers run the same statement."""
    fresh = {f.loop_var: tirx.Var(f"{f.loop_var.name}_p", f.loop_var.ty) for f in collect(stmt, tirx.For)}
    fresh.update({b.var: tirx.Var(f"{b.var.name}_p", b.var.ty) for b in collect(stmt, tirx.Bind)})
    if not fresh:
        return stmt

    def on_for(f):
        return tirx.For(fresh[f.loop_var], f.min, f.extent, f.kind, f.body, f.thread_binding, f.annotations, f.step)

    def on_bind(b):
        return tirx.Bind(fresh[b.var], b.value)

    stmt = tvm_ffi.structural_map(stmt, [(tirx.For, on_for), (tirx.Bind, on_bind)], order="post")
    return substitute(stmt, fresh)


def _path_only(stmt, leaf, tx=None):
    """What the producer runs of `stmt`: only the statements enclosing the `tl.ws` region (loops,
    bindings, conditions) and those computing the scalars it reads (`_scalar_siblings`), with the
    region replaced by `leaf`. Other sibling work is the consumers'."""
    if _is_region(stmt):
        return leaf
    if isinstance(stmt, tirx.SeqStmt):
        kept, renamed = [], {}
        at = next(j for j, s in enumerate(stmt.seq) if _contains_region(s))
        scalars = _scalar_siblings(list(stmt.seq)[:at], leaf, tx)
        for j, s in enumerate(stmt.seq):
            if renamed:
                s = substitute(s, renamed)
            if _contains_region(s):
                kept.append(_path_only(s, substitute(leaf, renamed) if renamed else leaf, tx))
                break
            if j in scalars:
                kept.append(_own_copy(s))
                continue
            if isinstance(s, tirx.Bind):
                # The consumer branch binds the same variable: the producer's copy gets its own.
                var = tirx.Var(f"{s.var.name}_p", s.var.ty)
                renamed[s.var] = var
                kept.append(tirx.Bind(var, s.value))
        return seq(kept)
    if isinstance(stmt, tirx.For):
        # The consumer branch has the same loop: the producer's copy gets its own variable.
        var = tirx.Var(f"{stmt.loop_var.name}_p", stmt.loop_var.ty)
        renamed = {stmt.loop_var: var}
        body = _path_only(substitute(stmt.body, renamed), substitute(leaf, renamed), tx)
        return tirx.For(var, stmt.min, stmt.extent, tirx.ForKind.SERIAL, body)
    if isinstance(stmt, tirx.AttrStmt):
        return tirx.AttrStmt(stmt.node, stmt.attr_key, stmt.value, _path_only(stmt.body, leaf, tx))
    if isinstance(stmt, tirx.IfThenElse):
        if _contains_region(stmt.then_case):
            return tirx.IfThenElse(stmt.condition, _path_only(stmt.then_case, leaf, tx), None)
        return tirx.IfThenElse(tirx.Not(stmt.condition), _path_only(stmt.else_case, leaf, tx), None)
    raise CompilerError(
        f"warp specialization: the pipelined loop sits inside a {type(stmt).__name__}, which the producer "
        f"warpgroup cannot follow; compile with pass_configs={{'tl.disable_warp_specialized': True}}"
    )


def _hoist_allocations(body):
    """(`body` without the allocations on the way to the `tl.ws` region, those allocations): both
    sides use the kernel's tiles, so they are allocated once, before the split. An allocation after
    a binding (`bx = ...` before the tiles) or inside a loop around the pipelined loop moves up too;
    one whose shape depends on such a variable cannot."""
    hoisted, bound = [], []

    def walk(stmt):
        if isinstance(stmt, tirx.SeqStmt):
            kept = []
            for s in stmt.seq:
                if isinstance(s, tirx.AllocBuffer) and not _contains_region(s):
                    hoisted.append(s)
                    used = {v for e in s.buffer.shape for v in collect(e, ir.Var)}
                    if any(v.same_as(b) for v in used for b in bound):
                        raise CompilerError(
                            f"warp specialization: the shape of '{s.buffer.name}' depends on a value bound "
                            f"in the kernel, so the producer warpgroup cannot share it; compile with "
                            f"pass_configs={{'tl.disable_warp_specialized': True}}"
                        )
                    continue
                if isinstance(s, tirx.Bind):
                    bound.append(s.var)
                kept.append(walk(s) if _contains_region(s) else s)
            return seq(kept)
        if isinstance(stmt, tirx.For) and _contains_region(stmt.body):
            bound.append(stmt.loop_var)
            return tirx.For(
                stmt.loop_var, stmt.min, stmt.extent, stmt.kind, walk(stmt.body), stmt.thread_binding,
                stmt.annotations, stmt.step, span=stmt.span,
            )  # fmt: skip
        if isinstance(stmt, tirx.AttrStmt) and _contains_region(stmt.body) and not _is_region(stmt):
            return tirx.AttrStmt(stmt.node, stmt.attr_key, stmt.value, walk(stmt.body), span=stmt.span)
        return stmt

    rest = walk(body)
    return rest, hoisted


def _specialize_kernel(attr):
    """`attr`: the innermost threadIdx.x extent of a kernel with a `tl.ws` region."""
    regions = [a for a in collect(attr.body, tirx.AttrStmt) if a.attr_key == ptma.WS_REGION]
    if not regions:
        return attr
    (region,) = regions  # the planner specializes one loop per kernel
    threads = int(region.value)
    tx = attr.node.var
    allocs, prelude, producer, consumer = _parts(region)
    rest, lead = _hoist_allocations(attr.body)
    producer = substitute(producer, {tx: tx - threads})
    producer_side = _path_only(rest, producer, tx)
    consumer_side = tirx.AttrStmt(tx, CONSUMER_BRANCH, threads, _replace_region(rest, consumer))
    # The two sides stay in sequence (producer first) until barriers are inserted: TVM's passes
    # see plain code (its barrier insertion refuses thread-dependent branches), and shared tiles
    # the consumers use only after the loop may still reuse the stage buffers' bytes.
    # `consumer_barriers` turns the pair into the branch on threadIdx.x.
    producer_side = tirx.AttrStmt(tx, PRODUCER_BRANCH, threads, producer_side)
    # A block of a cluster exits only with its peer: the peer's consumers still arrive on this
    # block's barriers until the end.
    clustered = any(intrinsics.CLUSTER_DIMS.matches(e) for e in collect(prelude, tirx.Evaluate))
    exit_sync = [extern("tl::cluster_sync")] if clustered else []
    new_body = seq(lead + allocs + [prelude, producer_side, consumer_side] + exit_sync)
    iv = attr.node
    new_iv = tirx.IterVar(ir.Range.from_min_extent(0, threads + PRODUCER_THREADS), iv.var, iv.iter_type, iv.thread_tag)
    return tirx.AttrStmt(new_iv, attr.attr_key, tirx.const(threads + PRODUCER_THREADS, "int32"), new_body)


def warp_specialize(func: tirx.PrimFunc) -> tirx.PrimFunc:
    if not any(a.attr_key == ptma.WS_REGION for a in collect(func.body, tirx.AttrStmt)):
        return func

    def on_attr(attr, recurse):
        if is_thread_extent(attr, "threadIdx.x"):
            return _specialize_kernel(attr)
        return recurse(attr)

    return func.with_body(mutate_with_scope(func.body, Scope(), {tirx.AttrStmt: on_attr}))

"""Pass `pipeline_loops`: software-pipeline `T.Pipelined(n, num_stages=s)` loops (s >= 2).

Plan: the global-to-shared copies of an iteration are stage 0 (producers); everything else is the
last stage (consumers). `order`/`stage` given to T.Pipelined override the plan: statements with a
stage below the largest are producers, and the loop body issues the statements sorted by `order`
(a producer's copy for iteration k + s - 1 in its own place; the commit after the last one).
Each shared tile a producer writes gets `s` buffers (a new leading dimension), iteration k using
buffer k % s; producers become asynchronous copies (cp.async) issued s - 1 iterations ahead:

Before:  for k in T.Pipelined(n, num_stages=3): copy(A[k], A_s); gemm(A_s, ...)
After:   for i in range(2): if i < n: copy_async(A[i], A_s[i % 3]);  commit
         for k in range(n):
             wait(1); __syncthreads()                 # copies of iteration k have landed
             if k + 2 < n: copy_async(A[k + 2], A_s[(k + 2) % 3])
             commit
             gemm(A_s[k % 3], ...)
         wait(0)

The barrier after the wait also orders every thread's reads of buffer (k - 1) % 3 in iteration k - 1
before the copies that overwrite it in iteration k.

Requires: tile ops as parsed (before expand_elementwise_ops). Guarantees: no num_stages annotation
remains; a UserError pointing at the loop when a pipeline cannot be built (a shared tile written by
two statements, or by a consumer).
"""

from __future__ import annotations

import logging
from dataclasses import dataclass

import tvm_ffi
from tvm import ir, tirx

from tilelang import intrinsics
from tilelang.errors import at_span
from tilelang.layout.fragment import substitute
from tilelang.op import base, tma
from tilelang.op import copy as copy_op
from tilelang.options import DEFAULT_OPTIONS, CompileOptions
from tilelang.transform import pipeline_tma
from tilelang.transform import pipeline_tma_checks as checks
from tilelang.transform.common import Scope, mutate_with_scope, walk
from tilelang.utils.ir import collect, extern, seq

logger = logging.getLogger("tilelang")


def _statements(body):
    return list(body.seq) if isinstance(body, tirx.SeqStmt) else [body]


def _inline_binds(stmts):
    """Substitute `x = value` bindings into the statements after them (they belong to both stages)."""
    out, mapping = [], {}
    for s in stmts:
        if isinstance(s, tirx.Bind):
            mapping[s.var] = substitute(s.value, mapping)
            continue
        out.append(substitute(s, mapping) if mapping else s)
    return out


def _is_producer_copy(stmt) -> bool:
    if not (isinstance(stmt, tirx.Evaluate) and base.is_tile_op(stmt.value, copy_op.NAME)):
        return False
    src = base.Region.from_ir(stmt.value.args[0]).buffer
    dst = base.Region.from_ir(stmt.value.args[1]).buffer
    return src.scope() == "global" and dst.scope().startswith("shared")


def _written(stmt):
    """Buffers a statement writes: copy destinations and stored buffers."""
    out = []
    if isinstance(stmt, tirx.Evaluate) and base.is_tile_op(stmt.value):
        call = stmt.value
        if base.is_tile_op(call, copy_op.NAME) or base.is_tile_op(call, "fill"):
            out.append(
                base.Region.from_ir(call.args[1] if base.is_tile_op(call, copy_op.NAME) else call.args[0]).buffer
            )
    tvm_ffi.structural_walk(stmt, [(tirx.BufferStore, lambda st: out.append(st.buffer))])
    return out


def versioned(stmt, buffers: dict, version):
    """Accesses of each multi-buffered tile in `stmt` go to buffer `version` of its new version."""

    def on_region(r):
        if r.source in buffers:
            ranges = [ir.Range.from_min_extent(version, 1)] + list(r.region)
            return tirx.BufferRegion(buffers[r.source], ranges)
        return r

    def on_load(ld):
        return tirx.BufferLoad(buffers[ld.source], [version] + list(ld.indices)) if ld.source in buffers else ld

    def on_store(st):
        if st.buffer in buffers:
            return tirx.BufferStore(buffers[st.buffer], st.value, [version] + list(st.indices), span=st.span)
        return st

    return tvm_ffi.structural_map(
        stmt, [(ir.TensorRegion, on_region), (ir.TensorLoad, on_load), (tirx.BufferStore, on_store)], order="post"
    )


def _as_async(stmt):
    call = stmt.value
    args = list(call.args[:3]) + [tirx.const(1, "int32")] + list(call.args[4:])
    return tirx.Evaluate(ir.Call(call.op, args, ret_ty="void"), span=stmt.span)


@dataclass
class Plan:
    producers: list  # the global-to-shared copies the pipeline issues ahead
    ordered: list  # every statement, in the order the loop body issues them
    tiles: list  # the shared tiles the producers write (multi-buffered)
    stage_of: list  # the consumer stage of each statement of `ordered` (0 for producers)
    program: list  # the statements in program order

    def in_program_order(self):
        """The plan with the consumers back in program order and one stage: what runs where only
        the warp-specialized Hopper pipeline runs consumers of different iterations together (the
        loop means the same)."""
        return Plan(self.producers, self.program, self.tiles, [0] * len(self.program), self.program)


def _user_schedule(loop, count: int):
    """Per-statement (order, stage) lists from T.Pipelined's `order`/`stage` (and `group`, whose
    entries give several statements one order and stage), or None when the user gave none."""
    user_stage = loop.annotations.get("tl_pipeline_stage")
    if user_stage is None:
        return None
    stage = [int(x) for x in user_stage]
    order = [int(x) for x in loop.annotations.get("tl_pipeline_order")]
    placed = [o for o in order if o >= 0]
    if len(set(placed)) != len(placed) or min(stage) < -1 or min(order) < -1:
        raise at_span(
            f"T.Pipelined: `order` entries must be distinct (or -1) and `stage` entries >= -1; "
            f"got order={order}, stage={stage}",
            loop.span,
        )
    groups = loop.annotations.get("tl_pipeline_group")
    if groups is not None:
        groups = [[int(x) for x in g] for g in groups]
        members = sorted(x for g in groups for x in g)
        if members != list(range(count)):
            raise at_span(
                f"T.Pipelined: `group` must list each of the loop's {count} statements (0..{count - 1}) once; "
                f"got {groups}",
                loop.span,
            )
        per_order, per_stage = [0] * count, [0] * count
        for g, o, st in zip(groups, order, stage):
            for x in g:
                per_order[x], per_stage[x] = o, st
        order, stage = per_order, per_stage
    if len(stage) != count:
        raise at_span(
            f"T.Pipelined: `stage` and `order` have {len(stage)} entries but the loop has {count} statements"
            + ("" if groups is None else f" in {len(groups)} groups"),
            loop.span,
        )
    return order, stage


def _plan(loop, stages: int):
    """(producers, statements in the order the loop body issues them, multi-buffered tiles, the
    consumer stage of each statement).

    Without `order`/`stage` the producers are the global-to-shared copies and every consumer is in
    stage 0. With them, stage -1 marks the producers (the compiler places them; order -1 puts a
    statement first) and the consumers' stages count from 0: a consumer in stage 1 runs one
    iteration behind those in stage 0 (FlashAttention's P·V of iteration k - 1 beside the softmax of
    iteration k). In the older form without -1, statements in a stage below the largest are the
    producers."""
    stmts = _inline_binds(_statements(loop.body))
    position = list(range(len(stmts)))
    cstage = [0] * len(stmts)
    schedule = _user_schedule(loop, len(stmts))
    if schedule is not None:
        position, user_stage = schedule
        if -1 in user_stage:
            producers = [s for s, st in zip(stmts, user_stage) if st == -1]
            low = min((st for st in user_stage if st >= 0), default=0)
            cstage = [max(st - low, 0) for st in user_stage]
        else:
            last = max(user_stage)
            producers = [s for s, st in zip(stmts, user_stage) if st < last]
        if not all(_is_producer_copy(s) for s in producers):
            raise at_span(
                "T.Pipelined: statements in the producer stage must be copies from global to shared memory", loop.span
            )
    else:
        producers = [s for s in stmts if _is_producer_copy(s)]
    ranked = sorted(range(len(stmts)), key=lambda j: (position[j], j))
    ordered = [stmts[j] for j in ranked]
    stage_of = [cstage[j] for j in ranked]
    consumers = [s for s in stmts if not any(s.same_as(p) for p in producers)]
    tiles = []
    for p in producers:
        dst = base.Region.from_ir(p.value.args[1]).buffer
        if any(dst.same_as(t) for t in tiles):
            raise at_span(
                f"T.Pipelined: shared tile '{dst.name}' is written by two copies of the loop; a pipelined "
                f"tile must have one producer",
                loop.span,
            )
        tiles.append(dst)
    for c in consumers:
        for w in _written(c):
            if any(w.same_as(t) for t in tiles):
                raise at_span(
                    f"T.Pipelined: shared tile '{w.name}' is written both by a copy in stage 0 and by "
                    f"a later statement of the loop; the planner cannot buffer it",
                    loop.span,
                )
    return Plan(producers, ordered, tiles, stage_of, stmts)


def _pipeline(loop, stages: int, new_tiles: dict, kernel: checks.Kernel):
    plan = _plan(loop, stages)
    producers, tiles = plan.producers, plan.tiles
    if not producers:
        return None
    versions = {}
    for t in tiles:
        new = tirx.decl_buffer((stages, *t.shape), str(t.dtype), t.name, scope=t.scope())
        versions[t] = new
        new_tiles[t] = new
    reason = checks.why_not(producers, kernel)
    no_ws = reason or checks.why_not_specialized(loop, producers, kernel)
    reason = reason or checks.why_not_nested(kernel, no_ws)
    deep = max(plan.stage_of) > 1
    if any(plan.stage_of) and (no_ws is not None or deep):
        why = no_ws if no_ws is not None else "consumer stages beyond 1"
        logger.debug("pipelined loop '%s': consumers in program order, one stage (%s)", loop.loop_var.name, why)
        plan = plan.in_program_order()
    if reason is None:
        if no_ws is not None:
            logger.debug("pipelined loop '%s': TMA without warp specialization (%s)", loop.loop_var.name, no_ws)

        def at_stage(stmt, stage):
            return versioned(stmt, versions, stage)

        staged = list(versions.values())
        return pipeline_tma.build(loop, stages, plan, at_stage, staged, kernel, no_ws is None)
    ordered = plan.ordered
    if kernel.target is not None and "sm_90" in str(kernel.target):
        logger.debug("pipelined loop '%s': cp.async instead of TMA (%s)", loop.loop_var.name, reason)
    k, n = loop.loop_var, loop.extent
    s = tirx.const(stages, "int32")

    def produce(p, i):
        return _as_async(versioned(substitute(p, {k: i}), versions, tirx.floormod(i, s)))

    i = tirx.Var("stage", "int32")
    prologue = tirx.For(
        i,
        0,
        stages - 1,
        tirx.ForKind.UNROLLED,
        seq([tirx.IfThenElse(i < n, seq([produce(p, i) for p in producers]), None), extern("tl::cp_async_commit")]),
    )
    ahead = k + (stages - 1)
    body = [intrinsics.CP_ASYNC_WAIT.stmt({"pending": stages - 2}), extern("__syncthreads")]
    is_producer = [any(st.same_as(p) for p in producers) for st in ordered]
    last_producer = max(j for j, flag in enumerate(is_producer) if flag)
    run = []  # adjacent producers share one bounds check
    for j, (st, flag) in enumerate(zip(ordered, is_producer)):
        if flag:
            run.append(produce(st, ahead))
        else:
            body.append(versioned(st, versions, tirx.floormod(k, s)))
        if run and (j + 1 == len(ordered) or not is_producer[j + 1]):
            body.append(tirx.IfThenElse(ahead < n, seq(run), None))
            run = []
        if j == last_producer:
            body.append(extern("tl::cp_async_commit"))
    main = tirx.For(k, loop.min, n, tirx.ForKind.SERIAL, seq(body), span=loop.span)
    return seq([prologue, main, intrinsics.CP_ASYNC_WAIT.stmt({"pending": 0})])


def pipeline_loops(func: tirx.PrimFunc, options: CompileOptions = DEFAULT_OPTIONS) -> tirx.PrimFunc:
    new_tiles = {}
    scope = Scope()
    target = func.attrs.get("target") if func.attrs is not None else None
    specialized = {}  # thread var -> loops warp-specialized in that kernel
    tma_tiles = _tma_only_tiles(func.body)
    binds = {b.var: b.value for b in collect(func.body, tirx.Bind)}

    depth = [0]  # loops around the one being visited
    guards = [0]  # conditions around it

    def on_if(node, recurse):
        guards[0] += 1
        out = recurse(node)
        guards[0] -= 1
        return out

    def on_for(loop, recurse):
        stages = loop.annotations.get("num_stages") if loop.annotations else None
        if stages is None or int(stages) < 2:
            depth[0] += 1
            out = recurse(loop)
            depth[0] -= 1
            return out
        if scope.thread_range is not None:
            raise at_span(
                "T.Pipelined inside a thread branch (`if tx < n:` and the like) is not supported: the "
                "pipeline's barriers count on every thread of the block; put the branch inside the loop",
                loop.span,
            )
        tx, threads = scope.threads.get("threadIdx.x", (None, 1))
        kernel = checks.Kernel(
            func,
            target,
            tx,
            int(threads),
            only_x=not {"threadIdx.y", "threadIdx.z"} & set(scope.threads),
            specialized=specialized.setdefault(tx, []),
            tma_tiles=tma_tiles,
            nested=depth[0] > 0,
            guarded=guards[0] > 0,
            blocks={tag: v for tag, v in scope.threads.items() if tag.startswith("blockIdx")},
            binds=binds,
            options=options,
        )
        out = _pipeline(loop, int(stages), new_tiles, kernel)
        return out if out is not None else loop

    body = mutate_with_scope(func.body, scope, {tirx.For: on_for, tirx.IfThenElse: on_if})
    if new_tiles:
        body = tvm_ffi.structural_map(
            body, [(tirx.AllocBuffer, lambda a: tirx.AllocBuffer(new_tiles[a.buffer]) if a.buffer in new_tiles else a)]
        )
        _check_no_stale_use(body, new_tiles)
    return func.with_body(body)


def _tma_only_tiles(body) -> tuple:
    """Shared tiles whose only writers are TMA loads (`lower_tma_copies`): wgmma needs no proxy
    fence to read them."""
    loaded = []

    def on_eval(stmt):
        if base.is_tile_op(stmt.value, tma.NAME):
            loaded.append(base.Region.from_ir(stmt.value.args[1]).buffer)

    walk(body, [(tirx.Evaluate, on_eval)])
    generic = _written(body)
    return tuple(b for b in loaded if not any(b.same_as(w) for w in generic))


def _check_no_stale_use(body, new_tiles):
    stale = [ld.source for ld in collect(body, ir.TensorLoad) if ld.source in new_tiles]
    stale += [st.buffer for st in collect(body, tirx.BufferStore) if st.buffer in new_tiles]
    if stale:
        raise at_span(
            f"T.Pipelined: shared tile '{stale[0].name}' is multi-buffered by a pipelined loop but also used "
            f"outside it; give the code outside the loop its own tile"
        )

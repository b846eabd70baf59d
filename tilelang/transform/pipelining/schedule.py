"""The schedule of a `T.Pipelined` loop and the walk over a kernel's pipelined loops, shared by
the pipelining passes (`plan_pipelines`, `inject_cp_async_pipelines`, `inject_tma_pipelines`).

A loop's schedule (`schedule`): the global-to-shared loads of an iteration (tile ops whose
`async_load` answers: `T.copy` from global to shared) are the producers; everything else is a
consumer, in stage 0 unless `T.Pipelined(order=, stage=, group=)` says otherwise or, without them,
the loop is an attention loop (`infer_stages`: FlashAttention-3's split). Each shared tile
a producer writes gets one buffer per stage (`multi_buffer`), iteration k using buffer k % stages
(`versioned`); the tile's T.annotate_layout moves to that buffer, each stage laid out alike.

`plan_pipelines` records each loop's form as loop annotations, read by the injection passes:
    tl.pipeline_form     "cp_async", "tma" (TMA loads, no producer warpgroup) or "tma_ws"
    tl.pipeline_cluster  [grid dimension, indices of the producer copies multicast] (2-block clusters)
"""

from __future__ import annotations

from dataclasses import dataclass

import tvm
import tvm_ffi
from tvm import ir, tirx

from tilelang.errors import at_span
from tilelang.layout.layout import Layout, shared_layout_from_ir, shared_layout_to_ir
from tilelang.options import CompileOptions
from tilelang.transform.common import Scope, inline_bindings, mutate_with_scope
from tilelang.transform.infer_layout import ANNOTATED_LAYOUTS
from tilelang.transform.pipelining import checks, infer_stages
from tilelang.transform.pipelining.checks import load_of, written
from tilelang.utils.ir import collect, loop_with_body

FORM = "tl.pipeline_form"
CLUSTER = "tl.pipeline_cluster"
CP_ASYNC, TMA, TMA_WS = "cp_async", "tma", "tma_ws"


def _statements(body):
    return list(body.seq) if isinstance(body, tirx.SeqStmt) else [body]


def distribute_guard(loop, func):
    """`loop` with a body that is one `if c:` (a block-sparse GEMM's `if mask[k]:`) written as its
    statements each under `if c:`, so that its copies are producers like any other (issued ahead
    under the condition of their own iteration), when c reads only tensors nothing in the loop's
    kernel writes (`checks.distributable_guard`); else `loop` itself. Names bound before the `if`
    (`j = idx[k]` then `if j >= 0:`, as a gather by a block table reads) are put in place of their
    uses when their values are such reads too."""
    stmts = _statements(loop.body)
    if len(stmts) > 1 and all(isinstance(s, tirx.Bind) and checks.invariant(s.value, loop, func) for s in stmts[:-1]):
        inlined = loop_with_body(loop, inline_bindings(stmts)[0])
        if checks.distributable_guard(inlined, func) is not None:
            loop = inlined
    guard = checks.distributable_guard(loop, func)
    if guard is None:
        return loop
    body = tirx.SeqStmt([tirx.IfThenElse(guard, st, None, span=st.span) for st in _statements(loop.body.then_case)])
    return loop_with_body(loop, body)


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


@dataclass
class Plan:
    """A pipelined loop's schedule (`schedule`)."""

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


def schedule(loop) -> Plan:
    """(producers, statements in the order the loop body issues them, multi-buffered tiles, the
    consumer stage of each statement).

    Without `order`/`stage` the producers are the global-to-shared copies and every consumer is in
    stage 0. With them, stage -1 marks the producers (the compiler places them; order -1 puts a
    statement first) and the consumers' stages count from 0: a consumer in stage 1 runs one
    iteration behind those in stage 0 (FlashAttention's P·V of iteration k - 1 beside the softmax of
    iteration k). In the older form without -1, statements in a stage below the largest are the
    producers."""
    stmts = inline_bindings(_statements(loop.body))  # (the bindings belong to every stage)
    position = list(range(len(stmts)))
    cstage = [0] * len(stmts)
    schedule = _user_schedule(loop, len(stmts))
    if schedule is None:
        schedule = infer_stages.attention_stages(stmts)
    if schedule is not None:
        position, user_stage = schedule
        if -1 in user_stage:
            producers = [s for s, st in zip(stmts, user_stage) if st == -1]
            low = min((st for st in user_stage if st >= 0), default=0)
            cstage = [max(st - low, 0) for st in user_stage]
        else:
            last = max(user_stage)
            producers = [s for s, st in zip(stmts, user_stage) if st < last]
        if not all(load_of(s) is not None for s in producers):
            raise at_span(
                "T.Pipelined: statements in the producer stage must be copies from global to shared memory", loop.span
            )
    else:
        producers = [s for s in stmts if load_of(s) is not None]
    ranked = sorted(range(len(stmts)), key=lambda j: (position[j], j))
    ordered = [stmts[j] for j in ranked]
    stage_of = [cstage[j] for j in ranked]
    consumers = [s for s in stmts if not any(s.same_as(p) for p in producers)]
    tiles = []
    for p in producers:
        dst = load_of(p).dst.buffer
        if any(dst.same_as(t) for t in tiles):
            raise at_span(
                f"T.Pipelined: shared tile '{dst.name}' is written by two copies of the loop; a pipelined "
                f"tile must have one producer",
                loop.span,
            )
        tiles.append(dst)
    for c in consumers:
        for w in written(c):
            if any(w.same_as(t) for t in tiles):
                raise at_span(
                    f"T.Pipelined: shared tile '{w.name}' is written both by a copy in stage 0 and by "
                    f"a later statement of the loop; the planner cannot buffer it",
                    loop.span,
                )
    return Plan(producers, ordered, tiles, stage_of, stmts)


def stages_of(loop) -> int:
    """The loop's `num_stages` (0 for a loop T.Pipelined did not make)."""
    stages = loop.annotations.get("num_stages") if loop.annotations else None
    return int(stages) if stages is not None else 0


def form_of(loop):
    """(form, cluster) that `plan_pipelines` recorded on `loop`; cluster is (grid dimension,
    [indices of the multicast producer copies]) or None. (None, None) for a loop not planned."""
    form = loop.annotations.get(FORM) if loop.annotations else None
    cluster = loop.annotations.get(CLUSTER) if loop.annotations else None
    if cluster is not None:
        cluster = (int(cluster[0]), [int(j) for j in list(cluster)[1:]])
    return (str(form) if form is not None else None), cluster


def with_form(loop, form: str, cluster=None):
    """`loop` annotated with its form (and cluster)."""
    notes = dict(loop.annotations)
    notes[FORM] = form
    if cluster is not None:
        notes[CLUSTER] = tvm.runtime.convert([cluster[0], *cluster[1]])
    return tirx.For(
        loop.loop_var, loop.min, loop.extent, loop.kind, loop.body, loop.thread_binding, notes, loop.step,
        span=loop.span,
    )  # fmt: skip


def consumer_order(plan: Plan, form: str, stages: int) -> Plan:
    """The plan the loop body runs: consumers in stages of their own only in the warp-specialized
    Hopper pipeline (one stage deep) with two or more buffers (a consumer one iteration behind reads
    the buffer the next load writes); elsewhere in program order (the loop means the same)."""
    if any(plan.stage_of) and (form != TMA_WS or max(plan.stage_of) > 1 or stages < 2):
        return plan.in_program_order()
    return plan


def multi_buffer(plan: Plan, stages: int) -> dict:
    """{tile: its multi-buffered version} for the shared tiles the producers write."""
    return {t: tirx.decl_buffer((stages, *t.shape), str(t.dtype), t.name, scope=t.scope()) for t in plan.tiles}


def map_pipelined_loops(func: tirx.PrimFunc, visit, options: CompileOptions) -> tirx.PrimFunc:
    """`func` with each loop T.Pipelined made with 1 or more stages replaced by `visit(loop, stages,
    kernel, new_tiles)` (None: left as it is; a one-stage loop's body is then visited as a plain
    loop's); `kernel` (`checks.Kernel`) is what the planner knows around it. A pipelined loop's body
    is not visited. Tiles `visit` multi-buffers (entered in `new_tiles`: old buffer -> new) are
    allocated in their new shape, and must not be used outside their loop."""
    new_tiles = {}
    scope = Scope()
    target = func.attrs.get("target") if func.attrs is not None else None
    specialized = {}  # thread var -> loops warp-specialized in that kernel
    tma_tiles = checks.tma_only_tiles(func.body)
    binds = {b.var: b.value for b in collect(func.body, tirx.Bind)}
    depth = [0]  # loops around the one being visited
    guards = [0]  # conditions around it

    def on_if(node, recurse):
        guards[0] += 1
        out = recurse(node)
        guards[0] -= 1
        return out

    def descend(loop, recurse):
        depth[0] += 1
        out = recurse(loop)
        depth[0] -= 1
        return out

    def on_for(loop, recurse):
        stages = stages_of(loop)
        if stages < 1:
            return descend(loop, recurse)
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
            branch=scope.thread_range,
            blocks={tag: v for tag, v in scope.threads.items() if tag.startswith("blockIdx")},
            binds=binds,
            options=options,
        )
        out = visit(loop, stages, kernel, new_tiles)
        if out is None and stages < 2:  # a one-stage loop left as written: a plain loop, may hold pipelines
            return descend(loop, recurse)
        return out if out is not None else loop

    body = mutate_with_scope(func.body, scope, {tirx.For: on_for, tirx.IfThenElse: on_if})
    if new_tiles:
        body = tvm_ffi.structural_map(
            body, [(tirx.AllocBuffer, lambda a: tirx.AllocBuffer(new_tiles[a.buffer]) if a.buffer in new_tiles else a)]
        )
        _check_no_stale_use(body, new_tiles)
        func = _layouts_follow(func, new_tiles)
    return func.with_body(body)


def _layouts_follow(func: tirx.PrimFunc, new_tiles: dict) -> tirx.PrimFunc:
    """A multi-buffered tile's `T.annotate_layout` moves to its new buffer: each stage laid out as
    the tile was, the stages one after another (hand-written code reading the tile, and the copies
    writing it, then agree on the layout the user asked for)."""
    annotated = func.attrs.get(ANNOTATED_LAYOUTS) if func.attrs is not None else None
    if annotated is None or not any(b in new_tiles for b in annotated):
        return func
    moved = {}
    for b, value in annotated.items():
        if b not in new_tiles:
            moved[b] = value
            continue
        lay = shared_layout_from_ir(value)
        stage = tirx.Var("stage", "int32")
        forward = stage * tirx.const(lay.physical_size, "int32") + lay.forward
        stages = int(new_tiles[b].shape[0])
        moved[new_tiles[b]] = shared_layout_to_ir(
            Layout((stages, *lay.shape), [stage, *lay.vars], forward, stages * lay.physical_size, lay.name)
        )
    return func.with_attr(ANNOTATED_LAYOUTS, tvm_ffi.convert(moved))


def _check_no_stale_use(body, new_tiles):
    stale = [ld.source for ld in collect(body, ir.TensorLoad) if ld.source in new_tiles]
    stale += [st.buffer for st in collect(body, tirx.BufferStore) if st.buffer in new_tiles]
    if stale:
        raise at_span(
            f"T.Pipelined: shared tile '{stale[0].name}' is multi-buffered by a pipelined loop but also used "
            f"outside it; give the code outside the loop its own tile"
        )

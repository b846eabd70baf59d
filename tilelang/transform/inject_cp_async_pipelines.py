"""Pass `inject_cp_async_pipelines`: the pipelined loops `plan_pipelines` gave the cp.async form.

Each shared tile a producer writes gets `s` buffers (a new leading dimension), iteration k using
buffer k % s; the producers become asynchronous copies (cp.async, `TileOp.issued_async`) issued
s - 1 iterations ahead, one commit group per iteration, and the consumers run in the order the
schedule gives (`pipelining/schedule.py`):

Before:  for k in T.Pipelined(n, num_stages=3): copy(A[k], A_s); gemm(A_s, ...)
After:   for i in range(2): if i < n: copy_async(A[i], A_s[i % 3]);  commit
         for k in range(n):
             wait(1); __syncthreads()                 # copies of iteration k have landed
             if k + 2 < n: copy_async(A[k + 2], A_s[(k + 2) % 3])
             commit
             gemm(A_s[k % 3], ...)
         wait(0)

A loop from `start` (`T.Pipelined(start, stop)`) does the same with its iterations counted from there:
the prologue issues iterations start .. start + s - 2, the body k + s - 1 while it is below stop.

The barrier after the wait also orders every thread's reads of buffer (k - 1) % 3 in iteration k - 1
before the copies that overwrite it in iteration k.

Requires: `plan_pipelines`. Guarantees: no loop of the cp.async form is left; the multi-buffered
tiles are used only inside their loop.
"""

from __future__ import annotations

from tvm import tirx

from tilelang import intrinsics
from tilelang.layout.fragment import substitute
from tilelang.op import base
from tilelang.options import DEFAULT_OPTIONS, CompileOptions
from tilelang.transform.pipelining import checks, schedule
from tilelang.transform.pipelining.schedule import versioned
from tilelang.utils.ir import extern, seq


def _as_async(stmt):
    cond, inner = checks.unguarded(stmt)
    issued = tirx.Evaluate(base.parse(inner).issued_async(), span=inner.span)
    return issued if cond is None else tirx.IfThenElse(cond, issued, None, span=stmt.span)


def _build(loop, stages: int, plan, versions: dict):
    producers, ordered = plan.producers, plan.ordered
    k, n, start = loop.loop_var, loop.extent, loop.min
    s = tirx.const(stages, "int32")

    def produce(p, i):
        return _as_async(versioned(substitute(p, {k: i}), versions, tirx.floormod(i, s)))

    i = tirx.Var("stage", "int32")
    issue = tirx.IfThenElse(i < n, seq([produce(p, start + i) for p in producers]), None)
    prologue = tirx.For(i, 0, stages - 1, tirx.ForKind.UNROLLED, seq([issue, extern("tl::cp_async_commit")]))
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
            body.append(tirx.IfThenElse(ahead < start + n, seq(run), None))
            run = []
        if j == last_producer:
            body.append(extern("tl::cp_async_commit"))
    main = tirx.For(k, loop.min, n, tirx.ForKind.SERIAL, seq(body), span=loop.span)
    return seq([prologue, main, intrinsics.CP_ASYNC_WAIT.stmt({"pending": 0})])


def inject_cp_async_pipelines(func: tirx.PrimFunc, options: CompileOptions = DEFAULT_OPTIONS) -> tirx.PrimFunc:
    def visit(loop, stages, kernel, new_tiles):
        form, _ = schedule.form_of(loop)
        if form != schedule.CP_ASYNC:
            return None
        plan = schedule.consumer_order(schedule.schedule(loop), form, stages)
        versions = schedule.multi_buffer(plan, stages)
        new_tiles.update(versions)
        return _build(loop, stages, plan, versions)

    return schedule.map_pipelined_loops(func, visit, options)

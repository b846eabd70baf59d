"""Pass `plan_pipelines`: decide the form of each `T.Pipelined(n, num_stages=s)` loop and record it
on the loop; the injection passes build it. A loop of one stage (s = 1, as many public examples write
on Hopper) takes only the warp-specialized form, one buffer per tile: the producer loads tile k + 1
of one operand while the consumers still work on another (K and V in attention); other forms leave
it a plain loop.

    cp_async  copies issued s - 1 iterations ahead as cp.async groups (`inject_cp_async_pipelines`)
    tma       TMA loads on mbarriers issued by thread 0 ahead of the loop (`inject_tma_pipelines`)
    tma_ws    TMA loads by a producer warpgroup of their own, the kernel's threads the consumers
              (`inject_tma_pipelines`, then `warp_specialize`), in 2-block clusters that multicast
              shared tiles with `tl.enable_tma_multicast`

Before:  for k in T.Pipelined(n, num_stages=3): copy(A[k], A_s); gemm(A_s, ...)
After:   for k in T.Pipelined(n, num_stages=3, annotations={"tl.pipeline_form": "tma_ws"}): (same body)

TMA needs a target that has it (`has_tma`), copies whose boxes and shared layouts the TMA unit can
do, not `tl.disable_tma_lower`, and a loop outside thread branches (one thread issues TMA loads; in
`if tx >= n:` the branch's threads issue cp.async copies and wait on named barriers); a producer
warpgroup needs whole warpgroups, room for 128 more threads, a loop whose bounds and copy
coordinates the consumers do not compute, no other warp-specialized loop in the kernel, and not
`tl.disable_warp_specialized`; a loop inside another loop takes TMA only with one. Why a loop does
not take a form is in the debug log (`pipelining/checks.py`).

A body that is one `if c:` around the loop's statements (a block-sparse GEMM's `if mask[k]:`) is
written as each statement under `if c:` when c reads only tensors the kernel does not write
(`schedule.distribute_guard`): its copies are then issued ahead, each under the condition of its
own iteration. On sm_90a they are TMA loads when every reader of a tile shares its load's condition:
a skipped load still arrives on its stage's barrier (`pipelining/tma.py`), without bytes.

Requires: tile ops as parsed, TMA copies outside loops made (`lower_tma_copies`: which tiles only
TMA writes), gemm instructions selected (the layouts TMA must write). Guarantees: IR unchanged but
the annotations and guards written per statement; a UserError at the loop for a schedule that
cannot be built (a shared tile written by two copies or by a consumer, `order`/`stage` lists that
do not fit the loop).
"""

from __future__ import annotations

import logging

from tvm import tirx

from tilelang.options import DEFAULT_OPTIONS, CompileOptions
from tilelang.transform.common import collect
from tilelang.transform.pipelining import checks, schedule
from tilelang.utils.target import has_tma

logger = logging.getLogger("tilelang")


def _form(loop, plan, kernel, stages: int) -> tuple:
    """(form, cluster) of a loop with producers; (None, None) for a one-stage loop left plain."""
    name = loop.loop_var.name
    reason = checks.why_not(loop, plan.producers, kernel)
    no_ws = reason or checks.why_not_specialized(loop, plan.producers, kernel)
    reason = reason or checks.why_not_nested(kernel, no_ws)
    if stages < 2 and no_ws is not None:
        # One buffer per tile: only a producer warpgroup overlaps anything (the next K tile's load
        # with this iteration's softmax and P·V); cp.async or TMA from the consumers would not.
        logger.debug("pipelined loop '%s': one stage without a producer warpgroup, a plain loop (%s)", name, no_ws)
        return None, None
    if any(plan.stage_of) and (no_ws is not None or max(plan.stage_of) > 1):
        why = no_ws if no_ws is not None else "consumer stages beyond 1"
        logger.debug("pipelined loop '%s': consumers in program order, one stage (%s)", name, why)
    if reason is not None:
        if has_tma(kernel.target):
            logger.debug("pipelined loop '%s': cp.async instead of TMA (%s)", name, reason)
        return schedule.CP_ASYNC, None
    if no_ws is not None:
        logger.debug("pipelined loop '%s': TMA without warp specialization (%s)", name, no_ws)
        return schedule.TMA, None
    kernel.specialized.append(loop)
    return schedule.TMA_WS, checks.cluster_plan(loop, plan.producers, kernel)


def _nested_loads(body) -> bool:
    """Whether `body` has a global-to-shared tile copy below its top level."""
    return any(checks.load_of(stmt) is not None for stmt in collect(body, tirx.Evaluate))


def plan_pipelines(func: tirx.PrimFunc, options: CompileOptions = DEFAULT_OPTIONS) -> tirx.PrimFunc:
    def visit(loop, stages, kernel, new_tiles):
        loop = schedule.distribute_guard(loop, kernel.func)
        plan = schedule.schedule(loop)
        if not plan.producers:
            if stages > 1 and _nested_loads(loop.body):
                logger.info(
                    "pipelined loop '%s': its global-to-shared copies sit inside inner loops or conditions, so "
                    "none is issued ahead (num_stages=%d has no effect); write each tile's copy at the top "
                    "level of the loop body to pipeline it",
                    loop.loop_var.name,
                    stages,
                )
            return None
        form, cluster = _form(loop, plan, kernel, stages)
        return schedule.with_form(loop, form, cluster) if form is not None else None

    return schedule.map_pipelined_loops(func, visit, options)

"""Pass `inject_tma_pipelines`: the pipelined loops `plan_pipelines` gave a TMA form (sm_90a).

Each tile a producer copies gets one buffer and one "full" mbarrier per stage; the copies become
TMA loads completing on those barriers (`pipelining/tma.py`):

    tma      thread 0 issues the loads s - 1 iterations ahead; a block barrier at the top of each
             iteration frees the stage the loads overwrite
    tma_ws   a `tl.ws` region: barrier initialization, a producer loop (loads, each stage refilled
             once the consumers freed it on its "empty" barrier) and the consumers' loop
             (`pipelining/consumer_loop.py`: consumer stages one iteration apart; each statement
             marked with its consumer stage and each stage release marked, for `place_wgmma_waits`,
             which runs next); `warp_specialize` gives the producer its warpgroup after lowering.
             In 2-block clusters (`tl.pipeline_cluster`) the multicast copies load half their
             boxes into both blocks, and the kernel records its clusters (the `cluster_dims`
             intrinsic).

Requires: `plan_pipelines`, a target with TMA. Guarantees: no loop of a TMA form is left; the
multi-buffered tiles are used only inside their loop; a `tl.ws_consumer` region carries the marks
of `pipelining/marks.py`, which only `place_wgmma_waits` may see.
"""

from __future__ import annotations

from tvm import tirx

from tilelang.options import DEFAULT_OPTIONS, CompileOptions
from tilelang.transform.pipelining import schedule, tma
from tilelang.transform.pipelining.schedule import versioned


def inject_tma_pipelines(func: tirx.PrimFunc, options: CompileOptions = DEFAULT_OPTIONS) -> tirx.PrimFunc:
    def visit(loop, stages, kernel, new_tiles):
        form, cluster = schedule.form_of(loop)
        if form not in (schedule.TMA, schedule.TMA_WS):
            return None
        plan = schedule.consumer_order(schedule.schedule(loop), form, stages)
        versions = schedule.multi_buffer(plan, stages)
        new_tiles.update(versions)

        def at_stage(stmt, stage):
            return versioned(stmt, versions, stage)

        staged = list(versions.values())
        return tma.build(loop, stages, plan, at_stage, staged, kernel, form == schedule.TMA_WS, cluster)

    return schedule.map_pipelined_loops(func, visit, options)

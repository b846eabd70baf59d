"""Helpers of the pipelining passes (none of these modules is a pass):

    schedule       a T.Pipelined loop's statements in stages, multi-buffered tiles, the walk over a
                   kernel's pipelined loops, the form annotations `plan_pipelines` records
    checks         whether a loop can take TMA, a producer warpgroup, 2-block clusters (analysis)
    tma            the Hopper forms: barriers, TMA loads, the producer and consumer loops
    consumer_loop  the consumers' loop of a warp-specialized pipeline (consumer stages, stage releases)
    marks          what that loop leaves for `place_wgmma_waits`: each statement's consumer stage,
                   where each stage is released
    wgmma_waits    where the waits of asynchronous wgmma gemms go in a straight-line run (analysis)

The passes are `plan_pipelines`, `inject_cp_async_pipelines`, `inject_tma_pipelines`,
`place_wgmma_waits`, `warp_specialize` and `set_register_budgets` (tilelang/transform/, in that
order in the pass list).
"""

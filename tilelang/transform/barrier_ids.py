"""Named barriers (`bar.sync id, threads`): which id serves what. Every pass that places a named
barrier takes its id from here, and the device templates that use one name this table.

A block has 16 hardware barriers:

    0       __syncthreads: every thread of the block
    1       the consumer threads of a warp-specialized kernel (`consumer_barriers`)
    2, 3    the two consumer warpgroups' turns at the tensor cores: warpgroup w waits on 2 + w
            (`pipelining/consumer_loop.py` places the calls; `src/tl_templates/cuda/tma.h` pingpong_* use the ids,
            as its TL_PINGPONG_BARRIER, checked against this table by the codegen tests)
    4 - 15  barriers inside thread branches, one per distinct range of threads
            (`sync_thread_branches`)
"""

from __future__ import annotations

BLOCK = 0
CONSUMERS = 1
PINGPONG = (2, 3)
THREAD_BRANCHES = range(4, 16)

"""Analyses of lowered kernels: they read the IR `lower()` produces and report, never rewrite it.

- `barrier_protocol`: runs a kernel's device IR on the CPU, warp by warp, and reports deadlocks,
  mbarrier phases passed out of turn, stages refilled while read and shared-memory races between
  warps. A debug check for warp-specialized kernels: pass config `tl.check_barrier_protocol` or
  `TILELANG_CHECK_BARRIER_PROTOCOL=1` runs it inside `lower()`. Its parts: `warp_agent` (one warp
  walking the IR), `block_state` (barriers and vector clocks of a block), `block_values` (index
  arithmetic for one block).
"""

from tilelang.analysis.barrier_protocol import (
    ProtocolError,
    barrier_protocol_problems,
    check_barrier_protocol,
    kernel_problems,
    run_block,
    run_cluster,
)

__all__ = [
    "ProtocolError",
    "barrier_protocol_problems",
    "check_barrier_protocol",
    "kernel_problems",
    "run_block",
    "run_cluster",
]

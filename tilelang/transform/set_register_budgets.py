"""Pass `set_register_budgets`: in a warp-specialized kernel the producer warpgroup gives registers
back and the consumer warpgroups take them (`setmaxnreg`, sm_90a).

Before:  tl.ws_producer_branch { producer }     tl.ws_consumer_branch (C threads) { consumers }
After:   tl.ws_producer_branch { setmaxnreg_dec<40>; producer }
         tl.ws_consumer_branch { setmaxnreg_inc<232>; consumers }            (C = 256)

The producer only issues TMA loads: it keeps 40 registers (24 beside three or more consumer
warpgroups); the consumers share the rest of the 64K register file, up to 240 each, a multiple of
8. Every warpgroup of the block asks, so the counts add up to at most what the block is launched
with (`check_register_budget` checks the user's own `T.set_max_nreg` the same way).

Requires: `warp_specialize` (the two sides). Guarantees: each side starts with its setmaxnreg.
"""

from __future__ import annotations

import tvm_ffi
from tvm import tirx

from tilelang import intrinsics
from tilelang.transform.warp_specialize import CONSUMER_BRANCH, PRODUCER_BRANCH
from tilelang.utils.ir import seq

REGISTER_FILE = 65536
WARPGROUP = 128


def register_budgets(consumer_threads: int) -> tuple[int, int]:
    """(producer, consumer) registers per thread after setmaxnreg, within the register file."""
    groups = consumer_threads // WARPGROUP
    producer = 24 if groups >= 3 else 40
    consumer = min(240, ((REGISTER_FILE // WARPGROUP - producer) // groups) // 8 * 8)
    return producer, consumer


def set_register_budgets(func: tirx.PrimFunc) -> tirx.PrimFunc:
    def on_attr(attr):
        if attr.attr_key not in (PRODUCER_BRANCH, CONSUMER_BRANCH):
            return attr
        producer, consumer = register_budgets(int(attr.value))
        if attr.attr_key == PRODUCER_BRANCH:
            ask = intrinsics.SETMAXNREG_DEC.stmt({"registers": producer})
        else:
            ask = intrinsics.SETMAXNREG_INC.stmt({"registers": consumer})
        return tirx.AttrStmt(attr.node, attr.attr_key, attr.value, seq([ask, attr.body]), span=attr.span)

    body = tvm_ffi.structural_map(func.body, [(tirx.AttrStmt, on_attr)])
    return func if body.same_as(func.body) else func.with_body(body)

"""Pass `set_register_budgets`: in a warp-specialized kernel the producer warpgroup gives registers
back and the consumer warpgroups take them (`setmaxnreg`, sm_90a).

Before:  tl.ws_producer_branch { producer }     tl.ws_consumer_branch (C threads) { consumers }
After:   tl.ws_producer_branch { setmaxnreg_dec<24>; producer }
         tl.ws_consumer_branch { setmaxnreg_inc<240>; consumers }            (C = 256)

The producer only issues TMA loads: it keeps 24 registers (40 beside a single consumer warpgroup,
which gets 240 either way); the consumers share the rest of the 64K register file, up to 240 each,
a multiple of 8. Every warpgroup of the block asks, so the counts add up to at most what the block is launched
with (`check_register_budget` checks the user's own `T.set_max_nreg` the same way).

The kernel's register hints (`collect_register_hints`, attribute `tl.register_hints`) change this:
T.annotate_producer_reg_dealloc(n) / T.annotate_consumer_reg_alloc(n) set a side's count (the
other keeps its own), T.no_set_max_nreg / T.disable_warp_group_reg_alloc sets none. Hinted counts
that do not fit in the block's registers are a UserError at the hint (a raising warpgroup would
wait forever for registers nobody gives back). The attribute is removed here.

Requires: `warp_specialize` (the two sides). Guarantees: each side starts with its setmaxnreg,
unless the kernel says not to.
"""

from __future__ import annotations

import tvm_ffi
from tvm import tirx

from tilelang import intrinsics
from tilelang.errors import UserError
from tilelang.log import hint_once
from tilelang.transform.check_register_budget import launch_count
from tilelang.transform.collect_register_hints import REGISTER_HINTS
from tilelang.transform.warp_specialize import CONSUMER_BRANCH, PRODUCER_BRANCH
from tilelang.utils.ir import seq

REGISTER_FILE = 65536
WARPGROUP = 128
_HINT_NAMES = {
    "producer": "T.annotate_producer_reg_dealloc",
    "consumer": "T.annotate_consumer_reg_alloc",
    "none": "T.no_set_max_nreg",
}


def register_budgets(consumer_threads: int) -> tuple[int, int]:
    """(producer, consumer) registers per thread after setmaxnreg, within the register file."""
    groups = consumer_threads // WARPGROUP
    producer = 24 if groups >= 2 else 40  # (two consumers: 24 + 2 x 240, as the public TileLang)
    # What the block is launched with, not the whole file: 640 threads get 96 registers each (65536 /
    # 640 rounded down to a multiple of 8), so four consumer warpgroups beside a producer at 24 take
    # 112, not the 120 a 64K split would give (setmaxnreg would then ask for more than the block has).
    pool = (groups + 1) * launch_count(consumer_threads + WARPGROUP)
    consumer = min(240, ((pool - producer) // groups) // 8 * 8)
    return producer, consumer


def _hinted_budgets(consumer_threads: int, hints: dict) -> tuple[int, int]:
    """`register_budgets` with the kernel's hinted counts, checked against the block's registers."""
    producer, consumer = register_budgets(consumer_threads)
    if "producer" in hints:
        producer = int(hints["producer"][0])
    if "consumer" in hints:
        consumer = int(hints["consumer"][0])
    threads = consumer_threads + WARPGROUP
    groups, have = consumer_threads // WARPGROUP, launch_count(threads)
    where = "".join(f"\n{hints[r][1]}" for r in ("producer", "consumer") if r in hints and str(hints[r][1]))
    if producer > have:
        raise UserError(
            f"{_HINT_NAMES['producer']}({producer}): the producer warpgroup would lower its registers to "
            f"{producer}, but this warp-specialized block of {threads} threads is launched with at most {have} "
            f"per thread; hint at most {have}{where}"
        )
    if producer + groups * consumer > (groups + 1) * have:
        raise UserError(
            f"register hints: the producer at {producer} and {groups} consumer warpgroup(s) at {consumer} registers "
            f"per thread need {producer + groups * consumer}, more than the {(groups + 1) * have} "
            f"({groups + 1} x {have}) this warp-specialized block of {threads} threads is launched with; the "
            f"consumers would wait forever. Lower the counts (e.g. consumers at "
            f"{((groups + 1) * have - producer) // groups // 8 * 8}){where}"
        )
    return producer, consumer


def set_register_budgets(func: tirx.PrimFunc) -> tirx.PrimFunc:
    hints = dict(func.attrs[REGISTER_HINTS]) if func.attrs is not None and REGISTER_HINTS in func.attrs else {}
    if hints:
        func = func.without_attr(REGISTER_HINTS)
    sides = []

    def on_attr(attr):
        if attr.attr_key not in (PRODUCER_BRANCH, CONSUMER_BRANCH):
            return attr
        sides.append(attr)
        if "none" in hints:
            return attr
        producer, consumer = _hinted_budgets(int(attr.value), hints)
        if attr.attr_key == PRODUCER_BRANCH:
            ask = intrinsics.SETMAXNREG_DEC.stmt({"registers": producer})
        else:
            ask = intrinsics.SETMAXNREG_INC.stmt({"registers": consumer})
        return tirx.AttrStmt(attr.node, attr.attr_key, attr.value, seq([ask, attr.body]), span=attr.span)

    body = tvm_ffi.structural_map(func.body, [(tirx.AttrStmt, on_attr)])
    if hints and not sides:
        names = ", ".join(_HINT_NAMES[r] for r in hints)
        hint_once(
            f"register_hints.{names}",
            f"{names}: this kernel has no warp specialization built by tilelang (a T.Pipelined loop of TMA loads "
            "and wgmma gemms on sm_90a), so the hint has no effect; a role written by hand sets its registers "
            "with T.set_max_nreg",
        )
    return func if body.same_as(func.body) else func.with_body(body)

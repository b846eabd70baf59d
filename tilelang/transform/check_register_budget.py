"""Check `check_register_budget`: the registers a kernel's `T.set_max_nreg` calls ask for, against
what the block has.

`setmaxnreg` moves registers between the warpgroups of one block: a warpgroup lowering its count
gives registers back, one raising it waits until enough are free. The block is launched with one
count for every thread (the register file's 65536 over its threads, a multiple of 8), and the
counts the warpgroups ask for must fit in what the block was launched with: asking for more makes
the raising warpgroup wait forever, a hang with no error. A count is asked for by a whole
warpgroup (PTX runs it per warpgroup; a part of one would leave the rest at the old count).

Found by running: MLA decode with warpgroups at 240 + 240 + 32 registers in a 384-thread block
(launched with 168 each: 504 in all) hung on the H200; 240 + 240 + 24 runs.

Requires: the kernel as traced (the thread branches as the user wrote them). Guarantees: IR
unchanged; a UserError at a `T.set_max_nreg` call that does not fit. (The budgets
`warp_specialize` sets itself fit by construction.)
"""

from __future__ import annotations

from tvm import tirx

from tilelang import intrinsics
from tilelang.errors import at_span
from tilelang.transform.common import Scope, is_innermost_thread_extent, mutate_with_scope

REGISTER_FILE = 65536
WARPGROUP = 128


def launch_count(threads: int) -> int:
    """Registers per thread a block of `threads` threads is launched with at most."""
    return min(255, REGISTER_FILE // threads) // 8 * 8


class RegisterBudget:
    """The `T.set_max_nreg` calls of one kernel, with the threads that run each."""

    def __init__(self):
        self.asks = []  # (first thread, number of threads, registers, span)
        self.threads = 0  # the block's

    def note(self, stmt, first: int, count: int, threads: int):
        """Record statement `stmt` run by threads [first, first + count) of a `threads`-thread block,
        when it is a `setmaxnreg`."""
        intrinsic, span = intrinsics.lookup(stmt), stmt.span
        if intrinsic not in intrinsics.SETMAXNREGS:
            return
        if first % WARPGROUP or count % WARPGROUP:
            raise at_span(
                f"T.set_max_nreg runs per warpgroup (128 threads), here on threads {first}..{first + count - 1}: "
                "put it where whole warpgroups run (`if tx < 128:`, `elif tx < 256:`, ...)",
                span,
            )
        registers = intrinsic.param(stmt, "registers")
        if intrinsic is intrinsics.SETMAXNREG_DEC and registers > launch_count(threads):
            # ptxas refuses it (C7406); below that, a lowering above the count ptxas picked runs
            # (seen on the H200: 64 and 160 in a 384-thread kernel launched with far fewer).
            raise at_span(
                f"T.set_max_nreg({registers}, 0) lowers a warpgroup's registers to {registers}, but a "
                f"{threads}-thread block is launched with at most {launch_count(threads)} per thread: "
                f"ask for at most {launch_count(threads)} (a producer usually gives back down to 24-40)",
                span,
            )
        self.asks.append((first, count, registers, span))
        self.threads = threads

    def check(self):
        """Raise when every warpgroup of the block sets its count and the counts add up to more
        registers than the block is launched with."""
        threads = self.threads
        if not self.asks:
            return
        per_group = {}
        for first, count, registers, span in self.asks:
            for group in range(first // WARPGROUP, (first + count) // WARPGROUP):
                per_group.setdefault(group, (registers, span))
        groups = threads // WARPGROUP
        if threads % WARPGROUP or len(per_group) < groups:
            return  # a warpgroup keeps the count ptxas gives it: nothing known to add up
        asked = [per_group[g][0] for g in range(groups)]
        have = launch_count(threads)
        if sum(asked) > groups * have:
            raise at_span(
                f"T.set_max_nreg: the warpgroups ask for {' + '.join(map(str, asked))} = {sum(asked)} registers "
                f"per thread, more than the {groups * have} ({groups} x {have}) a {threads}-thread block is "
                "launched with; the warpgroup raising its count would wait forever. Lower a count "
                f"(e.g. the producer's to 24, or the others' to fit {groups * have})",
                max((per_group[g] for g in range(groups)), key=lambda a: a[0])[1],
            )


def check_register_budget(func: tirx.PrimFunc) -> tirx.PrimFunc:
    scope = Scope()
    budget = [RegisterBudget()]

    def on_eval(stmt, recurse):
        threads_here = scope.thread_var()[1] if scope.threads else 0
        budget[0].note(stmt, scope.thread_offset(), threads_here, scope.block_thread()[1])
        return stmt

    def on_attr(stmt, recurse):
        if not is_innermost_thread_extent(stmt):
            return recurse(stmt)
        outer, budget[0] = budget[0], RegisterBudget()  # one budget per kernel
        recurse(stmt)
        budget[0].check()
        budget[0] = outer
        return stmt

    mutate_with_scope(func.body, scope, {tirx.Evaluate: on_eval, tirx.AttrStmt: on_attr})
    return func

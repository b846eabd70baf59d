"""The consumers' side of a warp-specialized Hopper pipeline (built for `pipelining/tma.py`).

Consumers in stage 1 of `T.Pipelined(..., stage=...)` work one iteration behind those in stage 0:

    if n > 0: stage 0 of iteration 0                       # prologue
    for i in range(1, n): stage 0 of i, stage 1 of i - 1   # in the user's `order`
    if n > 0: stage 1 of iteration n - 1                   # epilogue

(without stage 1: one loop over the body). Each iteration frees the stage of the tiles it read
last, on their "empty" barrier: tiles read by stage c of iteration i - c. The wgmma gemms run
asynchronously with the waits `wgmma_waits` places; when that leaves gemms reading a stage still
running at the end of the body, the stage before is freed instead and the gemms run on into the
next iteration (a GEMM's k-loop: one wgmma group in flight), when a stage of loads still lies
ahead then; with fewer stages the body waits for them. (A stage freed one iteration late, with
2 stages, is loaded again only once the body that needs it has begun: measured on MLA decode,
async P·V running on was 10% slower than waiting for it at the end of the body.)

Two consumer warpgroups that each own half the rows of every gemm take turns issuing their gemms
(FlashAttention-3's ping-pong; `tma.h` pingpong_*), so one's softmax runs beside the other's gemms.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from tvm import tirx

from tilelang.op import gemm as gemm_op
from tilelang.op.gemm import selection
from tilelang.op.gemm import wgmma as gemm_wgmma
from tilelang.transform.pipelining import wgmma_waits
from tilelang.utils.ir import extern, seq

if TYPE_CHECKING:
    from tilelang.transform.pipelining.checks import Kernel


@dataclass
class Empty:
    """One "empty" barrier per stage for the tiles the consumers free together."""

    barrier: object
    depth: int  # the consumer stage that reads the tiles last
    staged: list  # the tiles' multi-buffered buffers
    tiles: list  # the tiles as the loop body names them


def barrier(buffer, index):
    """The address of barrier `index` of a barrier array."""
    return tirx.address_of(tirx.BufferLoad(buffer, [index]))


def build(loop, i, stages, consumers, consumer_items, empties, staged, kernel, counted=None):
    """The consumers' side of a warp-specialized pipeline. With consumers in stage 1, a prologue
    runs stage 0 of iteration 0 and an epilogue stage 1 of the last iteration, around a loop from 1.
    wgmma gemms run asynchronously with the waits `wgmma_waits` places; each iteration frees the
    oldest stage nothing reads any more. A loop inside another loop passes `counted(it)`, iteration
    `it` as the barriers count it (earlier runs included): it runs again, so after each run the
    stages its last iterations used are freed too, and the producer can fill them for the next."""
    nested = counted is not None
    counted = counted or (lambda it: it)
    n, S = loop.extent, tirx.const(stages, "int32")
    tiles = staged + list(kernel.tma_tiles)

    def flags(st, wg_wait):
        return gemm_flags(st, tiles, wg_wait)

    # Gemms the user made asynchronous (wg_wait != 0) keep the user's waits.
    manual = any(gemm_op.is_gemm(st) and gemm_op.Gemm(st.value).wg_wait for st, _ in consumers)
    depth = max(c for _, c in consumers)

    def run(items, flight=()):
        w = wgmma_waits.Waits(kernel, flags, flight)
        out = []
        for st, key, offset in items:
            out += [flags(st, None)] if manual or key < 0 else w.statement(st, key, offset)
        return out, w

    def free(e, iteration, guard=None):
        """Arrive on `e`'s barrier of `iteration` (one arrival per consumer warp)."""
        name = "tl::mbarrier_arrive_warp" if kernel.cluster is None else "tl::mbarrier_arrive_cluster_warp"
        arrive = extern(name, barrier(e.barrier, tirx.floormod(counted(iteration), S)))
        return [tirx.IfThenElse(guard, arrive, None) if guard is not None else arrive]

    def steady(flight):
        out, w = run(consumer_items(i), flight)
        deferred = []
        for e in empties:
            # Nothing after this body reads `e`'s tiles of iteration i - e.depth. When gemms reading
            # them still run, free the stage before instead (when a stage of loads stays ahead of
            # the body): they run on.
            if not manual and w.release_needs_wait(-e.depth, e.staged) and stages >= e.depth + 3:
                deferred.append(e)
                out += w.release(-e.depth - 1, e.staged) + free(e, i - e.depth - 1, i >= e.depth + 1)
            else:
                out += ([] if manual else w.release(-e.depth, e.staged)) + free(e, i - e.depth)
        return out, w, deferred

    flight = []
    for _ in range(4):
        out, w, deferred = steady(flight)
        if wgmma_waits.signature(w.shifted()) == wgmma_waits.signature(flight):
            break
        flight = w.shifted()
    else:  # no steady state: every iteration starts with nothing in flight
        out, w, deferred = steady([])
        out += w.drain()
    # (Not across runs of a nested loop: the turns' named barriers would carry over between runs.)
    turns = not manual and not nested and _take_turns(consumers, kernel)

    def finish(stmts):
        stmts = wgmma_waits.fold(stmts, flags)
        return seq(_in_turn(stmts) if turns else stmts)

    body = tirx.For(i, depth, n - depth, tirx.ForKind.SERIAL, finish(out), span=loop.span)
    parts = [body] + w.drain()
    if depth:
        # The prologue frees iteration 0 of the tiles only stage 0 reads, unless the loop frees each
        # iteration one late (it then frees iteration 0 itself).
        zero = tirx.const(0, "int32")
        pro, wp = run(consumer_items(zero, stage_filter=0))
        pro += wp.drain() + [st for e in empties if e.depth == 0 and e not in deferred for st in free(e, zero)]
        epi, we = run(consumer_items(n, stage_filter=1))
        parts = (
            [tirx.IfThenElse(n > 0, finish(pro), None)]
            + parts
            + [tirx.IfThenElse(n > 0, finish(epi + we.drain()), None)]
        )
    if nested:
        # Iterations the run has not freed: the last e.depth (read by later stages), one more when
        # the loop frees each iteration one late. Everything has been waited for by now.
        for e in empties:
            late = e.depth + (1 if e in deferred else 0)
            for j in range(late, 0, -1):
                parts += free(e, n - j, n - j >= 0)
    if turns:
        parts = [extern("tl::pingpong_init")] + parts
    return seq(parts)


def _take_turns(consumers, kernel: Kernel) -> bool:
    """Whether the two consumer warpgroups should take turns issuing their gemms: each owns half of
    the rows of every wgmma gemm, and the loop also has other work (a softmax) to overlap with the
    other's gemms. `consumer_barriers` drops the turns again if the loop needs a barrier over both."""
    if kernel.threads != 256:
        return False
    gemms = [st for st, _ in consumers if gemm_op.is_gemm(st)]
    plans = [gemm_op.Gemm(st.value).plan for st in gemms]
    others = [st for st, _ in consumers if not gemm_op.is_gemm(st)]
    return bool(gemms) and bool(others) and all(isinstance(p, gemm_wgmma.Plan) and p.wg_m == 2 for p in plans)


def _in_turn(stmts):
    """`stmts` with its gemms issued in this warpgroup's turn (tma.h, pingpong_*)."""
    at = [j for j, st in enumerate(stmts) if gemm_op.is_gemm(st)]
    if not at:
        return stmts
    a, b = at[0], at[-1] + 1
    return stmts[:a] + [extern("tl::pingpong_sync")] + stmts[a:b] + [extern("tl::pingpong_arrive")] + stmts[b:]


def gemm_flags(stmt, tiles, wg_wait: int | None = None):
    """A gemm statement with `wg_wait` (None: unchanged) and, when every shared operand is a tile
    only the TMA unit writes (`tiles`), marked as needing no proxy fence (registers need none).
    Other statements are returned unchanged."""
    if not gemm_op.is_gemm(stmt):
        return stmt
    call = stmt.value
    g = gemm_op.Gemm(call)
    shared = [r.buffer for r in (g.a, g.b) if r.buffer.scope().startswith("shared")]
    tma_only = all(any(b.same_as(t) for t in tiles) for b in shared)
    pending = g.wg_wait if wg_wait is None else wg_wait
    own = list(call.args[:7]) + [tirx.const(pending, "int32"), tirx.const(int(tma_only), "int32")]
    return tirx.Evaluate(selection.with_own_args(call, own), span=stmt.span)

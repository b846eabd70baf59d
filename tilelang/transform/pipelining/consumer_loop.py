"""The consumers' side of a warp-specialized Hopper pipeline (built for `pipelining/tma.py`).

Consumers in stage 1 of `T.Pipelined(..., stage=...)` work one iteration behind those in stage 0:

    if n > 0: stage 0 of iteration 0                       # prologue
    for i in range(1, n): stage 0 of i, stage 1 of i - 1   # in the user's `order`
    if n > 0: stage 1 of iteration n - 1                   # epilogue

(without stage 1: one loop over the body). Each iteration frees the stage of the tiles it read
last, on their "empty" barrier: tiles read by stage c of iteration i - c, at the end of the body,
or (without stage 1) right after the statement that reads them last. The loop is left for
`place_wgmma_waits` with its statements marked by consumer stage and its stage releases marked
(`marks`): that pass runs the wgmma gemms asynchronously, and a release waits for the gemms still
reading its stage or, in the loop, frees the stage one iteration late so that they run on. The
releases around the loop are there for both schedules: the prologue frees iteration 0 only when
the loop frees each iteration on time; a loop inside another loop frees, after each run, the
stages its last iterations used (one more when it frees one late), so the producer can fill them
for the next run.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from tvm import tirx

from tilelang.layout.fragment import substitute
from tilelang.op import base
from tilelang.transform.pipelining import marks
from tilelang.transform.pipelining.marks import barrier  # noqa: F401  (lower_tma_copies uses it)
from tilelang.transform.pipelining.wgmma_waits import mma_of
from tilelang.utils.ir import collect, seq

if TYPE_CHECKING:
    from tilelang.transform.pipelining.checks import Kernel


@dataclass
class Empty:
    """One "empty" barrier per stage for the tiles the consumers free together."""

    barrier: object
    depth: int  # the consumer stage that reads the tiles last
    staged: list  # the tiles' multi-buffered buffers
    tiles: list  # the tiles as the loop body names them
    generic: bool = False  # the consumers read the tiles with ordinary loads, not only as wgmma operands
    after: int | None = None  # freed right after this consumer statement (its index), else at the body's end


def build(loop, i, stages, consumers, consumer_items, empties, staged, kernel: Kernel, runs=None):
    """The consumers' side of a warp-specialized pipeline. With consumers in stage 1, a prologue
    runs stage 0 of iteration 0 and an epilogue stage 1 of the last iteration, around a loop from 1.
    `consumer_items(it, stage)` gives the (statement, consumer stage) pairs run at body iteration
    `it` (stage None: the pipeline's own barrier waits). A loop inside another loop passes `runs`,
    the iterations its earlier runs did (the barriers count on from run to run)."""
    n = loop.extent
    tiles = staged + list(kernel.tma_tiles)
    depth = max(c for _, c in consumers)

    def marked(items):
        return [st if c is None else marks.at_stage(mma_flags(st, tiles), c) for st, c in items]

    def release(e, iteration, when=marks.ALWAYS):
        return marks.release(e, iteration, runs, stages, when, kernel.cluster is not None)

    body, k = [], 0
    for st, c in consumer_items(i):
        body += marked([(st, c)])
        if c is not None:  # a consumer statement (not a barrier wait): the tiles it read last are freed
            body += [release(e, i - e.depth) for e in empties if e.after == k]
            k += 1
    body += [release(e, i - e.depth) for e in empties if e.after is None]
    parts = [tirx.For(i, depth, n - depth, tirx.ForKind.SERIAL, seq(body), span=loop.span)]
    if depth:
        zero = tirx.const(0, "int32")
        pro = [_fresh_bindings(st) for st in marked(consumer_items(zero, stage_filter=0))]
        pro += [release(e, zero, marks.ON_TIME) for e in empties if e.depth == 0]
        epi = [_fresh_bindings(st) for st in marked(consumer_items(n, stage_filter=1))]
        parts = [tirx.IfThenElse(n > 0, seq(pro), None)] + parts + [tirx.IfThenElse(n > 0, seq(epi), None)]
    if runs is not None:
        # The iterations the run has not freed: the last e.depth (read by later stages), one more
        # when the loop frees each iteration one late.
        for e in empties:
            for j in range(e.depth + 1, 0, -1):
                when = marks.LATE if j == e.depth + 1 else marks.ALWAYS
                parts.append(tirx.IfThenElse(n - j >= 0, release(e, n - j, when), None))
    return seq(parts)


def _fresh_bindings(stmt):
    """`stmt` with a new variable for each name bound inside it (`q_idx = bx * 128 + i` in a
    T.Parallel body): the prologue and the epilogue repeat statements of the loop body, and TVM's
    passes need each variable bound once (its simplifier stops on one bound to two ranges)."""
    bound = [b.var for b in collect(stmt, tirx.Bind)]
    if not bound:
        return stmt
    return substitute(stmt, {v: tirx.Var(v.name, v.ty) for v in bound})


def mma_flags(stmt, tiles, wait: int | None = None):
    """A statement running on the tensor cores (`TileOp.mma`: a gemm) with `wait` (None:
    unchanged) and, when every shared operand is a tile only the TMA unit writes (`tiles`), marked
    as needing no proxy fence (registers need none). Other statements are returned unchanged."""
    m = mma_of(stmt)
    if m is None:
        return stmt
    tma_only = all(any(b.same_as(t) for t in tiles) for b in m.shared_operands)
    pending = m.wait if wait is None else wait
    return tirx.Evaluate(base.parse(stmt).with_wait(pending, tma_only), span=stmt.span)

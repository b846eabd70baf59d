"""What `inject_tma_pipelines` leaves in a warp-specialized consumer loop for `place_wgmma_waits`,
the pass right after it (nothing else sees these; `place_wgmma_waits` removes them all):

    tl.consumer_stage    AttrStmt (value c) around each statement of the loop body: it belongs to
                         consumer stage c, so it works on iteration i - c of the body's i
    tl.release_stage     a call where a stage of the pipeline is freed: "nothing after this point
                         reads the stage holding iteration `iteration` of these tiles; arrive on its
                         "empty" barrier once the gemms still reading it are complete" (after a proxy
                         fence when the consumers read the tiles with ordinary loads)

`place_wgmma_waits` decides whether each release waits for those gemms or, in the loop, frees the
stage one iteration late so that they run on (`when` says which of the releases around the loop
each schedule keeps; `Release.arrive` is the arrival itself).

Statements without a stage (the pipeline's waits on its "full" barriers) are the pipeline's own:
the wgmma waits leave them as they are.
"""

from __future__ import annotations

from dataclasses import dataclass

from tvm import ir, tirx

from tilelang.op import base
from tilelang.utils.ir import const_int, extern, i32, seq

CONSUMER_STAGE = "tl.consumer_stage"
RELEASE = "release_stage"  # the call `tl.release_stage(...)`

# Which schedule keeps a release outside the loop (a release inside the loop is kept by both: one
# iteration late it frees the iteration before, from the loop's second iteration on).
ALWAYS = 0
ON_TIME = 1  # only when the loop frees each iteration on time (a late loop frees it itself)
LATE = 2  # only when the loop frees each iteration one late (the last one it leaves)


def at_stage(stmt, stage: int) -> tirx.Stmt:
    """`stmt` marked as a statement of consumer stage `stage`."""
    return tirx.AttrStmt(i32(0), CONSUMER_STAGE, i32(stage), stmt)


def stage_of(stmt) -> tuple:
    """(the statement, its consumer stage) of a marked statement; (stmt, None) for any other."""
    if isinstance(stmt, tirx.AttrStmt) and stmt.attr_key == CONSUMER_STAGE:
        return stmt.body, const_int(stmt.value)
    return stmt, None


def barrier(buffer, index):
    """The address of barrier `index` of a barrier array."""
    return tirx.address_of(tirx.BufferLoad(buffer, [index]))


@dataclass(frozen=True)
class Release:
    """A parsed `tl.release_stage`."""

    barrier: object  # the "empty" barriers, one per stage
    iteration: object  # the iteration whose stage is freed, counted from 0 in this run of the loop
    runs: object  # iterations earlier runs of the loop did (a loop inside a loop), or None
    stages: int
    depth: int  # the consumer stage that reads the tiles last: the loop body frees iteration i - depth
    when: int  # ALWAYS, ON_TIME or LATE
    cluster: bool  # a 2-block cluster: arrive on both blocks' barrier
    tiles: tuple  # the stage's multi-buffered tiles
    generic: bool = False  # the consumers read the tiles through the generic proxy (see `arrive`)

    def arrive(self, iteration=None) -> tirx.Stmt:
        """The consumer warps' arrival freeing the stage of `iteration` (default: the marked one).

        When the consumers read the stage with ordinary loads (ldmatrix, ld.shared: the generic
        proxy) rather than only as wgmma operands, each thread first fences its reads against the
        async proxy: the producer's next TMA load into the stage is an async-proxy write, and an
        arrival alone does not order it after reads still in flight (ptxas issues the arrival right
        after a warp's ldmatrix instructions, before their results are used)."""
        it = self.iteration if iteration is None else iteration
        counted = it if self.runs is None else self.runs + it  # as the barriers count iterations
        name = "tl::mbarrier_arrive_cluster_warp" if self.cluster else "tl::mbarrier_arrive_warp"
        arrival = extern(name, barrier(self.barrier, tirx.floormod(counted, tirx.const(self.stages, "int32"))))
        return seq([extern("tl::fence_proxy_async_shared"), arrival]) if self.generic else arrival


def release(empty, iteration, runs, stages: int, when: int, cluster: bool) -> tirx.Stmt:
    """The mark freeing the stage of `iteration` of `empty`'s tiles (`consumer_loop.Empty`)."""

    def whole(buffer):
        return tirx.BufferRegion(buffer, [ir.Range.from_min_extent(0, n) for n in buffer.shape])

    args = [whole(empty.barrier), iteration, i32(0) if runs is None else runs]
    args += [i32(stages), i32(empty.depth), i32(when), i32(int(cluster)), i32(int(empty.generic))]
    args += [whole(t) for t in empty.staged]
    return tirx.Evaluate(base.make_call(RELEASE, args))


def parse_release(stmt) -> Release | None:
    """The release a statement marks, or None."""
    if not (isinstance(stmt, tirx.Evaluate) and base.is_tile_op(stmt.value, RELEASE)):
        return None
    args = stmt.value.args
    runs = None if const_int(args[2]) == 0 else args[2]
    tiles = tuple(r.source for r in args[8:])
    flags = (bool(const_int(args[6])), tiles, bool(const_int(args[7])))
    return Release(args[0].source, args[1], runs, *(const_int(a) for a in args[3:6]), *flags)

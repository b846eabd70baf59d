"""Pass `place_wgmma_waits`: the wgmma gemms of a warp-specialized consumer loop run asynchronously,
each statement waiting only for the gemms it depends on, and the stages of the pipeline are freed
once the gemms reading them are done (sm_90a).

Runs right after `inject_tma_pipelines`, which leaves the consumer loop with each statement marked
by its consumer stage and each stage release marked (`pipelining/marks.py`). A gemm is issued
without a wait and the tensor cores run it beside the statements that follow; a statement that
touches its accumulator, its A operand or the tiles it reads waits for it first
(`pipelining/wgmma_waits.py`). In the loop, the gemms still running at the end of the body are in
flight at the start of the next: the body is planned again from that state until it repeats.

Before (a GEMM's k-loop, 3 stages):        After:
    for i in range(n):                         for i in range(n):
        wait(A_full[i % 3]); ...                   wait(A_full[i % 3]); ...
        stage 0: gemm(A_s[i % 3], ..., C)          gemm(A_s[i % 3], ..., C, wg_wait=1)
        release_stage(k_empty, i)                  if 1 <= i: arrive(k_empty[(i - 1) % 3])
                                               wgmma_wait<0>(C)

A release waits for the gemms reading its stage; in the loop, when that would wait and a stage of
loads still lies ahead (3 stages or more past the consumer stage that reads the tiles), it frees the
stage one iteration late instead and the gemms run on into the next iteration (one wgmma group in
flight). The releases around the loop are kept by the schedule they are for (`marks`). Gemms the
user made asynchronous (`T.gemm(..., wg_wait=-1)`) keep the user's waits. The loop, and each run
before and after it (prologue, epilogue), ends with nothing in flight. When the two consumer
warpgroups each own half the rows of every gemm and the loop has more other work outside the span
from its first gemm to its last than inside it, they take turns issuing their gemms
(FlashAttention-3's ping-pong; `tma.h` pingpong_*), so that one's softmax runs beside the other's
gemms. (A stage freed one iteration late, with 2 stages, is loaded again only
once the body that needs it has begun: measured on MLA decode, async P·V running on was 10% slower
than waiting for it at the end of the body.)

Requires: `inject_tma_pipelines`; gemms still tile ops (their instructions selected). Guarantees:
no stage or release mark is left; every `tl.wgmma_wait` fences the fragments of the gemms it waits
for; code outside warp-specialized consumer loops is unchanged.
"""

from __future__ import annotations

from tvm import tirx

from tilelang.op import base
from tilelang.transform.common import Scope, collect, mutate_with_scope
from tilelang.transform.pipelining import marks, wgmma_waits
from tilelang.transform.pipelining.checks import tma_only_tiles
from tilelang.transform.pipelining.consumer_loop import mma_flags
from tilelang.transform.pipelining.tma import WS_CONSUMER, WS_REGION
from tilelang.transform.pipelining.wgmma_waits import mma_of
from tilelang.utils.ir import extern, seq, statements

_FIXED_POINT_ROUNDS = 4


def place_wgmma_waits(func: tirx.PrimFunc) -> tirx.PrimFunc:
    scope = Scope()
    tiles = tma_only_tiles(func.body)
    # A statement reading a view (T.reshape / T.view) of a gemm's accumulator reads the accumulator.
    aliases = [pair for op in map(base.parse, collect(func.body, tirx.Evaluate)) if op for pair in op.aliases()]

    def on_attr(node, recurse):
        if node.attr_key != WS_REGION:
            return recurse(node)
        thread = scope.threads["threadIdx.x"][0]
        loop = _ConsumerLoop(thread, int(node.value), tiles, aliases)
        parts = [
            tirx.AttrStmt(s.node, s.attr_key, s.value, loop.rewrite(s.body), span=s.span)
            if isinstance(s, tirx.AttrStmt) and s.attr_key == WS_CONSUMER
            else s
            for s in statements(node.body)
        ]
        return tirx.AttrStmt(node.node, node.attr_key, node.value, seq(parts), span=node.span)

    return func.with_body(mutate_with_scope(func.body, scope, {tirx.AttrStmt: on_attr}))


class _ConsumerLoop:
    """The consumers' side of one warp-specialized pipeline: the loop and the runs around it."""

    def __init__(self, thread, threads: int, tiles, aliases=()):
        self.thread, self.threads, self.tiles, self.aliases = thread, threads, tiles, aliases
        self.manual = self.turns = False
        self.late = []  # the "empty" barriers the loop frees one iteration late

    def flags(self, stmt, wg_wait):
        return mma_flags(stmt, self.tiles, wg_wait)

    def rewrite(self, stmt):
        """The consumer region's statements (a sequence holding the loop, perhaps inside another)."""
        stmts = statements(stmt)
        loop = next((s for s in stmts if isinstance(s, tirx.For)), None)
        if loop is None:
            return tirx.SeqStmt([self.rewrite(s) for s in stmts]) if isinstance(stmt, tirx.SeqStmt) else stmt
        new_loop, after = self._loop(loop)  # first: the runs around it keep the releases its schedule needs
        out = []
        for s in stmts:
            if s.same_as(loop):
                out += [new_loop] + after
            elif isinstance(s, tirx.IfThenElse) and s.else_case is None:
                run = self._run(statements(s.then_case))
                if run:
                    out.append(tirx.IfThenElse(s.condition, self._finish(run), None, span=s.span))
            else:
                out += self._run([s])
        return seq(([extern("tl::pingpong_init")] if self.turns else []) + out)

    def _loop(self, loop):
        """The loop with its waits (planned to a steady state) and the waits after it."""
        body = statements(loop.body)
        consumers = [st for st, c in map(marks.stage_of, body) if c is not None]
        # Gemms the user made asynchronous (wg_wait != 0) keep the user's waits.
        self.manual = any(mma_of(st) is not None and mma_of(st).wait for st in consumers)
        # (Not across runs of a loop inside a loop: the turns' named barriers would carry over.)
        runs_again = any(r is not None and r.runs is not None for r in map(marks.parse_release, body))
        self.turns = not self.manual and not runs_again and _take_turns(consumers, self.threads)
        flight = []
        for _ in range(_FIXED_POINT_ROUNDS):
            out, w = self._steady(loop, body, flight)
            if wgmma_waits.signature(w.shifted()) == wgmma_waits.signature(flight):
                break
            flight = w.shifted()
        else:  # no steady state: every iteration starts with nothing in flight
            out, w = self._steady(loop, body, [])
            out += w.drain()
        new = tirx.For(loop.loop_var, loop.min, loop.extent, loop.kind, self._finish(out), span=loop.span)
        return new, w.drain()

    def _steady(self, loop, body, flight):
        """One body of the loop planned from the groups in `flight`."""
        w = wgmma_waits.Waits(self.thread, self.threads, self.flags, flight, self.aliases)
        self.late = []
        out = []
        for key, st in enumerate(body):
            r = marks.parse_release(st)
            if r is not None:
                # Nothing after this body reads the tiles of iteration i - depth. When gemms reading
                # them still run, free the stage before instead (when a stage of loads stays ahead of
                # the body): they run on.
                if w.release_needs_wait(-r.depth, r.tiles) and r.stages >= r.depth + 3:
                    self.late.append(r.barrier)
                    guard = loop.loop_var >= r.depth + 1
                    out += w.release(-r.depth - 1, r.tiles) + [tirx.IfThenElse(guard, r.arrive(r.iteration - 1), None)]
                else:
                    out += w.release(-r.depth, r.tiles) + [r.arrive()]
                continue
            inner, stage = marks.stage_of(st)
            out += [inner] if stage is None or self.manual else w.statement(inner, key, -stage)
        return out, w

    def _run(self, stmts) -> list:
        """A straight-line run before or after the loop, from nothing in flight to nothing in flight:
        the wait for everything comes before its releases, which then wait for nothing."""
        w = wgmma_waits.Waits(self.thread, self.threads, self.flags, aliases=self.aliases)
        out, releases = [], []
        for key, st in enumerate(stmts):
            r = marks.parse_release(st)
            if r is not None:
                kept = r.when == marks.ALWAYS or (r.when == marks.LATE) == any(b.same_as(r.barrier) for b in self.late)
                releases += [r.arrive()] if kept else []
                continue
            inner, stage = marks.stage_of(st)
            out += [inner] if stage is None or self.manual else w.statement(inner, key, -stage)
        return out + w.drain() + releases

    def _finish(self, stmts):
        stmts = wgmma_waits.fold(stmts, self.flags)
        return seq(_in_turn(stmts) if self.turns else stmts)


def _take_turns(consumers, threads: int) -> bool:
    """Whether the two consumer warpgroups should take turns issuing their gemms: each owns half of
    the rows of every wgmma gemm, and the loop has more other work (a softmax) outside the turn,
    which runs from its first gemm to its last, than inside it: a warpgroup's work inside its turn
    does not overlap the other's gemms. (A plain attention loop, Q·Kᵀ, softmax, P·V, has its whole
    softmax inside: the warpgroups would run one after the other; with the stages split as
    FlashAttention-3 does, only the rescale of O lies between the gemms.) `consumer_barriers`
    drops the turns again if the loop needs a barrier over both."""
    if threads != 256:
        return False
    at = [j for j, st in enumerate(consumers) if mma_of(st) is not None]
    if not at or not all(mma_of(consumers[j]).asynchronous and mma_of(consumers[j]).row_warpgroups == 2 for j in at):
        return False
    inside = sum(mma_of(st) is None for st in consumers[at[0] : at[-1] + 1])
    outside = len(consumers) - len(at) - inside
    return outside > inside


def _in_turn(stmts):
    """`stmts` with its gemms issued in this warpgroup's turn (tma.h, pingpong_*)."""
    at = [j for j, st in enumerate(stmts) if mma_of(st) is not None]
    if not at:
        return stmts
    a, b = at[0], at[-1] + 1
    return stmts[:a] + [extern("tl::pingpong_sync")] + stmts[a:b] + [extern("tl::pingpong_arrive")] + stmts[b:]

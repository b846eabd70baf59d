"""Where the waits of asynchronous wgmma gemms go in one straight-line run of a warp-specialized
consumer loop (the analysis `place_wgmma_waits` plans each run and the loop's steady state with).

A wgmma gemm runs on the tensor cores after the thread issues it; `wgmma.wait_group N` waits until
at most N of the thread's groups are still running. Every wgmma gemm of the loop is issued without
a wait, and a statement waits only for the gemms whose registers or tiles it touches, so the tensor
cores work beside the statements in between (a softmax, the next iteration's barrier waits):

    gemm(Q_s, K_s, S)        # issued, runs on            in flight: [QK]
    rescale(O)                                           # touches neither S nor P
    gemm(P, V_s, O)          # issued, runs on            in flight: [QK, PV]
    wait<1>(S)               # before the first read of S: QK done, PV may run on
    softmax(S)
    wait<0>(P, O)            # before P is rewritten: the tensor cores may still be reading it
    P = S

Statement X waits for an in-flight gemm G when X reads or writes G's accumulator, writes G's A
operand (a fragment) or writes a shared tile G reads; a gemm on G's accumulator does not wait (the
tensor cores keep the order). Freeing a stage of the pipeline waits for the gemms that read it. The
wait is `wait<k>`, k the number of groups issued after the newest one waited for, and it fences the
fragments those gemms used (`op/wgmma_wait.py`); a wait right after the gemm it is for becomes the
gemm's own `wg_wait`.

Statements are asked through the tile-op protocol (`op/base.py`): `TileOp.mma` (a gemm's operands,
accumulator, whether it runs asynchronously) and `TileOp.writes` (an op that does not say counts as
writing every operand). The one op named is the wait it places (`op/wgmma_wait.py`).

Across the loop's back edge the gemms still in flight at the end of the body are in flight at its
start: the body is planned again from that state until the state repeats. The first iteration
starts with fewer groups in flight (a suffix of that state), for which every `wait<k>` still holds.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

from tvm import ir, tirx

from tilelang.op import base, wgmma_wait
from tilelang.transform.common import branch_ranges
from tilelang.utils.ir import collect, seq, statements


@dataclass(frozen=True)
class Group:
    """One asynchronous gemm in flight."""

    key: int  # which statement of the loop body issued it
    offset: int  # the iteration it belongs to, relative to the body's own (0, -1, ...)
    acc: object  # accumulator fragment
    a_regs: object  # A operand fragment, or None
    reads: tuple  # shared tiles it reads


def mma_of(stmt) -> base.Mma | None:
    """A statement's work on the tensor cores (`TileOp.mma`: a `T.gemm`), or None."""
    op = base.parse(stmt) if isinstance(stmt, tirx.Evaluate) else None
    return op.mma() if op is not None else None


def buffers_of(stmt, aliases=()):
    """(buffers `stmt` touches, buffers it writes), at tile-op level. `aliases`: the kernel's (view,
    source) pairs (T.reshape, T.view): touching a view touches its source (a score fragment read
    through its reshaped view reads the gemm's accumulator)."""
    touched, written = _buffers_of(stmt)

    def with_sources(bufs):
        return bufs + [src for view, src in aliases if _has(bufs, view)]

    return with_sources(touched), with_sources(written)


def _buffers_of(stmt):
    touched = [ld.source for ld in collect(stmt, ir.TensorLoad)] + [r.source for r in collect(stmt, ir.TensorRegion)]
    written = [st.buffer for st in collect(stmt, tirx.BufferStore)]
    for call in collect(stmt, ir.Call):
        if not base.is_tile_op(call):
            # A buffer passed whole to another call (an extern's pointer): read and written.
            written += [a for a in call.args if base.is_buffer(a)]
            continue
        op = base.parse(call)
        writes = op.writes() if op is not None else None
        if writes is None:  # an op that does not say what it writes: every operand written
            writes = [base.Region.from_ir(a).buffer for a in call.args if isinstance(a, ir.TensorRegion)]
        written += writes
    touched += written
    return touched, written


def _has(buffers, b) -> bool:
    return b is not None and any(x.same_as(b) for x in buffers)


class Waits:
    """Plans one straight-line run of statements of the `threads` threads whose index is `thread`,
    starting from the groups in `flight`."""

    def __init__(self, thread, threads: int, flags, flight=(), aliases=()):
        self.thread, self.threads = thread, threads
        self.flags = flags  # flags(mma statement, wait) -> the statement with that wait
        self.flight = list(flight)
        self.aliases = aliases  # the kernel's (view, source) pairs

    def async_mma(self, stmt):
        """The tensor-core work of `stmt` when it is a top-level op that may run asynchronously
        (a wgmma gemm)."""
        m = mma_of(stmt)
        return m if m is not None and m.asynchronous else None

    def _wait_for(self, conflicts) -> list:
        """The wait for the in-flight groups for which `conflicts(group)` holds (and all older)."""
        hits = [j for j, g in enumerate(self.flight) if conflicts(g)]
        if not hits:
            return []
        done, self.flight = self.flight[: hits[-1] + 1], self.flight[hits[-1] + 1 :]
        fences = []
        for g in done:
            for b in (g.acc, g.a_regs):
                if b is not None and not _has(fences, b):
                    fences.append(b)
        return [wgmma_wait.make(len(self.flight), fences)]

    def thread_branch(self, stmt):
        """The (then, else) thread ranges when `stmt` is a thread branch (`if tx < n:`, ...;
        `common.branch_ranges`), each planned as a run of its own."""
        if not isinstance(stmt, tirx.IfThenElse):
            return None
        ranges = branch_ranges(stmt.condition, self.thread, 0, self.threads)
        if ranges is None or (stmt.else_case is not None and ranges[1] is None):
            return None
        return ranges

    def _branch(self, stmt, ranges, key, offset) -> list:
        """A thread branch: each side's gemms run asynchronously inside it and are all waited for
        by its end (the other threads never issued them: a later `wait<k>` counts the same groups
        in every thread)."""
        sides = []
        for case, (lo, hi) in ((stmt.then_case, ranges[0]), (stmt.else_case, ranges[1])):
            if case is None:
                sides.append(None)
                continue
            inner = Waits(self.thread, hi - lo, self.flags, aliases=self.aliases)
            body = []
            for st in statements(case):
                body += inner.statement(st, key, offset)
            sides.append(seq(fold(body + inner.drain(), self.flags)))
        return [tirx.IfThenElse(stmt.condition, sides[0], sides[1], span=stmt.span)]

    def statement(self, stmt, key: int, offset: int = 0) -> list:
        g = self.async_mma(stmt)
        if g is None:
            touched, written = buffers_of(stmt, self.aliases)
            out = self._wait_for(
                lambda G: _has(touched, G.acc) or _has(written, G.a_regs) or any(_has(written, t) for t in G.reads)
            )
            ranges = self.thread_branch(stmt)
            return out + (self._branch(stmt, ranges, key, offset) if ranges is not None else [stmt])
        a_regs, acc = g.register_operand, g.accumulator.buffer
        out = self._wait_for(lambda G: _has([G.acc], a_regs) or _has([acc], G.a_regs))
        self.flight.append(Group(key, offset, acc, a_regs, g.shared_operands))
        return out + [self.flags(stmt, -1)]

    def _reads_stage(self, g, offset, tiles) -> bool:
        return g.offset <= offset and any(_has(tiles, t) for t in g.reads)

    def release_needs_wait(self, offset: int, tiles) -> bool:
        """Whether freeing the stage of multi-buffered `tiles` of iteration `offset` (relative to
        the body's) would wait for a group."""
        return any(self._reads_stage(g, offset, tiles) for g in self.flight)

    def release(self, offset: int, tiles) -> list:
        """The wait before freeing the stage of `tiles` of iteration `offset`."""
        return self._wait_for(lambda g: self._reads_stage(g, offset, tiles))

    def drain(self) -> list:
        return self._wait_for(lambda g: True)

    def shifted(self) -> list:
        """The groups in flight as the next iteration sees them."""
        return [replace(g, offset=g.offset - 1) for g in self.flight]


def signature(flight) -> list:
    return [(g.key, g.offset) for g in flight]


def fold(stmts, flags) -> list:
    """A wait right after the gemm it is for (fencing only that gemm's fragments) becomes the gemm's
    own `wg_wait`: the gemm template waits and fences its accumulator and A operand itself."""
    out = []
    for st in stmts:
        g = mma_of(out[-1]) if out else None
        if (
            g is not None
            and isinstance(st, tirx.Evaluate)
            and base.is_tile_op(st.value, wgmma_wait.NAME)
            and g.wait == -1
        ):
            prev = out[-1]
            own = [g.accumulator.buffer] + ([g.register_operand] if g.register_operand is not None else [])
            if all(_has(own, b) for b in wgmma_wait.fragments_of(st.value)):
                out[-1] = flags(prev, wgmma_wait.pending_of(st.value))
                continue
        out.append(st)
    return out

"""Pass `select_gemm_instructions`: each `T.gemm` gets its instruction (mma.sync or wgmma) and its
plan, decided once from the target, the threads of the gemm's scope and `tl.disable_wgmma`, and
recorded on the call (`op/gemm/selection.py`).

Before:  T.gemm(A_s, B_s, C_f)                                   (256 threads, sm_90a)
After:   T.gemm(A_s, B_s, C_f, ..., async_operands=0, 2, 2, 1, 3, 3)   # wgmma: 2 x 1 warpgroups,
                                                                       # 128-byte panels for A and B
Every later reader takes the plan from the call: the pipeline planner (which gemms run
asynchronously, the layouts TMA writes), layout inference (registers and operand swizzles),
lowering (the template called) and the descriptor alignment check.

A shared tile is stored in one layout, so every gemm reading it must read it in the same one. A
tile read by a wgmma (in its panel layout) and by an mma.sync, as in an attention backward whose dQ
gemm has too few rows for wgmma, is read by the mma.sync in the wgmma panels (`_panels_to_adopt`:
16-bit operands, whole tiles); where it cannot be, the wgmma gemms reading that tile become
mma.sync as well (and so on, until the gemms agree on every tile). Likewise a fragment holds one
register layout, so gemms accumulating into the same fragment (`acc_p` += Q @ K^T, then += Q_tail @
K_tail^T) must hold it alike: when their accumulator layouts differ (one became mma.sync through a
shared tile, the other stayed wgmma), the wgmma ones become mma.sync too, whose accumulator layout
depends only on C's shape, the policy and the threads, so the gemms then agree.

It names `T.gemm` (`op/gemm/`): choosing a gemm's instruction is its whole purpose.

Requires: the user's kernel as traced (thread counts as the user wrote them: warp specialization
adds its producer threads only after lowering). Guarantees: every tl.gemm carries a plan; a UserError
at the gemm for dtypes the target cannot multiply, a K the instruction does not divide, or warps
that cannot tile C.
"""

from __future__ import annotations

import dataclasses
import logging

import numpy as np
from tvm import tirx

from tilelang.errors import at_span
from tilelang.layout import layout as sl
from tilelang.op import gemm as gemm_op
from tilelang.op.gemm import mma, selection, wgmma
from tilelang.options import DEFAULT_OPTIONS, CompileOptions
from tilelang.transform.common import Scope, mutate_with_scope

logger = logging.getLogger("tilelang")


def select_gemm_instructions(func: tirx.PrimFunc, options: CompileOptions = DEFAULT_OPTIONS) -> tirx.PrimFunc:
    target = func.attrs.get("target") if func.attrs is not None else None
    mma_only = set()  # indices (in visiting order) of the gemms that must not use wgmma
    panels = {}  # index of an mma.sync gemm -> (panels_a, panels_b): operands it reads in wgmma panels
    while True:
        out, gemms = _select(func, target, options, mma_only, panels)
        adopted = _panels_to_adopt(gemms)
        if adopted != panels:
            panels = adopted
            continue
        conflicts = _gemms_disagreeing(gemms) - mma_only
        if not conflicts:
            _check_wgmma_only(gemms, mma_only)
            return out
        mma_only |= conflicts


def _check_wgmma_only(gemms, mma_only) -> None:
    """`T.wgmma_gemm` runs on wgmma or not at all (as in the public TileLang)."""
    for k, (g, _) in enumerate(gemms):
        if g.wgmma_only and not isinstance(g.plan, wgmma.Plan):
            why = (
                "another gemm reads one of its shared tiles, or accumulates into its fragment, with mma.sync"
                if k in mma_only
                else "the target, dtypes, shape, threads or operands do not fit wgmma (TILELANG_LOG_LEVEL=DEBUG "
                "logs which)"
            )
            raise at_span(
                f"T.wgmma_gemm({g.a.name}, {g.b.name}, {g.c.name}) cannot run as wgmma here: {why}; use T.gemm, "
                "which falls back to mma.sync",
                g.span,
            )


def _select(func, target, options, mma_only, panels):
    """`func` with every gemm's plan recorded, and the parsed gemms with their threads in visiting order."""
    scope = Scope()
    gemms = []
    no_wgmma = options.replace(disable_wgmma=True)

    def on_eval(stmt, recurse):
        if not gemm_op.is_gemm(stmt):
            return stmt
        g = gemm_op.Gemm(stmt.value)
        chosen = no_wgmma if len(gemms) in mma_only else options
        num_threads = scope.thread_var()[1]
        # (In a thread branch the threads are the branch's: its line, not the kernel's, sets them.)
        kernel_span = scope.kernel_span if scope.thread_range is None else None
        plan = selection.select(g, target, num_threads, chosen, stmt.span, kernel_span)
        if isinstance(plan, mma.Plan) and len(gemms) in panels:
            plan = dataclasses.replace(plan, panels_a=panels[len(gemms)][0], panels_b=panels[len(gemms)][1])
        call = selection.record(stmt.value, plan)
        gemms.append((gemm_op.Gemm(call, stmt.span), num_threads))
        return tirx.Evaluate(call, span=stmt.span)

    return func.with_body(mutate_with_scope(func.body, scope, {tirx.Evaluate: on_eval})), gemms


def _panels_to_adopt(gemms) -> dict:
    """{index of an mma.sync gemm: (panels_a, panels_b)}: the swizzle bits of the wgmma panels each of
    its shared operands is read in, where wgmma gemms read that tile too (all in one layout) and the
    template can read it so (`mma.can_read_panels`); 0 for an operand read in its own swizzle."""
    wgmma_readers = {}  # shared tile -> [(its layout, the panels' swizzle bits)]
    for g, _ in gemms:
        if isinstance(g.plan, wgmma.Plan):
            layouts = gemm_op.shared_layouts(g)
            for region, bits in ((g.a, g.plan.swz_a), (g.b, g.plan.swz_b)):
                if region.buffer in layouts:
                    wgmma_readers.setdefault(region.buffer, []).append((layouts[region.buffer], bits))
    out = {}
    for k, (g, _) in enumerate(gemms):
        if not isinstance(g.plan, mma.Plan):
            continue
        bits = [0, 0]
        for j, region in enumerate((g.a, g.b)):
            readers = wgmma_readers.get(region.buffer, [])
            if readers and all(_same(readers[0][0], lay) for lay, _ in readers[1:]):
                if mma.can_read_panels(region, readers[0][1]):
                    bits[j] = readers[0][1]
        if any(bits):
            out[k] = tuple(bits)
    return out


def _gemms_disagreeing(gemms) -> set:
    """Indices of the wgmma gemms that read a shared tile another gemm reads in another layout, or
    accumulate into a fragment another gemm holds in another register layout."""
    return _shared_tile_conflicts([g for g, _ in gemms]) | _accumulator_conflicts(gemms)


def _accumulator_conflicts(gemms) -> set:
    by_accumulator = {}  # fragment -> [(gemm index, its register layout)]
    for k, (g, num_threads) in enumerate(gemms):
        layout = gemm_op.layouts(g, num_threads, g.span)[g.c.buffer]
        by_accumulator.setdefault(g.c.buffer, []).append((k, layout))
    out = set()
    for buffer, uses in by_accumulator.items():
        if any(not uses[0][1].is_equivalent(layout) for _, layout in uses[1:]):
            for k, _ in uses:
                g = gemms[k][0]
                if isinstance(g.plan, wgmma.Plan):
                    logger.debug(
                        "%s: mma.sync, not wgmma: another gemm accumulating into '%s' holds it in other registers",
                        g.describe(),
                        buffer.name,
                    )
                    out.add(k)
    return out


def _shared_tile_conflicts(gemms) -> set:
    readers = {}  # shared tile -> [(gemm index, layout)]
    for k, g in enumerate(gemms):
        layouts = gemm_op.shared_layouts(g)
        for region in (g.a, g.b):
            if region.buffer.scope() != "local.fragment":  # (an operand the template reads unswizzled: row-major)
                layout = layouts.get(region.buffer) or sl.linear(tuple(int(n) for n in region.buffer.shape))
                readers.setdefault(region.buffer, []).append((k, layout))
    out = set()
    for buffer, uses in readers.items():
        if any(not _same(uses[0][1], layout) for _, layout in uses[1:]):
            for k, _ in uses:
                if isinstance(gemms[k].plan, wgmma.Plan):
                    logger.debug(
                        "%s: mma.sync, not wgmma: shared tile '%s' is read by another gemm in another layout",
                        gemms[k].describe(),
                        buffer.name,
                    )
                    out.add(k)
    return out


def _same(a, b) -> bool:
    return tuple(a.shape) == tuple(b.shape) and np.array_equal(a.inverse_table(), b.inverse_table())

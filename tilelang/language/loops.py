"""Loops of the T.* language: `T.Parallel`, `T.Pipelined`, `T.serial`, `T.unroll`, `T.vectorized`.

`T.Parallel` is a loop nest over a tile whose iterations the compiler distributes over the block's
threads (layout inference decides which thread runs which iteration). TVM 0.27's script builder has
no multi-variable parallel-loop constructor, so `T.Parallel` returns a serial `T.grid` frame and
records its loop variables; `prim_func` turns those loops into parallel loops right after parsing
(`language/prim_func.py`). `T.Pipelined` is a serial loop annotated with its pipeline settings.
"""

from __future__ import annotations

import numbers

from tvm.script.ir_builder import tirx as _tb

from tilelang.errors import UserError, tracing_location
from tilelang.log import hint_once, logger


def _const(x):
    """`x` as a Python int when it is a constant (an int or an IntImm), else None."""
    if isinstance(x, bool):
        return None
    if isinstance(x, numbers.Integral):
        return int(x)
    value = getattr(x, "value", None)
    return int(value) if isinstance(value, int) and str(getattr(x, "dtype", "")).startswith("int") else None


# Loop variables of T.Parallel nests traced so far by the current prim_func parse, with their
# annotations: {var handle: annotations dict}. Reset by prim_func for each kernel.
parallel_loop_vars: dict = {}

# T.Persistent nests traced so far: {first loop variable: Persistent}. Reset by prim_func.
persistent_loops: dict = {}


# T.Parallel's annotation names and the keyword each stands for (the public TileLang's names);
# `parallel_async_without_async_commit_wait` only qualifies prefer_async, which is a hint here.
_PARALLEL_ANNOTATIONS = {
    "coalesced_width": "coalesced_width",
    "parallel_loop_layout": "loop_layout",
    "loop_layout": "loop_layout",
    "parallel_prefer_async": "prefer_async",
    "parallel_async_without_async_commit_wait": None,
}


def Parallel(*extents, coalesced_width=None, loop_layout=None, prefer_async=None, annotations=None):
    """A loop nest over `extents` whose iterations are spread over the block's threads.

    Args:
        *extents: the extent of each loop, outermost first.
        coalesced_width: the vector width to use for this loop's accesses (elements), if given.
        loop_layout: a `Fragment` fixing which thread runs which iteration (strict level).
        prefer_async: a hint to copy global to shared memory with cp.async outside pipelined
            loops; accepted, and the compiler decides (logged once at INFO).
        annotations: a dict of the above by their loop-annotation names (`coalesced_width`,
            `parallel_loop_layout`, `parallel_prefer_async`, ...); another key is a UserError.

    Example:
        for i, j in T.Parallel(128, 64):
            C[i, j] = A[i, j] + B[i, j]
    """
    if not extents:
        raise UserError("T.Parallel needs at least one extent")
    frame = _tb.grid(*extents)
    given = {"coalesced_width": coalesced_width, "loop_layout": loop_layout, "prefer_async": prefer_async}
    for key, value in (annotations or {}).items():
        if key not in _PARALLEL_ANNOTATIONS:
            raise UserError(f"T.Parallel: unknown annotation '{key}'; it takes {sorted(_PARALLEL_ANNOTATIONS)}")
        if _PARALLEL_ANNOTATIONS[key]:
            given[_PARALLEL_ANNOTATIONS[key]] = value
    coalesced_width, loop_layout, prefer_async = given["coalesced_width"], given["loop_layout"], given["prefer_async"]
    ann = {}
    if prefer_async:
        hint_once(
            "parallel.prefer_async", "T.Parallel(prefer_async=True): a hint; tilelang decides where cp.async goes"
        )
    if coalesced_width is not None:
        ann["coalesced_width"] = int(coalesced_width)
    if loop_layout is not None:
        from tilelang.layout.fragment import to_ir

        ann["loop_layout"] = to_ir(loop_layout)
    for depth, var in enumerate(frame.vars):
        parallel_loop_vars[var] = ann if depth == 0 else {}
    return frame


def Pipelined(start, stop=None, num_stages=0, order=None, stage=None, sync=None, group=None):
    """A serial loop whose global-to-shared copies are software-pipelined `num_stages` deep.

    Args:
        start, stop: the range; `T.Pipelined(n)` is `range(0, n)`.
        num_stages: how many iterations of copies are in flight (shared tiles get that many buffers).
        order, stage: a schedule that overrides the planner, one entry per statement of the body (or
            per group). `order`: where the statement goes in the body. `stage`: -1 for the
            global-to-shared copies the pipeline issues ahead; consumers in stage 1 run one
            iteration behind those in stage 0 (on Hopper with a producer warpgroup; elsewhere the
            body keeps the program's order).
        group: lists of statement indices that share one `order` and `stage` entry.
        sync: the public TileLang's barrier placement for manual schedules (lists of statement
            indices); accepted and checked, while tilelang places the barriers from the loop's
            dependences (logged once at INFO).

    Example:
        for k in T.Pipelined(T.ceildiv(K, 32), num_stages=3):
            T.copy(A[by * 128, k * 32], A_shared)
            T.gemm(A_shared, B_shared, C_local)
    """
    if stop is None:
        start, stop = 0, start
    if isinstance(num_stages, bool) or not isinstance(num_stages, numbers.Integral) or num_stages < 0:
        raise UserError(
            f"T.Pipelined: num_stages must be a constant int >= 0 (0 or 1: no copies in flight ahead), "
            f"got {num_stages!r}"
        )
    lo, hi = _const(start), _const(stop)
    extent = hi - lo if lo is not None and hi is not None else None
    if extent is not None and 0 < extent < num_stages:
        logger.warning(
            "T.Pipelined: num_stages=%d but the loop runs %d iterations: more stages than iterations overlap "
            "no more loads; use num_stages <= %d\n%s",
            num_stages,
            extent,
            extent,
            tracing_location(),
        )
    ann = {"num_stages": int(num_stages)}
    if sync:
        if not all(isinstance(g, (list, tuple)) and all(isinstance(x, int) for x in g) for g in sync):
            raise UserError(f"T.Pipelined: `sync` must be lists of statement indices, got {sync!r}")
        hint_once("pipelined.sync", "T.Pipelined(sync=...): tilelang places the pipeline's barriers itself")
    if (order is None) != (stage is None):
        raise UserError("T.Pipelined: `order` and `stage` must be given together")
    if order is not None and len(order) != len(stage):
        raise UserError(f"T.Pipelined: `order` has {len(order)} entries but `stage` has {len(stage)}")
    if group is not None:
        if order is None:
            raise UserError("T.Pipelined: `group` needs `order` and `stage`, one entry per group")
        if len(group) != len(order):
            raise UserError(f"T.Pipelined: `group` has {len(group)} groups but `order` has {len(order)} entries")
        ann["tl_pipeline_group"] = [[int(x) for x in g] for g in group]
    if order is not None:
        ann["tl_pipeline_order"] = [int(x) for x in order]
        ann["tl_pipeline_stage"] = [int(x) for x in stage]
    return _tb.serial(start, stop, annotations=ann)


def serial(start, stop=None, step=None, annotations=None):
    """A sequential loop run by every thread: `for i in T.serial(n)`."""
    if stop is None:
        start, stop = 0, start
    return _tb.serial(start, stop, step=step, annotations=annotations)


def unroll(start, stop=None, step=None, annotations=None):
    """A sequential loop the compiler fully unrolls."""
    if stop is None:
        start, stop = 0, start
    return _tb.unroll(start, stop, step=step, annotations=annotations)


def vectorized(start, stop=None, annotations=None):
    """A loop turned into one vector operation (its extent should match a vector width)."""
    if stop is None:
        start, stop = 0, start
    return _tb.vectorized(start, stop, annotations=annotations)


# TileLang also spells these with capitals.
Serial = serial
Unroll = unroll
Vectorized = vectorized


class Persistent:
    """`for bx, by in T.Persistent([m_blocks, n_blocks], wave_size, index, group_size=8)`: the tiles of a
    grid visited by a fixed number of blocks (a persistent kernel: `T.Kernel(sm_count)`).

    Block `index` (0 <= index < wave_size, usually the kernel's block index with wave_size blocks
    launched) takes tiles index, index + wave_size, index + 2 * wave_size, ...: wave w gives it tile
    number t = w * wave_size + index. Tiles are numbered in groups along the last dimension, so that
    blocks running side by side share operand tiles in L2: the last dimension is cut into groups of
    `group_size` (clamped to [1, last extent]); numbering runs over the groups, then over the other
    dimensions in order, then over the tiles of a group. Coordinates past the last dimension's
    extent (its last group may be short) are skipped. The same order as TileLang's T.Persistent.

    Traced as a `T.grid` over `domain` (so the body sees one variable per dimension) and rewritten
    by `lower_persistent_loops` right after parsing into the loop over waves.
    """

    def __new__(cls, domain, wave_size, index, group_size=8):
        domain = list(domain) if isinstance(domain, (list, tuple)) else [domain]
        if not domain:
            raise UserError("T.Persistent: `domain` needs at least one extent")
        frame = _tb.grid(*domain)
        persistent_loops[frame.vars[0]] = (list(frame.vars), domain, wave_size, index, group_size)
        return frame


def lower_persistent_loops(body, persistent: dict):
    """Replace each traced T.Persistent grid nest by its loop over waves (see `Persistent`):

    for w in range(ceildiv(padded tiles, wave_size)):
        t = w * wave_size + index;  v_0, ..., v_n-1 = coordinates of tile t
        if v_n-1 < last extent: body
    """
    if not persistent:
        return body
    import tvm_ffi
    from tvm import tirx

    def on_for(loop):
        entry = persistent.get(loop.loop_var)
        if entry is None:
            return loop
        vars_, domain, wave_size, index, group_size = entry
        inner = loop
        for _ in vars_:  # the grid's nest, one loop per variable, directly inside each other
            assert isinstance(inner, tirx.For), "a T.Persistent nest"
            inner = inner.body
        dt = "int32"
        ext = [tirx.const(d, dt) if isinstance(d, int) else d for d in domain]
        last = ext[-1]
        g = tirx.const(group_size, dt) if isinstance(group_size, int) else group_size
        g = tirx.max(tirx.const(1, dt), tirx.min(g, last))
        grouped = [tirx.ceildiv(last, g), *ext[:-1], g]  # numbering order, last fastest
        padded = grouped[0]
        for e in grouped[1:]:
            padded = padded * e
        waves = tirx.ceildiv(padded, wave_size)
        w = tirx.Var("w", dt)
        rest = w * wave_size + index
        digits = [None] * len(grouped)
        for k in range(len(grouped) - 1, 0, -1):
            digits[k] = tirx.truncmod(rest, grouped[k])
            rest = tirx.truncdiv(rest, grouped[k])
        digits[0] = rest
        coords = [*digits[1:-1], digits[0] * g + digits[-1]]
        binds = [tirx.Bind(v, c) for v, c in zip(vars_, coords)]
        guarded = tirx.IfThenElse(vars_[-1] < last, inner, None)
        return tirx.For(w, 0, waves, tirx.ForKind.SERIAL, tirx.SeqStmt([*binds, guarded]), span=loop.span)

    return tvm_ffi.structural_map(body, [(tirx.For, on_for)], order="post")

"""Whether a pipelined loop can take the Hopper pipeline (`pipelining/tma.py`): TMA loads, a producer
warpgroup, and what the planner knows about the kernel around the loop. Analysis only; the rewrite
is `inject_tma_pipelines`; `plan_pipelines` asks these.

The loop's statements are asked through the tile-op protocol (`op/base.py`: `async_load`, `writes`,
`strict_shared_layouts`), so any op that answers takes part. The TMA copy (`op/tma.py`) is named:
what the TMA unit can load, and which tiles only it writes, are the questions asked here.
"""

from __future__ import annotations

from dataclasses import dataclass

import tvm_ffi
from tvm import ir, sym, tirx

from tilelang.layout.fragment import substitute
from tilelang.layout.layout import shared_layout_from_ir
from tilelang.op import base, tma
from tilelang.options import DEFAULT_OPTIONS, CompileOptions
from tilelang.transform.apply_global_layouts import laid_out_global
from tilelang.transform.common import collect, kernels, walk
from tilelang.transform.infer_layout import ANNOTATED_LAYOUTS
from tilelang.utils.ir import const_int, is_pure_call
from tilelang.utils.target import arch_of

PRODUCER_THREADS = 128  # one warpgroup: setmaxnreg acts per warpgroup


@dataclass
class Kernel:
    """What the planner knows about the kernel around a pipelined loop."""

    func: tirx.PrimFunc
    target: object
    thread: object  # threadIdx.x
    threads: int
    only_x: bool  # no threadIdx.y / threadIdx.z
    specialized: list  # the loops already warp-specialized in this kernel (at most one)
    tma_tiles: tuple = ()  # shared tiles only TMA loads write (`lower_tma_copies`)
    nested: bool = False  # the pipelined loop runs inside another loop
    guarded: bool = False  # the pipelined loop runs under a condition (an if)
    branch: tuple | None = None  # inside a thread branch: the threads [lo, hi) that run the loop
    blocks: dict = None  # "blockIdx.x"/"blockIdx.y" -> (var, grid extent)
    binds: dict = None  # variable -> value of the bindings in the kernel (`bx_r = ...`)
    cluster: int | None = None  # the grid dimension of the loop's 2-block clusters (`cluster_plan`)
    options: CompileOptions = DEFAULT_OPTIONS  # the kernel's compile options


def unguarded(stmt):
    """(condition, statement) of `if condition: statement` (no else), or (None, stmt)."""
    if isinstance(stmt, tirx.IfThenElse) and stmt.else_case is None:
        return stmt.condition, stmt.then_case
    return None, stmt


def load_of(stmt) -> base.AsyncLoad | None:
    """The global-to-shared load a statement is (`TileOp.async_load`), also under an `if`, or None."""
    op = base.parse(unguarded(stmt)[1])
    return op.async_load() if op is not None else None


def written(stmt) -> list:
    """Buffers a statement writes: what its tile ops say they write (`TileOp.writes`; ops that do
    not say are not counted) and stored buffers."""
    out = []
    inner = unguarded(stmt)[1]
    if isinstance(inner, tirx.Evaluate):
        op = base.parse(inner)
        out += (op.writes() or []) if op is not None else []
    walk(stmt, [(tirx.BufferStore, lambda st: out.append(st.buffer))])
    return out


def distributable_guard(loop, func):
    """The condition of a loop body that is one `if c:` (no else) around several statements, when c
    may be evaluated before each of them instead of once (`invariant`). Else None."""
    cond, inner = unguarded(loop.body)
    if cond is None or not isinstance(inner, tirx.SeqStmt):
        return None
    return cond if invariant(cond, loop, func) else None


def invariant(expr, loop, func) -> bool:
    """Whether `expr` has the same value wherever it is evaluated in `loop`'s iteration: it reads
    only global tensors that nothing in the loop's kernel writes (then it is the same for every
    thread and at every moment: a table an earlier kernel of `func` filled counts), and calls
    nothing that may have side effects."""
    around = [k for k in kernels(func.body) if any(f.loop_var.same_as(loop.loop_var) for f in collect(k, tirx.For))]
    scope = around[0] if around else func.body
    written_anywhere = [st.buffer for st in collect(scope, tirx.BufferStore)]
    for ev in collect(scope, tirx.Evaluate):
        op = base.parse(ev)
        written_anywhere += (op.writes() or []) if op is not None else []
    read = [ld.source for ld in collect(expr, ir.TensorLoad)]
    if any(r.scope() != "global" or any(r.same_as(w) for w in written_anywhere) for r in read):
        return False
    return all(is_pure_call(c) for c in collect(expr, ir.Call))


def tma_only_tiles(body) -> tuple:
    """Shared tiles TMA loads write (`lower_tma_copies`, the TMA pipelines) and no statement stores
    to: wgmma needs no proxy fence to read them. (Tile ops writing such a tile are not looked at.)"""
    loaded = []

    def on_eval(stmt):
        if base.is_tile_op(stmt.value, tma.NAME):
            loaded.append(base.Region.from_ir(stmt.value.args[1]).buffer)

    walk(body, [(tirx.Evaluate, on_eval)])
    stored = [st.buffer for st in collect(body, tirx.BufferStore)]
    return tuple(b for b in loaded if not any(b.same_as(w) for w in stored))


def predicted_layout(tile_buffer, kernel: Kernel):
    """The layout layout inference will give `tile_buffer`: annotated, else the one the ops that
    read it fix at the strict level (a gemm's operand swizzle), else row-major (None)."""
    annotated = kernel.func.attrs.get(ANNOTATED_LAYOUTS) if kernel.func.attrs is not None else None
    if annotated is not None and tile_buffer in annotated:
        return shared_layout_from_ir(annotated[tile_buffer])
    found = []

    def on_eval(stmt):
        op = base.parse(stmt)
        lay = op.strict_shared_layouts().get(tile_buffer) if op is not None else None
        if lay is not None:
            found.append(lay)

    walk(kernel.func.body, [(tirx.Evaluate, on_eval)])
    return found[0] if found else None


def uses(stmt, buffer) -> bool:
    """Whether `stmt` touches `buffer` (a tile op's region or an element load)."""
    found = []

    def hit(node, src):
        if src.same_as(buffer):
            found.append(node)

    walk(stmt, [(ir.TensorRegion, lambda r: hit(r, r.source)), (ir.TensorLoad, lambda ld: hit(ld, ld.source))])
    return bool(found)


def _guard_not_shared(loop, load) -> str | None:
    """Why a load under a condition cannot be a TMA load (None: it can). A skipped TMA load still
    completes its stage (the barrier's one arrival, without bytes: `pipelining/tma.py`); every
    statement that reads the tile must then run under the same condition, or it would read a stage
    no load filled."""
    cond = unguarded(load)[0]
    if cond is None:
        return None
    tile = load_of(load).dst.buffer
    for stmt in loop.body.seq if isinstance(loop.body, tirx.SeqStmt) else [loop.body]:
        if stmt.same_as(load) or not uses(stmt, tile):
            continue
        if not tvm_ffi.structural_equal(unguarded(stmt)[0], cond):
            return f"the load into '{tile.name}' runs under a condition its readers do not share"
    return None


def why_not(loop, producers, kernel: Kernel) -> str | None:
    """Why the loop cannot use TMA (None: it can)."""
    if kernel.target is None or arch_of(kernel.target) != "sm_90a":
        return "not sm_90a"
    if kernel.options.disable_tma_lower:
        return "tl.disable_tma_lower is set"
    if kernel.branch is not None:
        # TMA loads are issued by one thread (thread 0, or a producer warpgroup added to the block)
        # that a branch over threads [lo, hi) may not contain; cp.async copies are issued by the
        # branch's own threads, and its barriers become named barriers over them.
        return f"the loop runs in a thread branch (threads {kernel.branch[0]} to {kernel.branch[1] - 1})"
    for p in producers:
        load = load_of(p)
        src, dst = load.src, load.dst
        why = _guard_not_shared(loop, p)
        if why is not None:
            return why
        if not load.tma:
            return f"{base.parse(p).describe()} is kept off TMA (disable_tma=True)"
        tile = tma.tile_of(src, dst)
        if isinstance(tile, str):
            return f"the load into '{dst.name}': {tile}"
        if laid_out_global(src.buffer, kernel.func):
            return f"the load from '{src.name}': the global tensor has a layout (T.annotate_layout)"
        if tma.box_plan(tile, predicted_layout(dst.buffer, kernel)) is None:
            return f"the load into '{dst.name}': its shared layout is not one the TMA unit writes"
    return None


def is_scalar_var(buffer) -> bool:
    """Whether `buffer` is one register of each thread (T.alloc_var, a one-element T.alloc_local)."""
    return buffer.scope() in ("local", "local.var") and all(const_int(e) == 1 for e in buffer.shape)


def scalar_prelude(stmt, thread) -> bool:
    """Whether `stmt` only computes T.alloc_var scalars, the same in every thread: it stores to
    `is_scalar_var` buffers only, loads only global tensors and such scalars, calls only pure
    functions, runs no tile op or extern statement, and does not read the thread index `thread`.
    Another warpgroup can then run it for itself and get the same values."""
    if collect(stmt, tirx.Evaluate):
        return False
    if not all(is_scalar_var(st.buffer) for st in collect(stmt, tirx.BufferStore)):
        return False
    if any(ld.source.scope() != "global" and not is_scalar_var(ld.source) for ld in collect(stmt, ir.TensorLoad)):
        return False
    if not all(is_pure_call(c) for c in collect(stmt, ir.Call)):
        return False
    return thread is None or not any(v.same_as(thread) for v in collect(stmt, ir.Var))


def _replicable_var(buffer, loop, kernel: Kernel, seen=()) -> bool:
    """Whether the producer warpgroup can compute the T.alloc_var `buffer` itself: the loop does not
    write it, and every store to it in the kernel is a `scalar_prelude` (outside any condition on the
    thread index) whose values read only such variables."""
    if not is_scalar_var(buffer):
        return False
    if any(buffer.same_as(b) for b in seen):
        return True  # (a variable computed from itself: its other stores decide)
    if any(st.buffer.same_as(buffer) for st in collect(loop.body, tirx.BufferStore)):
        return False
    body = kernel.func.body
    for cond in collect(body, tirx.IfThenElse):
        if kernel.thread is not None and any(v.same_as(kernel.thread) for v in collect(cond.condition, ir.Var)):
            if any(st.buffer.same_as(buffer) for st in collect(cond, tirx.BufferStore)):
                return False
    for st in collect(body, tirx.BufferStore):
        if not st.buffer.same_as(buffer):
            continue
        if not scalar_prelude(st, kernel.thread):
            return False
        for ld in collect(st, ir.TensorLoad):
            if is_scalar_var(ld.source) and not _replicable_var(ld.source, loop, kernel, (*seen, buffer)):
                return False
    return True


def why_not_specialized(loop, producers, kernel: Kernel) -> str | None:
    """Why the loop cannot get a producer warpgroup (None: it can)."""
    if kernel.options.disable_warp_specialized:
        return "tl.disable_warp_specialized is set"
    # The producer runs only the loop: its trip count and load coordinates must not read values the
    # consumers' code computes into registers or shared memory (a T.alloc_var, a tile).
    # A T.alloc_var computed before the loop from global tensors only (a range read from a table),
    # the producer computes itself (`warp_specialize` copies the statements).
    reads = [loop.extent] + [load_of(p).src.to_ir() for p in producers]
    for node in reads:
        for ld in collect(node, ir.TensorLoad):
            if ld.source.scope() != "global" and not _replicable_var(ld.source, loop, kernel):
                return f"the loop's bounds or copy coordinates read '{ld.source.name}'"
    if not kernel.only_x:
        return "the kernel has threadIdx.y/z"
    if kernel.threads % 128:
        return f"{kernel.threads} threads are not whole warpgroups"
    if kernel.threads + PRODUCER_THREADS > 1024:
        return "no room for a producer warpgroup"
    if kernel.specialized:
        return "another loop of the kernel is already warp-specialized"
    return None


def why_not_nested(kernel: Kernel, why_not_ws: str | None) -> str | None:
    """Why a loop inside another loop cannot use TMA (None: it can): only the warp-specialized
    pipeline counts its barriers' phases on across runs of the loop."""
    if kernel.nested and why_not_ws is not None:
        return f"the pipelined loop is inside another loop and has no producer warpgroup ({why_not_ws})"
    return None


def cluster_plan(loop, producers, kernel: Kernel) -> tuple[int, list] | None:
    """(grid dimension, indices of the producer copies to multicast) when blocks paired along that
    dimension copy the same tiles, or None. Two blocks whose index differs only in that dimension's
    lowest bit form a cluster; a copy whose coordinates do not read that block index is the same
    tile for both, so each loads half and multicasts it (`tma.make`). The dimension saving the most
    bytes per stage wins; its grid extent must be even, and the loop's bounds may not read that
    block index either. Not for loops inside loops or under a condition (a block skipping the loop
    would leave its peer waiting). Only with `tl.enable_tma_multicast`: on the H200 it measured
    within noise of the plain pipeline (GEMM, flash attention, MLA decode), so it is not the default."""
    if kernel.nested or kernel.guarded or not kernel.options.enable_tma_multicast:
        return None
    if any(unguarded(p)[0] is not None for p in producers):
        return None  # a block skipping a load would leave its peer's half missing
    best = None
    for dim, tag in enumerate(("blockIdx.x", "blockIdx.y")):
        var, extent = (kernel.blocks or {}).get(tag, (None, None))
        if var is None or const_int(extent) is None or const_int(extent) % 2:
            continue
        same = _same_for_pairs(var, const_int(extent), kernel.binds or {})
        # Both blocks must run the same iterations (a causal loop's length depends on the block).
        if not same(loop.min) or not same(loop.extent):
            continue
        shared, saved = [], 0
        for j, p in enumerate(producers):
            src, dst = load_of(p).src, load_of(p).dst
            if not all(same(s) for s in src.starts):
                continue
            tile = tma.tile_of(src, dst)
            if not isinstance(tile, str) and tma.can_multicast(tile, predicted_layout(dst.buffer, kernel)):
                shared.append(j)
                saved += tile.tile_bytes
        if shared and (best is None or saved > best[0]):
            best = (saved, dim, shared)
    return (best[1], best[2]) if best else None


def _same_for_pairs(var, extent: int, binds: dict):
    """A test whether an expression has the same value for block index `var` = 2c and 2c + 1 (the
    two blocks of a cluster): with var written as 2c + r, r must simplify away."""
    c, r = tirx.Var("pair", var.ty.dtype), tirx.Var("rank", var.ty.dtype)
    analyzer = sym.Analyzer()
    analyzer.bind(c, ir.Range.from_min_extent(0, extent // 2))
    analyzer.bind(r, ir.Range.from_min_extent(0, 2))

    def same(expr) -> bool:
        expr = analyzer.simplify(substitute(_inline(expr, binds), {var: c * 2 + r}))
        return not any(v.same_as(r) for v in collect(expr, ir.Var))

    return same


def _inline(expr, binds: dict, rounds: int = 8):
    """`expr` with the kernel's bindings substituted (bindings of bindings too)."""
    for _ in range(rounds):
        used = [v for v in collect(expr, ir.Var) if v in binds]
        if not used:
            break
        expr = substitute(expr, {v: binds[v] for v in used})
    return expr

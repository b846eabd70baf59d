"""Pass `merge_shared_tiles`: each kernel's dynamic shared tiles become views at fixed byte offsets of
one block (`buf_dyn_shmem`), tiles whose lifetimes do not overlap sharing bytes.

Lifetimes are counted in the statements of the kernel's top level, in program order: a loop, an `if`
or a `while` is one statement (a tile used anywhere in a loop is live through all of it), while the
statements under an attribute or in a sequence are each their own. The producer and consumer sides
of a warp-specialized kernel (in sequence until `consumer_barriers` makes them one branch) run at
the same time: they count as one statement. A tile is live from the first
statement that names it to the last, both included; two tiles may share bytes only when one's last
statement comes before the other's first. A statement naming two tiles (`R[tx] = S[127 - tx]`) thus
keeps them apart. A tile is named by a load or store, a pointer into it (`address_of(S[i])`, how a
TMA load, an mbarrier or ldmatrix reaches it), a `tvm_access_ptr` (how a gemm or cp.async takes it),
a view declared over its bytes (`T.decl_buffer(data=S.data)`), or a pointer variable bound to one.

It runs after the barrier insertion, which thus saw each tile as a buffer of its own (a loop reading
one tile and writing another needs no barrier per iteration). Where a tile takes bytes another tile
used before, a block barrier goes before the new tile's first statement unless one is already
between the two (every thread must be done with the old tile): top-level statements are run by all
threads, so the barrier is reached by all.

Tiles are placed largest first, each at the lowest offset, on its alignment, clear of every tile
placed before whose lifetime overlaps its own: the block is as large as the most bytes ever live at
once, or close. Alignment: 64 bytes (TVM's default for a buffer), and 1024 for a tile whose size is a
multiple of 1024 (on sm_90a `align_shared_tiles` makes every tile so: a TMA destination and the
128-byte swizzle wgmma reads assume a tile starts on a 1024-byte boundary).

This replaces TVM's `MergeSharedMemoryAllocations`, whose planner could give two tiles live at the
same time the same bytes: when a freed small tile's bytes were reused by a larger one, that pair was
kept as two "layers" of one entry, and when the entry was later merged beside another entry still
holding a live tile, the layers were laid out afresh from the entry's start (a block-sparse GEMM's
A and B tiles, both live through the loop, at the same offset: wrong results).

Before:  A_s = T.alloc_buffer((4096,), "float16", scope="shared.dyn")
         B_s = T.alloc_buffer((4096,), "float16", scope="shared.dyn")
         ... A_s[i] ... B_s[j] ... T.tvm_access_ptr(T.type_annotation("float16"), B_s, 0, 4096, 1)
After:   buf_dyn_shmem = T.alloc_buffer((16384,), "uint8", scope="shared.dyn")
         A_s = T.decl_buffer((4096,), "float16", data=buf_dyn_shmem.data, scope="shared.dyn")
         B_s = T.decl_buffer((4096,), "float16", data=buf_dyn_shmem.data, scope="shared.dyn")
         ... A_s[i] ... B_s[j + 4096] ... T.tvm_access_ptr(T.type_annotation("float16"), B_s, 4096, 4096, 1)

The layout of each block is logged at DEBUG (`TILELANG_LOG_LEVEL=DEBUG`).

Requires: flat buffers (`flatten_buffer`); tiles of constant size; barriers inserted. Guarantees:
each kernel with two or more dynamic shared tiles allocates one `uint8` block, every access to a
tile (load, store, `tvm_access_ptr`) goes through the tile's view of it with the tile's offset
added, and no two tiles live at one statement share a byte.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass

import tvm_ffi
from tvm import ir, tirx

from tilelang.dtypes import bits_with_lanes
from tilelang.errors import CompilerError
from tilelang.transform.common import kernels, replace_attrs
from tilelang.utils.ir import block_sync, collect, const_int, is_block_barrier, seq

logger = logging.getLogger("tilelang")

SCOPE = "shared.dyn"
_ACCESS_PTR = "tirx.tvm_access_ptr"
_BLOCK = 1024  # bytes: the swizzle period and TMA's preferred alignment
_MIN_ALIGN = 64  # bytes: TVM's default data alignment of a buffer


@dataclass
class Placement:
    """Where one tile sits in its kernel's block, and when it is live (statement indices)."""

    offset: int
    size: int
    first: int
    last: int


def _size(tile) -> int:
    if len(tile.shape) != 1 or const_int(tile.shape[0]) is None:
        raise CompilerError(f"merge_shared_tiles: tile '{tile.name}' is not flat with a constant size: {tile.shape}")
    return -(-const_int(tile.shape[0]) * bits_with_lanes(tile.dtype) // 8)


def _alignment(tile, size: int) -> int:
    align = max(_MIN_ALIGN, int(tile.data_alignment), bits_with_lanes(tile.dtype) // 8)
    return max(align, _BLOCK) if size % _BLOCK == 0 else align


_ROLES = ("tl.ws_producer_branch", "tl.ws_consumer_branch")  # warp_specialize's two sides, in sequence


def _is_role(stmt) -> bool:
    return isinstance(stmt, tirx.AttrStmt) and stmt.attr_key in _ROLES


def _top_statements(stmt, out: list) -> list:
    """The kernel's statements in program order: sequences and attributes opened (but for the two
    sides of a warp-specialized kernel, each one statement), allocations skipped."""
    if isinstance(stmt, tirx.SeqStmt):
        for s in stmt.seq:
            _top_statements(s, out)
    elif isinstance(stmt, tirx.AttrStmt) and not _is_role(stmt):
        _top_statements(stmt.body, out)
    elif not isinstance(stmt, tirx.AllocBuffer):
        out.append(stmt)
    return out


def _timeline(body) -> list:
    """(step, statement) for each top-level statement, in program order. The step is the statement's
    index, except that the producer and consumer sides of a warp-specialized kernel, which stand in
    sequence until `consumer_barriers` makes them the two sides of one branch, run at the same time:
    they share a step."""
    timeline = []
    for k, stmt in enumerate(_top_statements(body, [])):
        together = k > 0 and _is_role(stmt) and _is_role(timeline[-1][1])
        timeline.append((timeline[-1][0] if together else len(timeline) and timeline[-1][0] + 1, stmt))
    return timeline


def _owners(kernel, tiles) -> dict:
    """Var -> the tiles it stands for: each tile itself, each view declared over a tile's bytes, and
    each pointer variable bound to a value naming one (in program order, so chains resolve)."""
    owners = {t: {t} for t in tiles}

    def named(expr) -> set:
        return set().union(*(owners.get(v, set()) for v in collect(expr, ir.Var)))

    def on_decl(stmt):
        found = named(stmt.data)
        if found:
            owners[stmt.buffer] = found

    def on_bind(stmt):
        found = named(stmt.value)
        if found and isinstance(stmt.var.ty, ir.PointerType):
            owners[stmt.var] = found

    tvm_ffi.structural_walk(kernel, [(tirx.DeclBuffer, on_decl), (tirx.Bind, on_bind)], order="pre")
    return owners


def plan(kernel, tiles, reuse: bool = True) -> dict:
    """tile -> its Placement in the block of `kernel` (the outermost thread-extent statement).
    Tiles no statement names are left out. With `reuse` off every tile gets bytes of its own."""
    return _place(_timeline(kernel.body), _owners(kernel, tiles), reuse)


def _place(timeline, owners, reuse: bool) -> dict:
    live = {}
    for k, stmt in timeline:
        for v in collect(stmt, ir.Var):
            for t in owners.get(v, ()):
                first, _ = live.get(t, (k, k))
                live[t] = (first, k)
    if not reuse:
        live = {t: (0, 0) for t in live}
    placed = {}
    for t in sorted(live, key=lambda t: (-_size(t), live[t][0])):
        size, (first, last) = _size(t), live[t]
        align = _alignment(t, size)
        busy = [p for p in placed.values() if not (p.last < first or last < p.first)]
        offset = 0
        for start in sorted({0} | {-(-p.offset - p.size) // align * align for p in busy}):
            if all(start + size <= p.offset or start >= p.offset + p.size for p in busy):
                offset = start
                break
        placed[t] = Placement(offset, size, first, last)
    return placed


def _reuse_barriers(timeline, placement) -> set:
    """Positions in `timeline` of the statements that need a block barrier before them: where a tile
    takes bytes another tile used before, every thread must be done with the old tile first (TVM's
    barrier insertion, run before this pass, saw two buffers). One barrier serves every reuse whose gap
    (last step of the old tile, first of the new) contains it; the barriers already there count. A
    barrier goes before the first statement of its step."""
    gaps = []
    for new in placement.values():
        for old in placement.values():
            shared = old.offset < new.offset + new.size and new.offset < old.offset + old.size
            if old.last < new.first and shared:
                gaps.append((old.last, new.first))
    barriers = {k for k, stmt in timeline if is_block_barrier(stmt)}
    needed = set()
    for lo, hi in sorted(gaps, key=lambda g: g[1]):  # stab the intervals in order of their ends
        if not any(lo < k < hi for k in barriers) and not any(lo < k <= hi for k in needed):
            needed.add(hi)
    return {min(i for i, (k, _) in enumerate(timeline) if k == step) for step in needed}


def _with_barriers(stmt, before: set, counter: list):
    """`stmt` with a block barrier before each top-level statement whose position (in `_timeline`
    order, `counter` walking it) is in `before`."""
    if isinstance(stmt, tirx.SeqStmt):
        return tirx.SeqStmt([_with_barriers(s, before, counter) for s in stmt.seq])
    if isinstance(stmt, tirx.AttrStmt) and not _is_role(stmt):
        body = _with_barriers(stmt.body, before, counter)
        return tirx.AttrStmt(stmt.node, stmt.attr_key, stmt.value, body, span=stmt.span)
    if isinstance(stmt, tirx.AllocBuffer):
        return stmt
    counter[0] += 1
    return tirx.SeqStmt([block_sync(SCOPE), stmt]) if counter[0] - 1 in before else stmt


def _shift(index, elems: int):
    return index if elems == 0 else index + elems


def _merge_kernel(kernel, reuse: bool):
    tiles = [a.buffer for a in collect(kernel, tirx.AllocBuffer) if a.buffer.scope() == SCOPE]
    if len(tiles) < 2:
        return kernel
    timeline = _timeline(kernel.body)
    placement = _place(timeline, _owners(kernel, tiles), reuse)
    total = max((p.offset + p.size for p in placement.values()), default=0)
    block = tirx.decl_buffer((max(total, 1),), "uint8", "buf_dyn_shmem", scope=SCOPE)
    needed = _reuse_barriers(timeline, placement)
    logger.debug(
        "shared block of %d bytes: %s; reuse barriers before statements %s",
        total,
        ", ".join(f"{t.name} [{p.offset}, {p.offset + p.size}) live {p.first}..{p.last}" for t, p in placement.items()),
        sorted(needed),
    )
    start = _with_barriers(kernel.body, needed, [0]) if needed else kernel.body

    def view(buf):
        return tirx.decl_buffer(
            buf.shape, str(buf.dtype), buf.name, scope=SCOPE, data_alignment=int(buf.data_alignment), layout=buf.layout
        )

    # Each tile, and each view over one tile's bytes, becomes a view of the block at the tile's offset.
    moved = {t: (view(t), p.offset) for t, p in placement.items()}
    for decl in collect(kernel, tirx.DeclBuffer):
        base = [v for v in collect(decl.data, ir.Var) if v in placement]
        if base:
            moved[decl.buffer] = (view(decl.buffer), placement[base[0]].offset)

    def elems(buf, dtype) -> int:
        offset = moved[buf][1]
        if offset * 8 % bits_with_lanes(dtype):
            raise CompilerError(f"merge_shared_tiles: '{buf.name}' at byte {offset}, not a multiple of {dtype}")
        return offset * 8 // bits_with_lanes(dtype)

    def on_load(ld):
        if ld.source not in moved:
            return ld
        (index,) = ld.indices
        return tirx.BufferLoad(moved[ld.source][0], [_shift(index, elems(ld.source, ld.source.dtype))])

    def on_store(st):
        if st.buffer not in moved:
            return st
        (index,) = st.indices
        return tirx.BufferStore(
            moved[st.buffer][0], st.value, [_shift(index, elems(st.buffer, st.buffer.dtype))], span=st.span
        )

    def on_call(call):
        if not (isinstance(call.op, ir.Op) and call.op.name == _ACCESS_PTR and call.args[1] in moved):
            return call
        ptype, buf, offset, extent, rw = call.args
        dtype = str(ptype.ty.dtype.with_lanes(1))
        args = [ptype, moved[buf][0], _shift(offset, elems(buf, dtype)), extent, rw]
        return ir.Call(call.op, args, ret_ty=call.ty, span=call.span)

    def on_alloc(stmt):
        return tirx.Evaluate(0) if stmt.buffer in tiles else stmt

    def on_decl(stmt):
        return tirx.DeclBuffer(moved[stmt.buffer][0], data=block.data) if stmt.buffer in moved else stmt

    body = tvm_ffi.structural_map(
        start,
        [
            (ir.TensorLoad, on_load),
            (tirx.BufferStore, on_store),
            (ir.Call, on_call),
            (tirx.AllocBuffer, on_alloc),
            (tirx.DeclBuffer, on_decl),
        ],
        order="post",
    )
    left = sorted({v.name for v in collect(body, ir.Var) if v in moved})
    if left:
        raise CompilerError(f"merge_shared_tiles: tiles {left} are still named in a way the merge cannot offset")
    decls = [tirx.DeclBuffer(moved[t][0], data=block.data) for t in placement]
    body = seq([tirx.AllocBuffer(block), *decls, body])
    return tirx.AttrStmt(kernel.node, kernel.attr_key, kernel.value, body, span=kernel.span)


def merge_shared_tiles(func: tirx.PrimFunc, reuse: bool = True) -> tirx.PrimFunc:
    swap = {}
    for kernel in kernels(func.body):
        merged = _merge_kernel(kernel, reuse)
        if not merged.same_as(kernel):
            swap[kernel] = merged
    return replace_attrs(func, swap)

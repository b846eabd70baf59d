"""Pass `stage_fragment_stores`: a gemm's accumulator copied whole to global memory goes through a
shared tile when the kernel has room for one (sm_90a).

From registers, each thread writes the few adjacent columns it holds per row (a wgmma accumulator:
2 elements per 8 columns), so one warp's store covers 8 rows in 16-byte pieces. (Other fragments
get the plain spread over the threads, whose stores are whole vectors already: left alone.) Through a shared
tile (swizzled by layout inference, as a tile staged from fragments) the tile leaves in 16-byte
vectors along whole rows. H200, GEMM 4096^3 fp16 with 128 x 256 tiles, in turn: 651 TFLOP/s with
4 stages and the direct store, 670 with 3 stages staged.

Before:  T.copy(C_local, C[by * 128, bx * 256])
After:   T.copy(C_local, C_local_staged)               # a new shared tile of C's dtype
         T.copy(C_local_staged, C[by * 128, bx * 256])

It names `T.copy`, the op it stages; the accumulators are those of any op on the tensor cores
(`TileOp.mma`).

Requires: a target with TMA (`has_tma`: the pass list runs it only there); tile ops as parsed or
pipelined (before `expand_elementwise_ops`; after the pipeline injection, so multi-buffered tiles
count with their stages). Guarantees: the same values; a copy is staged
only when the new tile, the tiles still used after the copy (the shared-memory merge reuses the
bytes of the others, such as a pipelined loop's stages before the epilogue) and a margin for
barriers and reduction workspaces fit in the target's shared memory, and not under a condition
(a persistent kernel's `if tile is valid`: the barrier between the two copies cannot go there).
`tl.disable_fragment_store_staging` turns it off; `lower` retries without it when the merged
shared memory is over the limit after all.
"""

from __future__ import annotations

import tvm_ffi
from tvm import ir, tirx

from tilelang.dtypes import bits as dtype_bits
from tilelang.op import base
from tilelang.op import copy as copy_op
from tilelang.options import DEFAULT_OPTIONS, CompileOptions
from tilelang.transform.check_shared_memory import shared_memory_limit, tile_bytes
from tilelang.transform.common import allocate_at_kernel_top, collect, is_innermost_thread_extent
from tilelang.utils.ir import const_int, seq

_MARGIN = 4096  # barriers, reduction workspaces and alignment added by later passes
_ALIGN = 1024  # align_shared_tiles puts each tile on a 1024-byte boundary


def _rounded(nbytes: int) -> int:
    return (nbytes + _ALIGN - 1) // _ALIGN * _ALIGN


def _candidate(call, accumulators):
    """(fragment region, global region, rows, cols) of a copy of a whole 2-d gemm accumulator
    (`accumulators`) to global memory whose rows are whole 128-byte lines, or None. Other
    fragments get the plain spread over the threads, whose stores are already whole vectors."""
    if not base.is_tile_op(call, copy_op.NAME):
        return None
    src, dst = base.Region.from_ir(call.args[0]), base.Region.from_ir(call.args[1])
    if src.buffer.scope() != "local.fragment" or dst.buffer.scope() != "global":
        return None
    if not any(src.buffer.same_as(c) for c in accumulators):
        return None
    shape = [const_int(n) for n in src.buffer.shape]
    if len(shape) != 2 or None in shape or [const_int(e) for e in src.extents] != shape:
        return None
    rows, cols = shape
    if cols * dtype_bits(str(dst.buffer.dtype)) % (128 * 8) or rows % 8:
        return None  # rows of whole 128-byte lines (what the staging swizzle is for), 8 at a time
    return src, dst, rows, cols


def _accumulators(body) -> list:
    """The fragments some op on the tensor cores (a T.gemm) accumulates into."""
    ops = [base.parse(e) for e in collect(body, tirx.Evaluate)]
    mmas = [op.mma() for op in ops if op is not None]
    return [m.accumulator.buffer for m in mmas if m is not None]


def _liveness(body, tiles, accumulators):
    """(last use of each tile, [(statement, position)] of the copies, in_loop(statement)): positions
    in the order the statements appear (a pre-order walk)."""
    counter, last_use, position = [0], {}, []

    def on_var(v):
        counter[0] += 1
        for b in tiles:
            if v.same_as(b):
                last_use[b] = counter[0]

    def on_eval(e):
        counter[0] += 1
        if _candidate(e.value, accumulators) is not None:
            position.append((e, counter[0]))

    tvm_ffi.structural_walk(body, [(ir.Var, on_var), (tirx.Evaluate, on_eval)], order="pre")
    loops = collect(body, tirx.For)

    def in_loop(stmt) -> bool:
        return any(any(e.same_as(stmt) for e in collect(loop.body, tirx.Evaluate)) for loop in loops)

    return last_use, position, in_loop


def stage_fragment_stores(func: tirx.PrimFunc, options: CompileOptions = DEFAULT_OPTIONS) -> tirx.PrimFunc:
    if options.disable_fragment_store_staging:
        return func
    target = func.attrs["target"]
    limit = shared_memory_limit(target)

    def on_attr(attr):
        if not is_innermost_thread_extent(attr):
            return attr
        tiles = [a.buffer for a in collect(attr.body, tirx.AllocBuffer) if a.buffer.scope().startswith("shared")]
        total = sum(_rounded(tile_bytes(b)) for b in tiles)
        accumulators = _accumulators(attr.body)
        last_use, position, in_loop = _liveness(attr.body, tiles, accumulators)
        staged = []

        def on_eval(stmt):
            found = _candidate(stmt.value, accumulators)
            if found is None:
                return stmt
            src, dst, rows, cols = found
            tile = tirx.decl_buffer((rows, cols), str(dst.buffer.dtype), f"{src.name}_staged", scope="shared.dyn")
            at = next((k for e, k in position if e.same_as(stmt)), None)
            # Tiles no statement after the copy uses (a pipelined loop's stage buffers before the
            # epilogue) are dead there: the shared-memory merge gives their bytes to the new tile.
            live = [b for b in tiles if at is None or in_loop(stmt) or last_use.get(b, -1) > at] + staged
            need = max(total, sum(_rounded(tile_bytes(b)) for b in live) + _rounded(tile_bytes(tile)))
            if need + _MARGIN > limit:
                return stmt
            staged.append(tile)
            whole = base.to_region(tile, "staged tile")
            width, flag = stmt.value.args[2], stmt.value.args[3]
            to_shared = base.make_call(copy_op.NAME, [src.to_ir(), whole.to_ir(), tirx.const(0, "int32"), flag])
            to_global = base.make_call(copy_op.NAME, [whole.to_ir(), dst.to_ir(), width, flag])
            return seq([tirx.Evaluate(to_shared, span=stmt.span), tirx.Evaluate(to_global, span=stmt.span)])

        # Not under a condition: the barrier between the two copies cannot go inside one.
        body = tvm_ffi.structural_mutate(
            attr.body, [(tirx.IfThenElse, lambda node, _: node), (tirx.Evaluate, lambda node, _: on_eval(node))]
        )
        if not staged:
            return attr
        return allocate_at_kernel_top(tirx.AttrStmt(attr.node, attr.attr_key, attr.value, body, span=attr.span), staged)

    return func.with_body(tvm_ffi.structural_map(func.body, [(tirx.AttrStmt, on_attr)]))

"""Pass `rasterize_blocks`: `T.use_swizzle(panel, order)` remaps the block indices for L2 reuse.

Blocks launch in order of their linear id. With row order, the grid is cut into panels of `panel`
block-rows; inside a panel, consecutive blocks walk down a column before moving right, so blocks
running at the same time share a few row tiles and a few column tiles (column order: transposed).

Before:  tl_use_swizzle(4, 0); ... A[by * 128, ...] ... B[..., bx * 128] ...
After:   bx_r = ...; by_r = ...;  ... A[by_r * 128, ...] ... B[..., bx_r * 128] ...

In a kernel of 2-block clusters (`inject_tma_pipelines`: blocks paired along x or y share a tile), the
remap moves pairs as units, so a cluster's blocks still share that tile.

`T.use_swizzle(..., enable=False)` is a call of panel 0: launch order, the call dropped.

Requires: kernels with blockIdx.x and blockIdx.y; pipelining done (it decides the clusters).
Guarantees: no `tl.use_swizzle` call remains; the
remapping is a permutation of the grid (every block index is used once).
"""

from __future__ import annotations

import tvm_ffi
from tvm import tirx

from tilelang import intrinsics
from tilelang.errors import at_span
from tilelang.layout.fragment import substitute
from tilelang.op import base
from tilelang.transform.common import Scope, collect, mutate_with_scope
from tilelang.utils.ir import const_int

NAME = "use_swizzle"


def _remap(bx, by, gx, gy, panel):
    """(new bx, new by) for row order: panels of `panel` block-rows, walked column by column."""
    linear = by * gx + bx
    per_panel = gx * panel
    index, offset = tirx.floordiv(linear, per_panel), tirx.floormod(linear, per_panel)
    rows = tirx.min(tirx.const(panel, "int32"), gy - index * panel)
    return tirx.floordiv(offset, rows), index * panel + tirx.floormod(offset, rows)


def _remap_grid(bx, by, gx, gy, panel, order, cluster):
    """(new bx, new by). With 2-block clusters along `cluster` (0: x, 1: y), the pairs move as
    units: the remap runs on the grid of pairs and each block keeps its place in its pair, so the
    two blocks of a cluster still share their other index (the tile they multicast)."""
    if cluster == 0:
        two = tirx.const(2, _dtype(bx))
        rank, bx, gx = tirx.floormod(bx, two), tirx.floordiv(bx, two), tirx.floordiv(gx, two)
    elif cluster == 1:
        two = tirx.const(2, _dtype(by))
        rank, by, gy = tirx.floormod(by, two), tirx.floordiv(by, two), tirx.floordiv(gy, two)
    if cluster == (1 if order == 0 else 0):  # the panel runs across pairs: as many blocks as asked
        panel = max(1, panel // 2)
    if order == 0:
        nbx, nby = _remap(bx, by, gx, gy, panel)
    else:
        nby, nbx = _remap(by, bx, gy, gx, panel)
    if cluster == 0:
        nbx = nbx * two + rank
    elif cluster == 1:
        nby = nby * two + rank
    return nbx, nby


def _cluster_dim(stmts):
    """The grid dimension of the kernel's 2-block clusters (`inject_tma_pipelines`' `cluster_dims`
    record), or None."""
    for stmt in stmts:
        for ev in collect(stmt, tirx.Evaluate):
            if intrinsics.CLUSTER_DIMS.matches(ev):
                dims = intrinsics.CLUSTER_DIMS.template(ev)
                return [dims["x"], dims["y"], dims["z"]].index(2)
    return None


def _dtype(expr) -> str:
    return str(expr.ty.dtype)


def _cast(var, value):
    return value if _dtype(value) == _dtype(var) else tirx.Cast(_dtype(var), value)


def rasterize_blocks(func: tirx.PrimFunc) -> tirx.PrimFunc:
    scope = Scope()

    def on_seq(seq, recurse):
        stmts = list(seq.seq)
        for k, stmt in enumerate(stmts):
            if isinstance(stmt, tirx.Evaluate) and base.is_tile_op(stmt.value, NAME) and const_int(stmt.value.args[0]):
                if "blockIdx.x" not in scope.threads or "blockIdx.y" not in scope.threads:
                    raise at_span("T.use_swizzle needs a kernel with a 2-D grid of blocks", stmt.span)
                panel, order = int(stmt.value.args[0].value), int(stmt.value.args[1].value)
                (bx, gx), (by, gy) = scope.threads["blockIdx.x"], scope.threads["blockIdx.y"]
                nbx, nby = _remap_grid(bx, by, gx, gy, panel, order, _cluster_dim(stmts[k + 1 :]))
                # A dynamic int64 grid (T.ceildiv(m, 128) with an int64 m) makes the remap int64;
                # each new index keeps its block index's dtype.
                vx, vy = tirx.Var(f"{bx.name}_r", _dtype(bx)), tirx.Var(f"{by.name}_r", _dtype(by))
                rest = [substitute(s, {bx: vx, by: vy}) for s in stmts[k + 1 :]]
                new = stmts[:k] + [tirx.Bind(vx, _cast(vx, nbx)), tirx.Bind(vy, _cast(vy, nby))] + rest
                return recurse(tirx.SeqStmt(new, span=seq.span))
        return recurse(seq)

    body = mutate_with_scope(func.body, scope, {tirx.SeqStmt: on_seq})

    def drop(stmt):  # a use_swizzle alone in a body (nothing after it to remap), or of panel 0 (launch order)
        return tirx.Evaluate(0) if base.is_tile_op(stmt.value, NAME) else stmt

    return func.with_body(tvm_ffi.structural_map(body, [(tirx.Evaluate, drop)]))

"""`T.cumsum(src, dst=None, dim=0, reverse=False)`: inclusive prefix sum of a shared tile along `dim`.

Lowering: the lines along `dim` are spread over the threads; each thread scans its lines serially
(a tile's lines are independent, so no synchronization is needed inside the scan).
"""

from __future__ import annotations

import functools

from tvm import tirx

from tilelang.errors import UserError
from tilelang.op import base
from tilelang.op.loops import over_items, over_threads
from tilelang.utils.ir import const_int, seq

NAME = "cumsum"
__all__ = ["cumsum"]


def cumsum(src, dst=None, dim: int = 0, reverse: bool = False):
    """dst[..., k, ...] = sum of src[..., 0..k, ...] along `dim` (from the end when `reverse`).

    Errors: UserError unless src and dst are shared tiles of one shape.

    Example: T.cumsum(S_shared, dim=1)
    """
    s = base.to_region(src, "T.cumsum source")
    d = base.to_region(dst if dst is not None else src, "T.cumsum destination")
    for r in (s, d):
        if r is None or r.buffer.scope() not in ("shared.dyn", "shared"):
            raise UserError("T.cumsum works on shared tiles; copy a fragment to a shared tile first")
    shape, dst_shape = _extents(s), _extents(d)
    if shape != dst_shape:
        raise UserError(
            f"T.cumsum: the source '{s.name}' has shape {shape} here but the destination '{d.name}' {dst_shape}"
        )
    if not -len(shape) <= dim < len(shape):
        raise UserError(f"T.cumsum: dim {dim} is out of range for the {len(shape)}-d tile '{s.name}'")
    # `dim` counted from the last dimension: a pipeline that gives the tile a leading stage dimension
    # (its copies multi-buffered) leaves it pointing at the same axis.
    return base.make_call(
        NAME,
        [
            s.to_ir(),
            d.to_ir(),
            tirx.const(dim % len(shape) - len(shape), "int32"),
            tirx.const(int(bool(reverse)), "int32"),
        ],
    )


def _extents(region) -> list:
    extents = [const_int(e) for e in region.extents]
    if any(e is None for e in extents):
        raise UserError(f"T.cumsum: the tile '{region.describe()}' must have constant extents")
    return extents


@base.register
class Cumsum(base.TileOp):
    """A parsed `tl.cumsum(src, dst, dim, reverse)` (shared tiles only: no fragments to lay out)."""

    name = NAME

    def __init__(self, call, span=None):
        super().__init__(call, span)
        self.src_region = base.Region.from_ir(call.args[0])
        self.dst_region = base.Region.from_ir(call.args[1])
        self.src, self.dst = self.src_region.buffer, self.dst_region.buffer
        self.dim, self.reverse = int(call.args[2].value), bool(int(call.args[3].value))

    def describe(self) -> str:
        return f"T.cumsum({self.src.name})"

    def lower(self, ctx) -> tirx.Stmt:
        return _lower(
            self.src_region, self.dst_region, self.dim, self.reverse, functools.partial(over_threads, ctx=ctx)
        )

    def lower_cpu(self, analyzer) -> tirx.Stmt:
        """One core scans every line in turn (the CPU target)."""
        return _lower(self.src_region, self.dst_region, self.dim, self.reverse, over_items)


def _lower(src, dst, dim, reverse, spread) -> tirx.Stmt:
    """Each line along `dim` (counted from the last dimension) of the region `src` scanned by one
    thread into the region `dst`; `spread(shape, body_fn)` hands the lines out."""
    # A pipeline may have given one of the two tiles a leading stage dimension (its region there has
    # extent 1) and not the other: the lines run over the longer shape, each region indexed by its own
    # trailing dimensions.
    shape = [int(e) for e in max(_extents(src), _extents(dst), key=len)]
    axis = dim % len(shape)
    length = shape[axis]
    dtype = str(dst.buffer.dtype)
    line_buf = tirx.decl_buffer((length,), dtype, "line", scope="local")
    k, q, w = (tirx.Var(n, "int32") for n in ("k", "q", "w"))  # one variable per loop: each bound once

    def at(region, coords, pos):
        idx = list(coords)
        idx.insert(axis, (length - 1 - pos) if reverse else pos)
        idx = idx[len(idx) - len(region.starts) :]
        return [start + i for start, i in zip(region.starts, idx)]

    def body(coords, guard):
        # The line is read into registers, scanned, and written back as separate phases: the barrier
        # that orders every thread's reads before the in-place writes goes between two guarded
        # statements, never inside a guard.
        value = tirx.BufferLoad(src.buffer, at(src, coords, k))
        if str(src.buffer.dtype) != dtype:
            value = tirx.Cast(dtype, value)
        read = tirx.For(k, 0, length, tirx.ForKind.SERIAL, tirx.BufferStore(line_buf, value, [k]))
        running = tirx.BufferLoad(line_buf, [q]) + tirx.BufferLoad(line_buf, [q - 1])
        scan = tirx.For(q, 1, length - 1, tirx.ForKind.SERIAL, tirx.BufferStore(line_buf, running, [q]))
        stored = tirx.BufferStore(dst.buffer, tirx.BufferLoad(line_buf, [w]), at(dst, coords, w))
        write = tirx.For(w, 0, length, tirx.ForKind.SERIAL, stored)
        return seq([tirx.AllocBuffer(line_buf), guard(read), scan, guard(write)])

    return spread([n for d, n in enumerate(shape) if d != axis], body_fn=body)

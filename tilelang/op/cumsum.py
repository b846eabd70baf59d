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
from tilelang.utils.ir import seq

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
    shape = [int(x) for x in s.buffer.shape]
    if shape != [int(x) for x in d.buffer.shape]:
        raise UserError(
            f"T.cumsum: '{s.name}' has shape {shape} but '{d.name}' has shape {[int(x) for x in d.buffer.shape]}"
        )
    if not -len(shape) <= dim < len(shape):
        raise UserError(f"T.cumsum: dim {dim} is out of range for the {len(shape)}-d tile '{s.name}'")
    return base.make_call(
        NAME, [s.to_ir(), d.to_ir(), tirx.const(dim % len(shape), "int32"), tirx.const(int(bool(reverse)), "int32")]
    )


@base.register
class Cumsum(base.TileOp):
    """A parsed `tl.cumsum(src, dst, dim, reverse)` (shared tiles only: no fragments to lay out)."""

    name = NAME

    def __init__(self, call, span=None):
        super().__init__(call, span)
        self.src = base.Region.from_ir(call.args[0]).buffer
        self.dst = base.Region.from_ir(call.args[1]).buffer
        self.dim, self.reverse = int(call.args[2].value), bool(int(call.args[3].value))

    def describe(self) -> str:
        return f"T.cumsum({self.src.name})"

    def lower(self, ctx) -> tirx.Stmt:
        return _lower(self.src, self.dst, self.dim, self.reverse, functools.partial(over_threads, ctx=ctx))

    def lower_cpu(self, analyzer) -> tirx.Stmt:
        """One core scans every line in turn (the CPU target)."""
        return _lower(self.src, self.dst, self.dim, self.reverse, over_items)


def _lower(src, dst, dim, reverse, spread) -> tirx.Stmt:
    """Each line along `dim` scanned by one thread; `spread(shape, body_fn)` hands the lines out."""
    shape = [int(x) for x in src.shape]
    length = shape[dim]
    dtype = str(dst.dtype)
    line_buf = tirx.decl_buffer((length,), dtype, "line", scope="local")
    k, q, w = (tirx.Var(n, "int32") for n in ("k", "q", "w"))  # one variable per loop: each bound once

    def at(coords, pos):
        idx = list(coords)
        idx.insert(dim, (length - 1 - pos) if reverse else pos)
        return idx

    def body(coords, guard):
        # The line is read into registers, scanned, and written back as separate phases: the barrier
        # that orders every thread's reads before the in-place writes goes between two guarded
        # statements, never inside a guard.
        value = tirx.BufferLoad(src, at(coords, k))
        if str(src.dtype) != dtype:
            value = tirx.Cast(dtype, value)
        read = tirx.For(k, 0, length, tirx.ForKind.SERIAL, tirx.BufferStore(line_buf, value, [k]))
        running = tirx.BufferLoad(line_buf, [q]) + tirx.BufferLoad(line_buf, [q - 1])
        scan = tirx.For(q, 1, length - 1, tirx.ForKind.SERIAL, tirx.BufferStore(line_buf, running, [q]))
        write = tirx.For(
            w, 0, length, tirx.ForKind.SERIAL, tirx.BufferStore(dst, tirx.BufferLoad(line_buf, [w]), at(coords, w))
        )
        return seq([tirx.AllocBuffer(line_buf), guard(read), scan, guard(write)])

    return spread([n for d, n in enumerate(shape) if d != dim], body_fn=body)

"""`T.fill(buffer, value)` and `T.clear(buffer)`: set every element of a tile.

Lowering: a `T.Parallel` loop nest over the region storing the value, so layout inference spreads
it over the threads like any element-wise loop.
"""

from __future__ import annotations

from tvm import tirx

from tilelang.op import base
from tilelang.op.loops import build_parallel_nest

NAME = "fill"
__all__ = ["fill", "clear"]


def _region(buffer, what: str) -> base.Region:
    """The filled region: a buffer, a slice, or one element (`x[0]`, a `T.alloc_var`)."""
    region = base.to_region(buffer, what)
    if region is None:  # one element, given by its indices
        load = buffer.scalar if hasattr(buffer, "scalar") else buffer
        region = base.Region(load.source, list(load.indices), [tirx.const(1, "int32")] * len(load.indices))
    return region


def fill(buffer, value):
    """Set every element of `buffer` (a buffer, a slice of one, or one element) to `value`.

    Fragments and shared tiles are filled by the block's threads together; a `T.alloc_local` or
    `T.alloc_var` buffer belongs to each thread, which fills its own.

    Errors: UserError if `buffer` is not a buffer, a slice or an element.

    Example: T.fill(acc, -T.infinity("float32"))
    """
    region = _region(buffer, "T.fill")
    value = tirx.const(value, region.buffer.dtype) if isinstance(value, (int, float)) else value
    if value.ty.dtype != region.buffer.dtype if hasattr(value, "ty") else False:
        value = tirx.Cast(region.buffer.dtype, value)
    return base.make_call(NAME, [region.to_ir(), value])


def clear(buffer):
    """Set every element of `buffer` to zero. Example: T.clear(C_local)"""
    return fill(buffer, 0)


@base.register
class Fill(base.TileOp):
    """A parsed `tl.fill(region, value)`."""

    name = NAME
    expands = True

    def __init__(self, call, span=None):
        super().__init__(call, span)
        self.region = base.Region.from_ir(call.args[0])
        self.value = call.args[1]

    def describe(self) -> str:
        return f"T.fill({self.region.name})"

    def writes(self) -> list:
        return [self.region.buffer]

    def expand(self, analyzer=None) -> tirx.Stmt:
        """The fill as a parallel loop nest over the region; over a thread's own (local) buffer,
        serial loops every thread runs."""

        def body(idx, _loop_vars):
            return tirx.BufferStore(self.region.buffer, self.value, idx)

        nest = build_parallel_nest(self.region, body, span=self.span)
        if self.region.buffer.scope() != "local":
            return nest

        def serial(stmt):
            if not isinstance(stmt, tirx.For):
                return stmt
            return tirx.For(
                stmt.loop_var, stmt.min, stmt.extent, tirx.ForKind.SERIAL, serial(stmt.body), span=stmt.span
            )

        return serial(nest)

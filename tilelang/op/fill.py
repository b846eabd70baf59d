"""`T.fill(buffer, value)` and `T.clear(buffer)`: set every element of a tile.

Lowering: a `T.Parallel` loop nest over the region storing the value, so layout inference spreads
it over the threads like any element-wise loop.
"""

from __future__ import annotations

from tvm import tirx

from tilelang.errors import UserError
from tilelang.op import base
from tilelang.op.loops import build_parallel_nest

NAME = "fill"
__all__ = ["fill", "clear"]


def fill(buffer, value):
    """Set every element of `buffer` (a buffer or a slice of one) to `value`.

    Errors: UserError if `buffer` is not a buffer or slice.

    Example: T.fill(acc, -T.infinity("float32"))
    """
    region = base.to_region(buffer, "T.fill")
    if region is None:
        raise UserError("T.fill: expected a buffer or a slice, got a single element")
    value = tirx.const(value, region.buffer.dtype) if isinstance(value, (int, float)) else value
    if value.ty.dtype != region.buffer.dtype if hasattr(value, "ty") else False:
        value = tirx.Cast(region.buffer.dtype, value)
    return base.make_call(NAME, [region.to_ir(), value])


def clear(buffer):
    """Set every element of `buffer` to zero. Example: T.clear(C_local)"""
    region = base.to_region(buffer, "T.clear")
    if region is None:
        raise UserError("T.clear: expected a buffer or a slice, got a single element")
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

    def expand(self, analyzer=None) -> tirx.Stmt:
        """The fill as a parallel loop nest over the region."""

        def body(idx, _loop_vars):
            return tirx.BufferStore(self.region.buffer, self.value, idx)

        return build_parallel_nest(self.region, body, span=self.span)

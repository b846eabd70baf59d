"""`T.atomic_add(dst, value)`: add into global or shared memory atomically.

Scalar form: `T.atomic_add(C[i, j], v)` adds one value to one element. Tile form:
`T.atomic_add(C[by * 64, bx * 64], C_local)` adds a whole tile (the extent of a start element comes
from the other side, as for `T.copy`); it lowers like a copy, to a `T.Parallel` loop of element
atomics that layout inference spreads over the threads. Out-of-bounds elements of a partial tile
are skipped.
"""

from __future__ import annotations

from tvm import ir, tirx

from tilelang.errors import UserError
from tilelang.op import base
from tilelang.op.loops import build_parallel_nest
from tilelang.utils.ir import is_one, is_zero

NAME = "atomic_add"
__all__ = ["atomic_add"]
ELEMENT = "tl::atomic_add"


def element_atomic_add_call(dst_load, value):
    """`*&dst += value`, atomically, as a call expression."""
    dtype = str(dst_load.source.dtype)
    if str(value.ty.dtype) != dtype:
        value = tirx.Cast(dtype, value)
    return tirx.call_extern("void", ELEMENT, tirx.address_of(dst_load), value)


def element_atomic_add(dst_load, value) -> tirx.Stmt:
    """The statement form of `element_atomic_add_call`, used inside loops."""
    return tirx.Evaluate(element_atomic_add_call(dst_load, value))


def atomic_add(dst, value, memory_order=None, return_prev=False, use_tma=False):
    """Atomically add `value` to `dst` (an element, or a tile as in T.copy).

    Errors: UserError if the tile shapes differ or dst is a fragment.

    Example:
        T.atomic_add(Out[by * 64, bx * 64], acc)   # tile
        T.atomic_add(Count[0], 1)                  # one element
    """
    if return_prev or use_tma or memory_order is not None:
        raise UserError("T.atomic_add: return_prev, use_tma and memory_order are not supported")
    if isinstance(dst, ir.TensorLoad) and not (base.is_buffer(value) or isinstance(value, ir.TensorRegion)):
        if dst.source.scope() in ("local", "local.fragment"):
            raise UserError(
                f"T.atomic_add: '{dst.source.name}' is in {dst.source.scope()} memory; atomics are "
                f"for global or shared memory"
            )
        value = tirx.const(value, str(dst.source.dtype)) if isinstance(value, (int, float)) else value
        return element_atomic_add_call(dst, value)  # the parser makes the statement
    src_region, dst_region = base.to_region_pair(value, dst, "T.atomic_add")
    if dst_region.buffer.scope() in ("local", "local.fragment"):
        raise UserError(f"T.atomic_add: the destination '{dst_region.name}' must be in global or shared memory")
    s_tile, d_tile = src_region.nonunit_extents(), dst_region.nonunit_extents()
    if len(s_tile) != len(d_tile) or not all(base.same_extent(a, b) for a, b in zip(s_tile, d_tile)):
        raise UserError(
            f"T.atomic_add: the value {src_region.describe()} and the destination "
            f"{dst_region.describe()} are tiles of different shapes"
        )
    return base.make_call(NAME, [src_region.to_ir(), dst_region.to_ir()])


@base.register
class AtomicAdd(base.TileOp):
    """A parsed tile `tl.atomic_add(value region, destination region)`."""

    name = NAME
    expands = True

    def __init__(self, call, span=None):
        super().__init__(call, span)
        self.src = base.Region.from_ir(call.args[0])
        self.dst = base.Region.from_ir(call.args[1])

    def describe(self) -> str:
        return f"T.atomic_add({self.dst.name}, {self.src.name})"

    def expand(self, analyzer=None) -> tirx.Stmt:
        """The tile form as a parallel loop of element atomics."""
        s, d = self.src, self.dst
        src_dims = [k for k, e in enumerate(s.extents) if not is_one(e)]

        def body(dst_idx, loop_vars):
            src_idx = list(s.starts)
            for ks, v in zip(src_dims, loop_vars):
                src_idx[ks] = v if is_zero(s.starts[ks]) else s.starts[ks] + v
            return element_atomic_add(tirx.BufferLoad(d.buffer, dst_idx), tirx.BufferLoad(s.buffer, src_idx))

        return build_parallel_nest(d, body, span=self.span)

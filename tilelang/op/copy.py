"""`T.copy(src, dst)`: move a tile between global, shared, fragment and local buffers.

Either side may be a whole buffer, a slice (`Q[b, i0:i1, h, :]`) or a start element whose extent
comes from the other side (`T.copy(A[by * 128, k * 32], A_shared)`). The tile shapes of the two
sides (their extents with unit dimensions dropped) must agree. A copy converts dtypes.

Lowering (SIMT form, every target): a `T.Parallel` loop nest `dst[...] = cast(src[...])`, so
layout inference distributes it over the threads and vectorizes it; out-of-bounds elements of a
global tile are predicated by `legalize_safe_memory_access`.
"""

from __future__ import annotations

from tvm import tirx

from tilelang.errors import UserError, at_span
from tilelang.op import base
from tilelang.op.loops import build_parallel_nest
from tilelang.utils.ir import const_int, is_one, is_zero

NAME = "copy"
ASYNC_COPY = "tl.async_copy"  # loop annotation: lower the vectorized stores to cp.async


def copy(src, dst, *, coalesced_width=None, disable_tma=False, eviction_policy=None, annotations=None):
    """Copy the tile `src` into `dst`, converting the dtype if they differ.

    Args:
        src, dst: a buffer, a slice of a buffer, or a start element (extent from the other side).
        coalesced_width: vector width (elements) to use for the copy's accesses.

    Errors:
        UserError if the two tiles have different shapes, or both sides are single elements.

    Example:
        T.copy(A[by * 128, k * 32], A_shared)
        T.copy(C_local, C[by * 128, bx * 128])
    """
    s, d = base.to_region_pair(src, dst, "T.copy")
    s_tile, d_tile = s.nonunit_extents(), d.nonunit_extents()
    if len(s_tile) != len(d_tile) or any(base.extents_differ(a, b) for a, b in zip(s_tile, d_tile)):
        raise UserError(_shape_mismatch(s, d))
    # The last argument marks a copy issued asynchronously (cp.async) by a pipelined loop.
    args = [s.to_ir(), d.to_ir(), tirx.const(int(coalesced_width or 0), "int32"), tirx.const(0, "int32")]
    return base.make_call(NAME, args)


def _shape_mismatch(s, d) -> str:
    return (
        f"T.copy: the source {s.describe()} is a tile of shape {_fmt(s.nonunit_extents())} but the "
        f"destination {d.describe()} is a tile of shape {_fmt(d.nonunit_extents())}; the shapes (without "
        f"unit dimensions) must match"
    )


def _fmt(extents) -> str:
    return "(" + ", ".join(str(e) for e in extents) + ")"


def lower_simt(call, span=None, analyzer=None) -> tirx.Stmt:
    """The copy as a parallel loop nest over the destination tile. With `analyzer` (knowing the
    kernel's bindings), extents that parsing could not compare must now be provably equal."""
    s = base.Region.from_ir(call.args[0])
    d = base.Region.from_ir(call.args[1])
    if analyzer is not None:
        pairs = zip(s.nonunit_extents(), d.nonunit_extents())
        if not all(base.same_extent(a, b) or analyzer.can_prove_equal(a, b) for a, b in pairs):
            raise at_span(_shape_mismatch(s, d), span)
    width = const_int(call.args[2]) or 0
    is_async = len(call.args) > 3 and const_int(call.args[3]) == 1
    src_dims = [k for k, e in enumerate(s.extents) if not is_one(e)]

    def body(dst_idx, loop_vars):
        src_idx = list(s.starts)
        for ks, v in zip(src_dims, loop_vars):
            src_idx[ks] = v if is_zero(s.starts[ks]) else s.starts[ks] + v
        value = tirx.BufferLoad(s.buffer, src_idx)
        if s.buffer.dtype != d.buffer.dtype:
            value = tirx.Cast(str(d.buffer.dtype), value)
        return tirx.BufferStore(d.buffer, value, dst_idx)

    loop = build_parallel_nest(d, body, span=span)
    ann = {}
    if width:
        ann["coalesced_width"] = width
    if is_async:
        ann[ASYNC_COPY] = 1
    if ann and isinstance(loop, tirx.For):
        loop = tirx.For(loop.loop_var, loop.min, loop.extent, loop.kind, loop.body, annotations=ann, span=loop.span)
    return loop

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
from tilelang.log import hint_once
from tilelang.op import base
from tilelang.op.loops import build_parallel_nest
from tilelang.utils.ir import const_int, is_one, is_zero

NAME = "copy"
__all__ = ["copy"]
ASYNC_COPY = "tl.async_copy"  # loop annotation: lower the vectorized stores to cp.async


EVICTION_POLICIES = ("evict_normal", "evict_first", "evict_last")
INSTRUCTIONS = ("tma", "cp_async", "sync")
_ANNOTATION_KEYS = ("coalesced_width", "disable_tma", "eviction_policy", "prefer_instruction")


def copy(
    src,
    dst,
    *,
    coalesced_width=None,
    disable_tma=False,
    eviction_policy=None,
    prefer_instruction=None,
    annotations=None,
    loop_layout=None,
):
    """Copy the tile `src` into `dst`, converting the dtype if they differ.

    Args:
        src, dst: a buffer, a slice of a buffer, or a start element (extent from the other side).
        coalesced_width: vector width (elements) to use for the copy's accesses.
        disable_tma: keep this copy off the Tensor Memory Accelerator (sm_90a): a pipelined loop
            holding it loads with cp.async instead, and a copy outside loops stays a thread copy.
        eviction_policy: "evict_normal", "evict_first" or "evict_last": an L2 cache hint, accepted
            and not applied (logged once at INFO).
        prefer_instruction: "tma", "cp_async" or "sync": a preference, accepted; the compiler
            chooses the instruction (logged once at INFO).
        annotations: the same keywords as a dict (its values take precedence, as in TileLang).
        loop_layout: not supported on a copy: write the copy as a T.Parallel loop with loop_layout.

    Errors:
        UserError if the two tiles have different shapes, both sides are single elements, or an
        argument has a value the copy does not know.

    Example:
        T.copy(A[by * 128, k * 32], A_shared)
        T.copy(C_local, C[by * 128, bx * 128])
    """
    given = {
        "coalesced_width": coalesced_width,
        "disable_tma": disable_tma,
        "eviction_policy": eviction_policy,
        "prefer_instruction": prefer_instruction,
    }
    for key, value in (annotations or {}).items():
        if key not in _ANNOTATION_KEYS:
            raise UserError(f"T.copy: unknown annotation '{key}'; the annotations a copy takes are {_ANNOTATION_KEYS}")
        given[key] = value
    if loop_layout is not None:
        raise UserError(
            "T.copy: loop_layout is not supported on a copy; write it as a loop, "
            "`for i, j in T.Parallel(m, n, loop_layout=layout): dst[i, j] = src[i, j]`"
        )
    policy, prefer = given["eviction_policy"], given["prefer_instruction"]
    if policy is not None:
        if policy not in EVICTION_POLICIES:
            raise UserError(f"T.copy: eviction_policy must be one of {EVICTION_POLICIES}, got {policy!r}")
        hint_once("copy.eviction_policy", f"T.copy(eviction_policy={policy!r}): a cache hint tilelang does not apply")
    if prefer is not None:
        if prefer not in INSTRUCTIONS:
            raise UserError(f"T.copy: prefer_instruction must be one of {INSTRUCTIONS}, got {prefer!r}")
        hint_once("copy.prefer_instruction", f"T.copy(prefer_instruction={prefer!r}): tilelang chooses the instruction")
    s, d = base.to_region_pair(src, dst, "T.copy")
    s_tile, d_tile = s.nonunit_extents(), d.nonunit_extents()
    if len(s_tile) != len(d_tile) or any(base.extents_differ(a, b) for a, b in zip(s_tile, d_tile)):
        raise UserError(_shape_mismatch(s, d))
    # The fourth argument marks a copy issued asynchronously (cp.async) by a pipelined loop.
    args = [
        s.to_ir(),
        d.to_ir(),
        tirx.const(int(given["coalesced_width"] or 0), "int32"),
        tirx.const(0, "int32"),
        tirx.const(int(bool(given["disable_tma"])), "int32"),
    ]
    return base.make_call(NAME, args)


def _shape_mismatch(s, d) -> str:
    return (
        f"T.copy: the source {s.describe()} is a tile of shape {_fmt(s.nonunit_extents())} but the "
        f"destination {d.describe()} is a tile of shape {_fmt(d.nonunit_extents())}; the shapes (without "
        f"unit dimensions) must match"
    )


def _fmt(extents) -> str:
    return "(" + ", ".join(str(e) for e in extents) + ")"


@base.register
class Copy(base.TileOp):
    """A parsed `tl.copy(src, dst, coalesced_width, async)`."""

    name = NAME
    expands = True

    def __init__(self, call, span=None):
        super().__init__(call, span)
        self.src = base.Region.from_ir(call.args[0])
        self.dst = base.Region.from_ir(call.args[1])
        self.coalesced_width = const_int(call.args[2]) or 0
        # Set by the pipeline planner: the copy is issued asynchronously (cp.async).
        self.is_async = len(call.args) > 3 and const_int(call.args[3]) == 1
        # T.copy(disable_tma=True): the TMA planners leave it to threads or cp.async.
        self.disable_tma = len(call.args) > 4 and const_int(call.args[4]) == 1

    def describe(self) -> str:
        return f"T.copy({self.src.name}, {self.dst.name})"

    def writes(self) -> list:
        return [self.dst.buffer]

    def async_load(self) -> base.AsyncLoad | None:
        if self.src.buffer.scope() != "global" or not self.dst.buffer.scope().startswith("shared"):
            return None
        return base.AsyncLoad(self.src, self.dst, tma=not self.disable_tma)

    def issued_async(self):
        """The copy with its asynchronous flag set: `expand` marks its loop for cp.async."""
        args = list(self.call.args)
        return base.make_call(NAME, args[:3] + [tirx.const(1, "int32")] + args[4:])

    def expand(self, analyzer=None) -> tirx.Stmt:
        """The copy as a parallel loop nest over the destination tile. With `analyzer` (knowing the
        kernel's bindings), extents that parsing could not compare must now be provably equal."""
        s, d = self.src, self.dst
        if analyzer is not None:
            pairs = zip(s.nonunit_extents(), d.nonunit_extents())
            if not all(base.same_extent(a, b) or analyzer.can_prove_equal(a, b) for a, b in pairs):
                raise at_span(_shape_mismatch(s, d), self.span)
        src_dims = [k for k, e in enumerate(s.extents) if not is_one(e)]

        def body(dst_idx, loop_vars):
            src_idx = list(s.starts)
            for ks, v in zip(src_dims, loop_vars):
                src_idx[ks] = v if is_zero(s.starts[ks]) else s.starts[ks] + v
            value = tirx.BufferLoad(s.buffer, src_idx)
            if s.buffer.dtype != d.buffer.dtype:
                value = tirx.Cast(str(d.buffer.dtype), value)
            return tirx.BufferStore(d.buffer, value, dst_idx)

        ann = {}
        if self.coalesced_width:
            ann["coalesced_width"] = self.coalesced_width
        if self.is_async:
            ann[ASYNC_COPY] = 1
        return build_parallel_nest(d, body, span=self.span, annotations=ann)

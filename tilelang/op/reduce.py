"""Tile reductions: `T.reduce_max/min/sum/abssum/absmax(src, dst, dim, clear)`.

`src` is a fragment or shared tile, `dst` has the same shape without dimension `dim`.

Layout rule: the result lives in every thread that held part of the reduced row, at one register
slot per row (`layout.fragment.reduced`); those threads form digit ranges of the thread id.

Lowering (fragments): each thread folds the elements it holds into one partial per row; partials
are combined across the row's threads with butterfly warp shuffles (`__shfl_xor_sync`) for digit
ranges inside a warp, and through a shared-memory workspace for ranges that span warps; with
`clear=False` the result is then combined with what `dst` held. Shared-memory tiles: one thread
per output element folds its row. A fragment and a shared tile: the shared side is copied through a
fragment of its own when the kernel is traced (`_through_fragment`), as TileLang does.
"""

from __future__ import annotations

import functools

from tvm import ir, tirx
from tvm.script.ir_builder import IRBuilder
from tvm.script.ir_builder import tirx as _tb

from tilelang.errors import UserError
from tilelang.layout import fragment as fl
from tilelang.op import base
from tilelang.op.loops import over_items, over_threads
from tilelang.utils.ir import i32 as _c
from tilelang.utils.ir import seq

NAME = "reduce"
__all__ = ["reduce", "reduce_max", "reduce_min", "reduce_sum", "reduce_abssum", "reduce_absmax"]
KINDS = ("max", "min", "sum", "abssum", "absmax")
FRAGMENT = "local.fragment"


def _fold(kind, a, b):
    if kind in ("max", "absmax"):
        return tirx.max(a, b)
    if kind == "min":
        return tirx.min(a, b)
    return a + b


def _prepare(kind, x):
    return tirx.abs(x) if kind in ("abssum", "absmax") else x


def identity(kind, dtype):
    if kind == "max":
        return tirx.min_value(dtype)
    if kind == "min":
        return tirx.max_value(dtype)
    return tirx.const(0, dtype)


def reduce(src, dst, reduce_type: str, dim: int = -1, clear: bool = True):
    """Reduce `src` along `dim` into `dst` with `reduce_type` in max/min/sum/abssum/absmax."""
    if reduce_type not in KINDS:
        raise UserError(f"T.reduce: unknown reduce_type {reduce_type!r}; expected one of {KINDS}")
    s = base.to_region(src, f"T.reduce_{reduce_type} source")
    d = base.to_region(dst, f"T.reduce_{reduce_type} destination")
    if s is None or d is None:
        raise UserError(f"T.reduce_{reduce_type}: source and destination must be buffers")
    for r, what in ((s, "source"), (d, "destination")):
        if r.buffer.scope() not in ("local.fragment", "shared.dyn", "shared"):
            raise UserError(
                f"T.reduce_{reduce_type}: the {what} '{r.name}' must be a fragment or a shared "
                f"tile, not {r.buffer.scope()} memory"
            )
    src_shape = [int(x) for x in s.buffer.shape]
    dst_shape = [int(x) for x in d.buffer.shape]
    ndim = len(src_shape)
    if not -ndim <= dim < ndim:
        raise UserError(f"T.reduce_{reduce_type}: dim {dim} is out of range for the {ndim}-d source '{s.name}'")
    dim %= ndim
    expected = [n for k, n in enumerate(src_shape) if k != dim] or [1]
    if dst_shape != expected:
        raise UserError(
            f"T.reduce_{reduce_type}: reducing '{s.name}' of shape {src_shape} along dim {dim} "
            f"gives shape {expected}, but the destination '{d.name}' has shape {dst_shape}"
        )
    if (s.buffer.scope() == FRAGMENT) != (d.buffer.scope() == FRAGMENT):
        return _through_fragment(s.buffer, d.buffer, reduce_type, dim, clear)
    return _call(s, d, reduce_type, dim, clear)


def _call(s, d, reduce_type, dim, clear):
    flags = [tirx.const(dim, "int32"), tirx.const(int(bool(clear)), "int32")]
    return base.make_call(NAME, [s.to_ir(), d.to_ir(), ir.StringImm(reduce_type), *flags])


def _through_fragment(src, dst, reduce_type, dim, clear) -> None:
    """A reduction between a fragment and a shared tile, as TileLang writes it: the shared side is
    copied through a fragment of its own (`<name>_frag`), and the reduction runs on fragments. With
    clear=False into a shared tile, the tile's values are copied in first. Emits the statements."""
    from tilelang.op.copy import copy

    def fragment_of(tile):
        return IRBuilder.name(f"{tile.name}_frag", _tb.alloc_buffer(tile.shape, str(tile.dtype), scope=FRAGMENT))

    def region(buf):
        return base.to_region(buf, f"T.reduce_{reduce_type}")

    if src.scope() != FRAGMENT:
        staged = fragment_of(src)
        _tb.evaluate(copy(src, staged))
        _tb.evaluate(_call(region(staged), region(dst), reduce_type, dim, clear))
        return
    staged = fragment_of(dst)
    if not clear:
        _tb.evaluate(copy(dst, staged))
    _tb.evaluate(_call(region(src), region(staged), reduce_type, dim, clear))
    _tb.evaluate(copy(staged, dst))


def reduce_max(buffer, out, dim: int = -1, clear: bool = True):
    """out[i] = max_j buffer[i, j] (for dim=1). Example: T.reduce_max(acc_s, scores_max, dim=1)"""
    return reduce(buffer, out, "max", dim, clear)


def reduce_min(buffer, out, dim: int = -1, clear: bool = True):
    """out = minimum of `buffer` along `dim`."""
    return reduce(buffer, out, "min", dim, clear)


def reduce_sum(buffer, out, dim: int = -1, clear: bool = True):
    """out = sum of `buffer` along `dim`; with clear=False, added to what `out` holds."""
    return reduce(buffer, out, "sum", dim, clear)


def reduce_abssum(buffer, out, dim: int = -1, clear: bool = True):
    """out = sum of |buffer| along `dim`."""
    return reduce(buffer, out, "abssum", dim, clear)


def reduce_absmax(buffer, out, dim: int = -1, clear: bool = True):
    """out = max of |buffer| along `dim`."""
    return reduce(buffer, out, "absmax", dim, clear)


@base.register
class Reduce(base.TileOp):
    """A parsed `tl.reduce(src, dst, kind, dim, clear)`."""

    name = NAME

    def __init__(self, call, span=None):
        super().__init__(call, span)
        self.src = base.Region.from_ir(call.args[0]).buffer
        self.dst = base.Region.from_ir(call.args[1]).buffer
        self.kind = str(call.args[2].value)
        self.dim = int(call.args[3].value)
        self.clear = bool(int(call.args[4].value))

    @property
    def on_fragments(self) -> bool:
        return self.src.scope() == "local.fragment" and self.dst.scope() == "local.fragment"

    def describe(self) -> str:
        return f"T.reduce_{self.kind}({self.src.name}, {self.dst.name})"

    def fragments(self) -> list:
        return [self.src, self.dst] if self.on_fragments else []

    def infers_layouts(self) -> bool:
        return self.on_fragments

    def common_layouts(self, known: dict) -> dict | None:
        """The destination holds each row's result where the row's threads are (common level)."""
        if self.src not in known:
            return None
        return {self.dst: infer_dst_layout(known[self.src], self.dim, self.span)}

    def lower(self, ctx) -> tirx.Stmt:
        if self.on_fragments:
            return _lower_fragment(self, ctx)
        if self.src.scope() == "local.fragment" or self.dst.scope() == "local.fragment":
            raise UserError(
                f"T.reduce_{self.kind}: source '{self.src.name}' and destination '{self.dst.name}' must "
                f"both be fragments or both be shared tiles"
            )
        return _lower_shared(self, functools.partial(over_threads, ctx=ctx))

    def lower_cpu(self, analyzer) -> tirx.Stmt:
        """One core holds the whole tile, whatever its scope: each output element folds its row."""
        return _lower_shared(self, over_items)


# ---- layout rule ---------------------------------------------------------------------------------


def infer_dst_layout(src_layout: fl.Fragment, dim: int, span) -> fl.Fragment:
    from tilelang.errors import at_span

    try:
        return fl.reduced(src_layout, dim)
    except fl.IrregularLayout as err:
        raise at_span(
            f"T.reduce: cannot reduce along dim {dim}: the threads holding one row do not form a regular group ({err})",
            span,
        ) from None


# ---- lowering ------------------------------------------------------------------------------------


def _lower_fragment(red: Reduce, ctx) -> tirx.Stmt:
    ana = ctx.analyzer
    src_l, dst_l = ctx.fragment_layout(red.src), ctx.fragment_layout(red.dst)
    src_local, dst_local = ctx.local_of(red.src), ctx.local_of(red.dst)
    dtype = str(red.dst.dtype)
    slots = dst_l.local_size
    acc = tirx.decl_buffer((slots,), dtype, f"{red.dst.name}_partial", scope="local")
    stmts = [tirx.AllocBuffer(acc)]
    s = tirx.Var("s", "int32")
    stmts.append(
        tirx.For(s, _c(0), _c(slots), tirx.ForKind.UNROLLED, tirx.BufferStore(acc, identity(red.kind, dtype), [s]))
    )
    # 1. in-thread: fold each register of src into its row's partial.
    r = tirx.Var("r", "int32")
    ana.bind(r, ir.Range(0, src_l.local_size))
    elem, valid = src_l.inverse()(ctx.thread, r)
    row = [ana.simplify(e) for k, e in enumerate(elem) if k != red.dim] or [_c(0)]
    _, slot = dst_l.map(row)
    slot = ana.simplify(slot)
    value = _prepare(red.kind, tirx.BufferLoad(src_local, [r]))
    if str(red.src.dtype) != dtype:
        value = tirx.Cast(dtype, value)
    fold = tirx.BufferStore(acc, _fold(red.kind, tirx.BufferLoad(acc, [slot]), value), [slot])
    if not (isinstance(valid, tirx.IntImm) and valid.value == 1):
        fold = tirx.IfThenElse(valid, fold, None)
    stmts.append(tirx.For(r, _c(0), _c(src_l.local_size), tirx.ForKind.UNROLLED, fold))
    # 2. across the threads of each row: lanes of a warp by shuffles, then warps through shared memory
    # (each copy of a replicated source on its own: combining copies would count elements twice).
    for stride, count in _split_at_warp(fl.reduced_groups(src_l, red.dim)):
        stmts.append(_combine_group(red, ctx, acc, slots, stride, count))
    # 3. write the result.
    combine = tirx.BufferLoad(acc, [s])
    if not red.clear:
        combine = _fold(red.kind, tirx.BufferLoad(dst_local, [s]), combine)
    stmts.append(tirx.For(s, _c(0), _c(slots), tirx.ForKind.UNROLLED, tirx.BufferStore(dst_local, combine, [s])))
    return seq(stmts)


def _is_pow2(n: int) -> bool:
    return n > 0 and n & (n - 1) == 0


def _split_at_warp(groups):
    """Split digit ranges that straddle the warp boundary (32 lanes) into a part inside the warp,
    combined with shuffles, and a part across warps."""
    out = []
    for stride, count in groups:
        if _is_pow2(stride) and _is_pow2(count) and stride < 32 < stride * count:
            inside = 32 // stride
            out += [(stride, inside), (32, count // inside)]
        else:
            out.append((stride, count))
    return out


def _check_whole_warps(red, ctx) -> None:
    """Shuffles name all 32 lanes of a warp (`tl::shfl_xor`): a last, partial warp has lanes that do
    not exist, and the shuffle is undefined there."""
    from tilelang.errors import at_span

    threads = ctx.block_thread[1]
    if threads % 32:
        raise at_span(
            f"{red.describe()} combines each row across threads with warp shuffles, which need whole "
            f"warps; the kernel has {threads} threads, not a multiple of 32 (use threads={-(-threads // 32) * 32})",
            ctx.kernel_span,
            red.span,
        )


def _combine_group(red, ctx, acc, slots, stride, count) -> tirx.Stmt:
    """All-reduce `acc` over the `count` threads `thread + d * stride`."""
    dtype = str(acc.dtype)
    s = tirx.Var("s", "int32")
    if stride * count <= 32 and _is_pow2(stride) and _is_pow2(count):
        _check_whole_warps(red, ctx)
        body = []
        offset = stride
        while offset < stride * count:
            other = tirx.call_extern(dtype, "tl::shfl_xor", tirx.BufferLoad(acc, [s]), _c(offset))
            body.append(tirx.BufferStore(acc, _fold(red.kind, tirx.BufferLoad(acc, [s]), other), [s]))
            offset *= 2
        return tirx.For(s, _c(0), _c(slots), tirx.ForKind.UNROLLED, seq(body))
    # Across warps: every thread publishes its partials (all slots at once, so one barrier pair
    # serves every row it holds), then folds those of its group. The barriers between the writes and
    # the reads (and before the next writes) come from the thread_sync pass.
    # Indexed by the kernel's thread (not the thread branch's): branches running side by side
    # share the workspace without overlapping.
    block_thread, n = ctx.block_thread
    offset = ctx.thread_offset
    work = ctx.workspace(slots * n, dtype)
    d = tirx.Var("d", "int32")
    group_base = fl.clear_groups(ctx.thread, [(stride, count)])
    if offset:
        group_base = group_base + _c(offset)
    theirs = tirx.BufferLoad(work, [s * _c(n) + group_base + d * _c(stride)])
    publish = tirx.BufferStore(work, tirx.BufferLoad(acc, [s]), [s * _c(n) + block_thread])
    fold = tirx.BufferStore(acc, _fold(red.kind, tirx.BufferLoad(acc, [s]), theirs), [s])
    gather = seq(
        [
            tirx.BufferStore(acc, identity(red.kind, dtype), [s]),
            tirx.For(d, _c(0), _c(count), tirx.ForKind.UNROLLED, fold),
        ]
    )
    return seq(
        [
            tirx.For(s, _c(0), _c(slots), tirx.ForKind.UNROLLED, publish),
            tirx.For(s, _c(0), _c(slots), tirx.ForKind.UNROLLED, gather),
        ]
    )


def _lower_shared(red: Reduce, spread) -> tirx.Stmt:
    """Shared tiles: output elements spread over the threads (`spread(shape, body_fn)`:
    `over_threads`, or `over_items` on the CPU), each folding its row serially into a register; the
    writes are a separate guarded statement, so the barrier between every thread's reads and the
    writes sits between the two."""
    src, dst = red.src, red.dst
    dtype = str(dst.dtype)
    k = tirx.Var("k", "int32")
    buf = tirx.decl_buffer((1,), dtype, "acc", scope="local")

    def body(out_idx, guard):
        src_idx = list(out_idx) if len(src.shape) > 1 else []
        src_idx.insert(red.dim, k)
        value = _prepare(red.kind, tirx.BufferLoad(src, src_idx))
        if str(src.dtype) != dtype:
            value = tirx.Cast(dtype, value)
        init = identity(red.kind, dtype) if red.clear else tirx.BufferLoad(dst, out_idx)
        step = tirx.BufferStore(buf, _fold(red.kind, tirx.BufferLoad(buf, [_c(0)]), value), [_c(0)])
        fold = seq(
            [
                tirx.BufferStore(buf, init, [_c(0)]),
                tirx.For(k, _c(0), _c(int(src.shape[red.dim])), tirx.ForKind.SERIAL, step),
            ]
        )
        write = tirx.BufferStore(dst, tirx.BufferLoad(buf, [_c(0)]), out_idx)
        return seq([tirx.AllocBuffer(buf), guard(fold), guard(write)])

    return spread([int(x) for x in dst.shape], body_fn=body)

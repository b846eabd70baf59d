"""Reducers: `T.alloc_reducer(shape, dtype, op, replication)` and `T.finalize_reducer(reducer)`.

A reducer is a fragment that `T.Parallel` loops accumulate into with `op` ("sum": `r[i] += v`,
"max": `r[i] = T.max(r[i], v)`, "min"), from iterations that may run on any thread:

    o = T.alloc_reducer(block_M, "float32", replication="all")
    T.clear(o)
    for i, j in T.Parallel(block_M, block_N):
        o[i] += a[i, j] * x[j]          # each thread adds its own iterations into its own copy
    T.finalize_reducer(o)               # copies combined: every thread holds the sums
    T.copy(o, out[bm * block_M])

Layouts (fixed at the strict level, by the `tl.reducer` declaration `T.alloc_reducer` emits):
replication="all" gives every thread of the block a full copy (a fragment replicated over all
threads, so loops of any layout may accumulate into it); "none" (the default, as in TileLang)
spreads the elements over the threads, one holder each, so only loops over the reducer's own
elements may write it and finalizing has nothing to combine.

`T.finalize_reducer` lowers to the all-reduce of `allreduce.py` over the copies of each element:
shuffles within warps, then one shared-memory round across warps.
"""

from __future__ import annotations

from tvm import ir, tirx
from tvm.script.ir_builder import tirx as _tb

from tilelang.dtypes import canonical
from tilelang.errors import UserError, at_span
from tilelang.layout import fragment as fl
from tilelang.op import base
from tilelang.op.allreduce import all_reduce
from tilelang.utils.ir import i32 as _c

__all__ = ["alloc_reducer", "finalize_reducer"]
DECLARE = "reducer"  # the tile op T.alloc_reducer emits: the reducer's layout
FINALIZE = "finalize_reducer"
OPS = ("sum", "max", "min")
REPLICATIONS = ("all", "none")

# Reducers allocated while kernels are traced: buffer -> op (read by T.finalize_reducer).
_reducers: dict = {}


def alloc_reducer(shape, dtype, op: str = "sum", replication=None):
    """A fragment that T.Parallel loops accumulate into with `op` ("sum", "max" or "min") from any
    thread; fill it first (T.clear for sum, T.fill with -inf / T.min_value for max, +inf for min),
    and call T.finalize_reducer before reading the result.

    Args:
        shape: the reducer's shape (an int or a tuple of ints).
        dtype: its element type.
        op: how values are combined: "sum", "max" or "min".
        replication: "all" (every thread holds a full copy: loops of any shape may accumulate) or
            "none" / None (each element on one thread: only loops over the reducer's own shape).

    Errors: UserError for another op or replication, or a shape that is not constant.

    Example:
        o = T.alloc_reducer(128, "float32", replication="all")
    """
    if op not in OPS:
        raise UserError(f"T.alloc_reducer: op must be one of {list(OPS)}, got {op!r}")
    replication = "none" if replication is None else replication
    if replication not in REPLICATIONS:
        raise UserError(f"T.alloc_reducer: replication must be 'all', 'none' or None, got {replication!r}")
    dims = tuple(shape) if isinstance(shape, (tuple, list)) else (shape,)
    for d in dims:
        n = d.value if isinstance(d, tirx.IntImm) else d
        if not isinstance(n, int) or n <= 0:
            raise UserError(f"T.alloc_reducer: the shape must be positive constants, got {dims}")
    buffer = _tb.alloc_buffer(dims, canonical(dtype), scope="local.fragment")
    _reducers[buffer] = op
    region = base.Region(buffer, [_c(0) for _ in dims], [_c(int(d)) for d in dims])
    _tb.evaluate(base.make_call(DECLARE, [region.to_ir(), ir.StringImm(op), ir.StringImm(replication)]))
    return buffer


def finalize_reducer(reducer, batch: int = 1):
    """Combine the copies of every element of `reducer` (from T.alloc_reducer) with its op, so that
    every thread holding an element holds the combined value.

    `batch` (TileLang's: how many elements share one barrier) must be a positive divisor of the
    elements each thread holds; here every element already shares one barrier pair.

    Errors: UserError if `reducer` was not allocated with T.alloc_reducer, or batch is not positive.

    Example: T.finalize_reducer(o)
    """
    if not base.is_buffer(reducer) or reducer not in _reducers:
        name = getattr(reducer, "name", repr(reducer))
        raise UserError(f"T.finalize_reducer: '{name}' is not a reducer; allocate it with T.alloc_reducer")
    if not isinstance(batch, int) or batch < 1:
        raise UserError(f"T.finalize_reducer: batch must be a positive integer, got {batch!r}")
    region = base.to_region(reducer, "T.finalize_reducer")
    args = [region.to_ir(), ir.StringImm(_reducers[reducer]), tirx.const(batch, "int32")]
    return base.make_call(FINALIZE, args)


def _combine(op: str):
    def combine(xs, ys):
        x, y = xs[0], ys[0]
        return [tirx.max(x, y) if op == "max" else tirx.min(x, y) if op == "min" else x + y]

    return combine


def replicated_layout(shape, num_threads: int) -> fl.Fragment:
    """Every element held by every thread, at its row-major position in each thread's registers."""
    vars_ = fl.placeholder_vars(len(shape))
    flat = _c(0)
    for v, n in zip(vars_, shape):
        flat = flat * _c(n) + v
    return fl.Fragment(tuple(shape), vars_, _c(0), flat, num_threads, [(1, num_threads)])


@base.register
class Reducer(base.TileOp):
    """A parsed `tl.reducer(buffer, op, replication)`: where T.alloc_reducer fixes the layout."""

    name = DECLARE

    def __init__(self, call, span=None):
        super().__init__(call, span)
        self.buffer = base.Region.from_ir(call.args[0]).buffer
        self.op = str(call.args[1].value)
        self.replication = str(call.args[2].value)

    def describe(self) -> str:
        return f"T.alloc_reducer({self.buffer.name})"

    def fragments(self) -> list:
        return [self.buffer]

    def partial_fragments(self) -> list:
        """Fragments whose copies each accumulate a partial value until T.finalize_reducer combines
        them: a loop may write such a fragment on some of its copies only (layout inference's
        check that a write reaches every copy does not apply)."""
        return [self.buffer] if self.replication == "all" else []

    def strict_layouts(self, target, num_threads: int, options) -> tuple[dict, dict]:
        shape = tuple(int(n) for n in self.buffer.shape)
        if self.replication == "all":
            return {self.buffer: replicated_layout(shape, num_threads)}, {}
        return {self.buffer: fl.partition(shape, num_threads)}, {}

    def lower(self, ctx) -> tirx.Stmt:
        return tirx.Evaluate(0)  # a declaration: its layout is all it gives

    def lower_cpu(self, analyzer) -> tirx.Stmt:
        return tirx.Evaluate(0)  # one core, one copy of the reducer: it holds the whole value


@base.register
class FinalizeReducer(base.TileOp):
    """A parsed `tl.finalize_reducer(buffer, op, batch)`."""

    name = FINALIZE

    def __init__(self, call, span=None):
        super().__init__(call, span)
        self.buffer = base.Region.from_ir(call.args[0]).buffer
        self.op = str(call.args[1].value)
        self.batch = int(call.args[2].value)

    def describe(self) -> str:
        return f"T.finalize_reducer({self.buffer.name})"

    def fragments(self) -> list:
        return [self.buffer]

    def lower_cpu(self, analyzer) -> tirx.Stmt:
        return tirx.Evaluate(0)  # one copy (the CPU target): nothing to combine

    def lower(self, ctx) -> tirx.Stmt:
        layout = ctx.fragment_layout(self.buffer)
        slots = layout.local_size
        if slots % self.batch:
            raise at_span(
                f"T.finalize_reducer: batch={self.batch} must divide the {slots} elements each thread holds "
                f"of '{self.buffer.name}'",
                self.span,
            )
        if not layout.groups:
            return tirx.Evaluate(0)  # one holder per element: nothing to combine
        stmts = all_reduce(ctx, [ctx.local_of(self.buffer)], slots, sorted(layout.groups), _combine(self.op))
        return tirx.SeqStmt(stmts) if len(stmts) > 1 else stmts[0]

"""`T.Parallel` loop nests: building one over a region (the form element-wise tile ops lower to),
and taking one apart."""

from __future__ import annotations

from tvm import tirx

from tilelang.utils.ir import is_one, is_zero


def build_parallel_nest(region, body_fn, span=None, annotations=None) -> tirx.Stmt:
    """`for v0, v1, ... in T.Parallel(*tile extents): body_fn(indices of region, [v0, v1, ...])`.

    One loop per non-unit extent of `region`; unit dimensions are indexed at their start.
    `annotations` (a dict) go on the outermost loop.
    """
    loop_vars, indices = [], []
    for start, extent in zip(region.starts, region.extents):
        if is_one(extent):
            indices.append(start)
        else:  # a dynamic int64 extent (T.dynamic("m", "int64")) needs an int64 loop variable
            dtype = "int64" if str(extent.ty.dtype) == "int64" else "int32"
            v = tirx.Var(f"i{len(loop_vars)}", dtype)
            loop_vars.append((v, extent))
            indices.append(v if is_zero(start) else start + v)
    stmt = body_fn(indices, [v for v, _ in loop_vars])
    if not loop_vars:  # a single element: still a (trivial) parallel loop so one thread does it
        v = tirx.Var("i0", "int32")
        loop_vars.append((v, tirx.const(1, "int32")))
    for k, (v, extent) in reversed(list(enumerate(loop_vars))):
        notes = annotations if k == 0 and annotations else None
        stmt = tirx.For(v, tirx.const(0, "int32"), extent, tirx.ForKind.PARALLEL, stmt, annotations=notes, span=span)
    return stmt


def is_parallel(loop) -> bool:
    return isinstance(loop, tirx.For) and loop.kind == tirx.ForKind.PARALLEL


def split_parallel_nest(loop):
    """(loop vars, extents, innermost body) of a nest of directly nested parallel loops."""
    vars_, extents = [], []
    node = loop
    while is_parallel(node):
        vars_.append(node.loop_var)
        extents.append(node.extent)
        node = node.body
    return vars_, extents, node


def over_threads(shape, ctx, body_fn) -> tirx.Stmt:
    """Spread the items of `shape` (row-major) over the block's threads, one per thread per round.

    `body_fn(coords, guard)` builds a round's statement for the item at `coords`; `guard(stmt)`
    predicates a statement on the item existing (the last round may be partial). Keeping the guard
    per statement lets a barrier sit between two guarded phases instead of inside a guard.
    """
    import math

    total = math.prod(shape)
    o = tirx.Var("o", "int32")
    flat = o * ctx.num_threads + ctx.thread
    coords, rem = [], flat
    for n in reversed(shape):
        coords.append(tirx.floormod(rem, n))
        rem = tirx.floordiv(rem, n)
    coords.reverse()
    valid = flat < total if total % ctx.num_threads else None

    def guard(stmt):
        return tirx.IfThenElse(valid, stmt, None) if valid is not None else stmt

    rounds = (total + ctx.num_threads - 1) // ctx.num_threads
    return tirx.For(o, 0, rounds, tirx.ForKind.SERIAL, body_fn(coords, guard))


def over_items(shape, body_fn) -> tirx.Stmt:
    """Every item of `shape` in row-major order, by one thread (the CPU target runs a block on one
    core): `body_fn(coords, guard)` as for `over_threads`, with a guard that keeps its statement."""
    coords = [tirx.Var(f"i{k}", "int32") for k in range(len(shape))]
    stmt = body_fn(coords, lambda s: s)
    for v, n in reversed(list(zip(coords, shape))):
        stmt = tirx.For(v, 0, n, tirx.ForKind.SERIAL, stmt)
    return stmt

"""`T.Parallel` loops as a tile op: their layout rules and their lowering to per-thread loops.

Layout rules (used by `transform/infer_layout.py`):
  * from a fragment (common level): iteration e runs on a thread holding the fragment element it
    touches; for a replicated fragment, on every holder (a replicated loop);
  * to a fragment: a loop that touches a fragment with no layout yet, with its own loop variables
    in some order, gives it the loop's layout;
  * free level: the plain spread over the threads (`layout.fragment.partition`), vectorized.

Lowering: a thread visits the iterations it owns by inverting the loop layout: register index r
runs over the thread's iterations, `inverse(thread, r)` gives the logical iteration. The innermost
`vector_size` registers become one vectorized loop.

A loop over a dynamic extent (`T.Parallel(m)`, `T.dynamic`) has no layout: it runs in rounds over
the threads, iteration e on thread e % threads (`lower_dynamic`), and may not touch fragments.
"""

from __future__ import annotations

import math

import numpy as np
import tvm_ffi
from tvm import ir, tirx

from tilelang import intrinsics
from tilelang.errors import at_span
from tilelang.layout import fragment as fl
from tilelang.layout.evaluate import evaluate, grid
from tilelang.op import copy as copy_op
from tilelang.op.loops import split_parallel_nest
from tilelang.op.vectorize import plan_vector_size
from tilelang.utils.ir import is_if_then_else


class LoopNode:
    """An outermost T.Parallel nest, as seen by layout inference."""

    kind = "parallel"

    def __init__(self, loop, threads):
        self.loop = loop
        self.span = loop.span
        self.vars, self.extents, self.body = split_parallel_nest(loop)
        self.thread_expr, self.num_threads = threads
        self.layout = None
        self.accesses = []  # (buffer, indices, is_store) of fragments

        def on_load(ld):
            if ld.source.scope() == "local.fragment":
                self.accesses.append((ld.source, list(ld.indices), False))

        def on_store(st):
            if st.buffer.scope() == "local.fragment":
                self.accesses.append((st.buffer, list(st.indices), True))

        tvm_ffi.structural_walk(self.body, [(ir.TensorLoad, on_load), (tirx.BufferStore, on_store)])

    @property
    def is_dynamic(self) -> bool:
        """Whether an extent is known only at run time (a `T.dynamic` size): such a loop runs in
        rounds over the threads (`lower_dynamic`) and may not touch fragments."""
        return any(not isinstance(e, tirx.IntImm) for e in self.extents)

    @property
    def shape(self):
        return tuple(int(e) for e in self.extents)

    @property
    def fragments(self):
        seen = []
        for b, _, _ in self.accesses:
            if not any(b.same_as(s) for s in seen):
                seen.append(b)
        return seen

    def describe(self) -> str:
        return f"T.Parallel loop of shape [{', '.join(str(e) for e in self.extents)}]"


def _is_identity(indices, node) -> bool:
    return len(indices) == len(node.vars) and all(
        isinstance(i, ir.Var) and i.same_as(v) for i, v in zip(indices, node.vars)
    )


def loop_layout_from(frag: fl.Fragment, indices, node: LoopNode, analyzer) -> fl.Fragment:
    """The loop layout under which iteration `node.vars` runs on the holders of `frag[indices]`."""
    mapping = dict(zip(frag.vars, indices))
    base = analyzer.simplify(fl.substitute(frag.base, mapping))
    index = analyzer.simplify(fl.substitute(frag.index, mapping))
    vec = 1
    if _is_identity(indices, node) and frag.vector_size > 1:
        vec = plan_vector_size(node.vars, node.extents, node.body, analyzer, limit=frag.vector_size)
    layout = fl.Fragment(node.shape, list(node.vars), base, index, frag.num_threads, list(frag.groups), vec)
    if not layout.is_injective():
        raise at_span(
            f"layout inference: the {node.describe()} touches fragment at indices that repeat across "
            f"iterations, so it cannot follow the fragment's layout; index a fragment with the loop "
            f"variables of a loop over its own shape",
            node.span,
        )
    return layout


def fragment_layout_from(node: LoopNode, indices, buffer, is_store: bool = False) -> fl.Fragment:
    """The layout that the loop's layout gives `buffer`, touched at `indices` (the loop variables
    in some order, over the fragment's whole shape): element e lives where the iteration touching
    it runs."""
    shape = tuple(int(s) for s in buffer.shape)
    perm = []  # for each fragment dim: the loop var indexing it, or -1 for a unit dim indexed by 0
    for idx, n in zip(indices, shape):
        hit = [k for k, v in enumerate(node.vars) if isinstance(idx, ir.Var) and idx.same_as(v)]
        if hit:
            perm.append(hit[0])
        elif n == 1 and isinstance(idx, tirx.IntImm) and idx.value == 0:
            perm.append(-1)
        else:
            perm.append(None)
    used = [k for k in perm if k is not None and k >= 0]
    partial = None not in perm and len(set(used)) == len(used) and sorted(used) != list(range(len(node.vars)))
    if partial and not is_store:
        # Some loop variables do not index the fragment (`scale[0]`, `row_max[i]` in a loop over
        # (i, j)): each element lives, replicated, on every thread that runs an iteration reading it.
        # (Stored that way, several iterations would write one element: that stays an error.)
        layout = _replicated_layout_from(node, perm, shape)
        if layout is not None:
            return layout
    if (
        None in perm
        or sorted(used) != list(range(len(node.vars)))
        or any(node.shape[k] != n for k, n in zip(perm, shape) if k >= 0)
    ):
        raise at_span(
            f"layout inference: cannot derive a layout for fragment '{buffer.name}' of shape {list(shape)} "
            f"from a {node.describe()} indexing it as [{', '.join(str(i) for i in indices)}]; index a "
            f"fragment with the loop variables of a loop over its own shape",
            node.span,
        )
    elem_vars = fl.placeholder_vars(len(indices), "j")
    point = [None] * len(node.vars)
    for d, k in enumerate(perm):
        if k >= 0:
            point[k] = elem_vars[d]
    mapping = dict(zip(node.vars, point))
    lay = node.layout
    vec = lay.vector_size if used == sorted(used) and perm[-1] == len(node.vars) - 1 else 1
    return fl.Fragment(
        shape,
        elem_vars,
        fl.substitute(lay.base, mapping),
        fl.substitute(lay.index, mapping),
        lay.num_threads,
        list(lay.groups),
        vec,
    )


def _replicated_layout_from(node: LoopNode, perm, shape) -> fl.Fragment | None:
    """The layout of a fragment indexed by some of the loop's variables (`perm[d]`: the loop
    variable indexing dimension d, or -1 for a unit dimension indexed by 0): element e is held by
    every thread running an iteration that touches it. None when the loop does not touch every
    element, or the holders are not digit ranges of the thread id."""
    if any(k >= 0 and node.shape[k] != n for k, n in zip(perm, shape)):
        return None
    lay = node.layout
    points = grid(node.shape)
    runners = lay.holder_threads(points)  # [loop replicas, iterations]
    # Iterations in row-major order; element of each iteration, flattened row-major over `shape`.
    flat = np.zeros(points[0].size, dtype=np.int64)
    for k, n in zip(perm, shape):
        flat = flat * n + (points[k].reshape(-1) if k >= 0 else 0)
    order = np.argsort(flat, kind="stable")
    per_element = points[0].size // math.prod(shape)
    holders = runners[:, order].T.reshape(math.prod(shape), per_element * runners.shape[0])
    elem_vars = fl.placeholder_vars(len(shape), "j")
    point = [tirx.const(0, "int32") for _ in node.vars]
    for d, k in enumerate(perm):
        if k >= 0:
            point[k] = elem_vars[d]
    first_thread, first_index = lay.map(point)
    try:
        return fl.replicated(shape, elem_vars, first_thread, first_index, holders, lay.num_threads)
    except fl.IrregularLayout:
        return None


def runs_where_held(loop_layout: fl.Fragment, frag: fl.Fragment, indices, loop_vars) -> bool:
    """Does every thread that runs an iteration hold the fragment element that iteration touches?"""
    points = grid(loop_layout.shape)
    env = dict(zip(loop_vars, points))
    elem = [evaluate(i, env).reshape(-1) * np.ones_like(points[0]) for i in indices]
    runners = loop_layout.holder_threads([p for p in points])
    return all(bool(frag.holds(row, elem).all()) for row in runners)


def writes_every_copy(loop_layout: fl.Fragment, frag: fl.Fragment, indices, loop_vars) -> bool:
    """Does every holder of the fragment element an iteration writes run that iteration? (A write
    to a replicated fragment must reach all its copies.)"""
    points = grid(loop_layout.shape)
    env = dict(zip(loop_vars, points))
    elem = [evaluate(i, env).reshape(-1) * np.ones_like(points[0]) for i in indices]
    runners = loop_layout.holder_threads(points)  # [loop replicas, iterations]
    holders = frag.holder_threads(elem)  # [fragment replicas, iterations]
    return bool((holders[:, None, :] == runners[None, :, :]).any(axis=1).all())


def _rounds(total: int, threads: int, vec: int) -> int:
    """How many times each thread runs a loop of `total` elements spread `vec` at a time."""
    return -(-total // (threads * vec))


def free_layouts(node: LoopNode, analyzer, coalesced_width: int = 0) -> list:
    """Candidate layouts of a loop with no constraint: the plain spread over its threads, then a
    spread that keeps each row on one aligned group of threads (for row reductions); each with the
    widest legal vector."""
    vec = plan_vector_size(node.vars, node.extents, node.body, analyzer, limit=coalesced_width)
    total = int(np.prod(node.shape))
    plain_vec = vec
    while plain_vec > 1 and total % (node.num_threads * plain_vec) != 0:
        plain_vec //= 2  # wider vectors would leave threads idle or split a round unevenly
    if _rounds(total, node.num_threads, vec) < _rounds(total, node.num_threads, plain_vec):
        plain_vec = vec  # a partial last round either way, and fewer rounds (a 64x128 tile on 384 threads)
    out = [fl.partition(node.shape, node.num_threads, plain_vec).with_shape_vars(node.vars)]
    rows = fl.partition_rows(node.shape, node.num_threads, vec)
    if rows is not None and len(node.shape) > 1:
        out.append(rows.with_shape_vars(node.vars))
    return out


# ---- lowering ----------------------------------------------------------------------------------


def _uniform_guards(stmt, vec_var):
    """Guards evaluated at the vector's first lane (valid: the plan proved them uniform)."""
    zero = {vec_var: tirx.const(0, "int32")}

    def on_if(node):
        return tirx.IfThenElse(fl.substitute(node.condition, zero), node.then_case, node.else_case, span=node.span)

    def on_call(call):
        if is_if_then_else(call):
            return tirx.if_then_else(fl.substitute(call.args[0], zero), call.args[1], call.args[2])
        return call

    return tvm_ffi.structural_map(stmt, [(tirx.IfThenElse, on_if), (ir.Call, on_call)])


def _writes_memory(stmt) -> bool:
    found = []

    def on_store(st):
        if st.buffer.scope() not in ("local", "local.fragment"):
            found.append(st)

    tvm_ffi.structural_walk(stmt, [(tirx.BufferStore, on_store)])
    return bool(found)


def lower(loop, layout: fl.Fragment, ctx) -> tirx.Stmt:
    """The per-thread loop of a laid-out T.Parallel nest (fragments remapped by `ctx`)."""
    ana = ctx.analyzer
    loop_vars, _, body = split_parallel_nest(loop)
    thread = ctx.thread
    vec, size = layout.vector_size, layout.local_size
    if vec > 1 and size % vec == 0:
        outer, lane = tirx.Var("r", "int32"), tirx.Var("v", "int32")
        reg = outer * vec + lane
        ana.bind(outer, ir.Range(0, size // vec))
        ana.bind(lane, ir.Range(0, vec))
    else:
        vec, outer, lane = 1, tirx.Var("r", "int32"), None
        reg = outer
        ana.bind(outer, ir.Range(0, size))
    indices, valid = layout.with_shape_vars(loop_vars).inverse()(thread, reg)
    mapping = {v: ana.simplify(i) for v, i in zip(loop_vars, indices)}
    body = ctx.remap(fl.substitute(body, mapping))
    if layout.groups and _writes_memory(body):
        # A replicated loop runs on every holder; only the first one writes shared/global memory.
        first = ana.simplify(tirx.EQ(thread, fl.clear_groups(thread, layout.groups)))
        valid = tirx.And(valid, first) if not _is_true(valid) else first
    if not _is_true(valid):
        body = tirx.IfThenElse(valid, body, None)
    if lane is not None:
        body = _uniform_guards(body, lane)
        copy = _async_copy(body, lane, vec) if loop.annotations.get(copy_op.ASYNC_COPY) else None
        if copy is not None:
            body = copy  # one cp.async per vector
        else:
            body = tirx.For(lane, tirx.const(0, "int32"), tirx.const(vec, "int32"), tirx.ForKind.VECTORIZED, body)
    extent = size // vec
    if extent == 1:
        return fl.substitute(body, {outer: tirx.const(0, "int32")})
    return tirx.For(
        outer, tirx.const(0, "int32"), tirx.const(extent, "int32"), tirx.ForKind.SERIAL, body, span=loop.span
    )


def lower_dynamic(loop, ctx) -> tirx.Stmt:
    """The per-thread loop of a T.Parallel nest with a dynamic extent: iteration e (row-major over
    the nest) runs on thread e % threads, in round e // threads; the last round is predicated."""
    loop_vars, extents, body = split_parallel_nest(loop)
    total = extents[0]
    for e in extents[1:]:
        total = total * e
    dtype = str(total.ty.dtype)
    r = tirx.Var("r", dtype)
    thread = ctx.thread if str(ctx.thread.ty.dtype) == dtype else tirx.Cast(dtype, ctx.thread)
    flat = r * tirx.const(ctx.num_threads, dtype) + thread
    # Sizes are never negative: a dynamic extent divides with C's `/` and `%` (truncdiv), which
    # need no sign fix-ups; the outermost coordinate needs no `%` (flat < total bounds it).
    coords, rest = [], flat
    for e in reversed(extents[1:]):
        div, mod = (tirx.floordiv, tirx.floormod) if isinstance(e, tirx.IntImm) else (tirx.truncdiv, tirx.truncmod)
        coords.append(mod(rest, e))
        rest = div(rest, e)
    coords.append(rest)
    mapping = {}
    for v, c in zip(loop_vars, reversed(coords)):
        mapping[v] = c if str(c.ty.dtype) == str(v.ty.dtype) else tirx.Cast(str(v.ty.dtype), c)
    body = tirx.IfThenElse(flat < total, ctx.remap(fl.substitute(body, mapping)), None)
    rounds = tirx.floordiv(total + (ctx.num_threads - 1), ctx.num_threads)
    return tirx.For(r, tirx.const(0, dtype), rounds, tirx.ForKind.SERIAL, body, span=loop.span)


def _async_copy(body, lane, vec):
    """The vector store `S[...] = G[...]` (or `if_then_else(ok, G[...], 0)`) as one cp.async of the
    whole vector, or None when the body is not such a copy or the vector is not 4, 8 or 16 bytes."""
    guard = None
    if isinstance(body, tirx.IfThenElse) and body.else_case is None:
        guard, body = body.condition, body.then_case
    if not isinstance(body, tirx.BufferStore) or not body.buffer.scope().startswith("shared"):
        return None
    value, ok = body.value, None
    if is_if_then_else(value):
        ok, value = value.args[0], value.args[1]
    if not isinstance(value, ir.TensorLoad) or value.source.scope() != "global":
        return None
    import tvm

    nbytes = vec * tvm.DataType(str(body.buffer.dtype)).bits // 8
    if nbytes not in (4, 8, 16) or str(value.source.dtype) != str(body.buffer.dtype):
        return None
    first = {lane: tirx.const(0, "int32")}
    dst = tirx.address_of(tirx.BufferLoad(body.buffer, [fl.substitute(i, first) for i in body.indices]))
    src = tirx.address_of(tirx.BufferLoad(value.source, [fl.substitute(i, first) for i in value.indices]))
    valid = fl.substitute(ok, first) if ok is not None else tirx.const(True, "bool")
    call = intrinsics.CP_ASYNC.stmt({"bytes": nbytes}, dst, src, valid)
    return tirx.IfThenElse(guard, call, None) if guard is not None else call


def _is_true(expr) -> bool:
    return isinstance(expr, tirx.IntImm) and expr.value == 1

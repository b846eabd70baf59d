"""`T.Parallel` loops as a tile op: their layout rules and their lowering to per-thread loops.

Layout rules (used by `transform/infer_layout.py`):
  * from a fragment (common level): iteration e runs on a thread holding the fragment element it
    touches; for a replicated fragment, on every holder (a replicated loop);
  * from a fragment that does not cover the loop (wide free search): the iterations touching one
    element are dealt out over its holders, or all run on each (`loop_layouts_following`);
  * to a fragment: a loop that touches a fragment with no layout yet, with its own loop variables
    in some order, gives it the loop's layout; dimensions indexed by constants or by variables
    from outside the nest are held whole by each thread;
  * free level: the plain spread over the threads (`layout.fragment.partition`), vectorized.
Indices may mix the nest's variables with variables from outside it (`op/loop_indices.py`): the checks run
over every value those can take with the element in bounds.

A packed fragment read by several iterations per element (`B_local[i, j // 2]`, two 4-bit values a
byte): the fragment is held where those iterations run (`_packed_layout`), and a loop following
such a fragment runs an element's iterations on its holders (`_following_packed`).

Lowering: a thread visits the iterations it owns by inverting the loop layout: register index r
runs over the thread's iterations, `inverse(thread, r)` gives the logical iteration. The innermost
`vector_size` registers become one vectorized loop (a loop over a fragment's own shape takes the
widest vector its accesses and the fragment's consecutive registers allow), or one cp.async / one
T.atomic_addx2/x4 per vector when the body is a copy into shared memory or element adds.

A loop over a dynamic extent (`T.Parallel(m)`, `T.dynamic`) has no layout: it runs in rounds over
the threads, iteration e on thread e % threads (`lower_dynamic`), and may not touch fragments.

A loop that stores only into each thread's own buffers (`T.alloc_local`) and touches no fragment
has no layout either: every thread runs all of it (`lower_thread_local`).
"""

from __future__ import annotations

import math

import numpy as np
import tvm_ffi
from tvm import ir, sym, tirx

from tilelang import intrinsics
from tilelang.errors import at_span
from tilelang.layout import fragment as fl
from tilelang.layout.evaluate import NotEvaluable, evaluate, grid
from tilelang.op import atomic, loop_indices
from tilelang.op import copy as copy_op
from tilelang.op.loops import is_parallel, split_parallel_nest
from tilelang.op.vectorize import mark_multiple_of, multiples, plan_vector_size, vector_guard
from tilelang.utils.ir import collect, is_if_then_else
from tilelang.utils.ir import i32 as _c


class LoopNode:
    """An outermost T.Parallel nest, as seen by layout inference."""

    kind = "parallel"

    def __init__(self, loop, threads, analyzer=None):
        self.loop = loop
        self.span = loop.span
        self.vars, self.extents, self.body = split_parallel_nest(loop)
        self.thread_expr, self.num_threads = threads
        self.layout = None
        self.accesses = []  # (buffer, indices, is_store) of fragments
        # Knows the enclosing loops' ranges (the scope's analyzer), and below the nest's own and its
        # inner serial loops': an index such as `jj * 4 + j` splits by them (`loop_indices.Split`).
        self.analyzer = analyzer if analyzer is not None else sym.Analyzer()
        self._splits = {}

        def on_load(ld):
            if ld.source.scope() == "local.fragment":
                self.accesses.append((ld.source, list(ld.indices), False))

        def on_store(st):
            if st.buffer.scope() == "local.fragment":
                self.accesses.append((st.buffer, list(st.indices), True))

        def on_for(f):
            self._bind(f.loop_var, f.min, f.extent)

        tvm_ffi.structural_walk(self.body, [(ir.TensorLoad, on_load), (tirx.BufferStore, on_store), (tirx.For, on_for)])
        if not self.is_dynamic:
            for v, e in zip(self.vars, self.extents):
                self._bind(v, tirx.const(0, str(v.ty.dtype)), e)

    def _bind(self, var, start, extent):
        try:
            self.analyzer.bind(var, ir.Range.from_min_extent(start, extent))
        except Exception:  # noqa: BLE001 (bound already, by the scope that visited this loop first)
            pass

    @property
    def is_dynamic(self) -> bool:
        """Whether an extent is known only at run time (a `T.dynamic` size): such a loop runs in
        rounds over the threads (`lower_dynamic`) and may not touch fragments."""
        return any(not isinstance(e, tirx.IntImm) for e in self.extents)

    @property
    def is_thread_local(self) -> bool:
        """Whether the nest stores only into buffers of each thread's own (`T.alloc_local`) and touches
        no fragment, or reads such a buffer along its own indices: then every thread runs all of it
        (`lower_thread_local`), as the public TileLang does; spread over the threads, each would
        fill only part of its own buffer, or store only part of it (`T.copy(local, Out[row, :])`,
        each thread writing its own row). A call may write through a pointer: one that passes a
        pointer to memory other than a local buffer (an atomic on shared memory) keeps the loop
        spread, as does a loop reading a local buffer only at fixed indices (a broadcast)."""
        if self.accesses:
            return False

        def along_the_loop(load):
            used = [x for i in load.indices for x in collect(i, ir.Var)]
            return any(v.same_as(x) for v in self.vars for x in used)

        local_loads = [ld for ld in collect(self.body, ir.TensorLoad) if ld.source.scope() in ("local", "local.var")]
        if any(along_the_loop(ld) for ld in local_loads):
            return True
        scopes = [st.buffer.scope() for st in collect(self.body, tirx.BufferStore)]
        scopes += [s for call in collect(self.body, ir.Call) for s in _pointer_scopes(call)]
        if not scopes:
            return False  # (a loop that stores nothing: calls only; spread as before)
        return all(s in ("local", "local.var") for s in scopes)

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

    def split(self, indices, shape) -> loop_indices.Split:
        """The `Split` of one of `accesses`' index lists (computed once)."""
        key = id(indices)
        if key not in self._splits:
            self._splits[key] = loop_indices.Split(self, indices, shape)
        return self._splits[key]

    def describe(self) -> str:
        return f"T.Parallel loop of shape [{', '.join(str(e) for e in self.extents)}]"


def with_static_extents(loop, analyzer):
    """The nest `loop` with each extent that `analyzer` folds to a constant written as that constant
    (`T.copy(acc, Out[b, H0:H1])` with H1 bound to H0 + 64 loops over H1 - H0 = 64), so that it gets a
    layout like any loop over a tile."""
    loop_vars, extents, body = split_parallel_nest(loop)
    folded = [analyzer.simplify(e) if not isinstance(e, tirx.IntImm) else e for e in extents]
    if all(f.same_as(e) for f, e in zip(folded, extents)) or not all(isinstance(f, tirx.IntImm) for f in folded):
        return loop
    fors = []
    node = loop
    while is_parallel(node):
        fors.append(node)
        node = node.body
    for f, extent in zip(reversed(fors), reversed(folded)):
        body = tirx.For(f.loop_var, f.min, extent, f.kind, body, f.thread_binding, f.annotations, span=f.span)
    return body


def _is_identity(indices, node) -> bool:
    return len(indices) == len(node.vars) and all(
        isinstance(i, ir.Var) and i.same_as(v) for i, v in zip(indices, node.vars)
    )


def _same_threads_for_every_offset(frag: fl.Fragment, split: loop_indices.Split) -> bool:
    """Whether each point's element lives on the same threads whatever the outer variables' values."""
    if not split.varies:
        return True
    base = evaluate(frag.base, dict(zip(frag.vars, split.elements())))
    base = np.broadcast_to(base, (split.values[0].size * split.combinations,)).reshape(-1, split.combinations)
    return bool((base == base[:, :1]).all())


def loop_layout_from(frag: fl.Fragment, indices, node: LoopNode, analyzer) -> fl.Fragment:
    """The loop layout under which iteration `node.vars` runs on the holders of `frag[indices]`."""
    if frag.num_threads != node.num_threads:
        # A fragment of a thread branch (`if tx < n:`) read by the whole block: the other threads
        # would run iterations with no element to touch (the caller reports the mismatch).
        raise at_span(f"layout inference: the {node.describe()} runs on threads its fragment does not span", node.span)
    split = node.split(indices, frag.shape)
    if not _same_threads_for_every_offset(frag, split):
        raise at_span(
            f"layout inference: the {node.describe()} touches a fragment at [{', '.join(str(i) for i in indices)}], "
            f"whose elements live on other threads for other values of the variables outside the loop",
            node.span,
        )
    mapping = dict(zip(frag.vars, split.representative()))
    base = analyzer.simplify(fl.substitute(frag.base, mapping))
    index = analyzer.simplify(fl.substitute(frag.index, mapping))
    layout = fl.Fragment(node.shape, list(node.vars), base, index, frag.num_threads, list(frag.groups), 1)
    vec = 1
    if _is_identity(indices, node):
        # As wide as the loop's accesses allow and the fragment keeps consecutive registers (a copy
        # of a replicated or row-held fragment from shared memory: 16-byte loads, not one per element).
        vec = _widest_contiguous(layout, plan_vector_size(node.vars, node.extents, node.body, analyzer))
    if not layout.is_injective():
        packed = _following_packed(frag, indices, node, analyzer)
        if packed is not None:
            return packed
        raise at_span(
            f"layout inference: the {node.describe()} touches fragment at indices that repeat across "
            f"iterations, so it cannot follow the fragment's layout; index a fragment with the loop "
            f"variables of a loop over its own shape",
            node.span,
        )
    whole = _is_identity(indices, node) and tuple(node.shape) == tuple(frag.shape)  # (its own layout)
    if not whole and not fl.is_invertible(layout):
        # Part of a fragment (`acc[:4, :]` of a 64-row accumulator) leaves gaps in its registers that
        # the inverse lowering needs cannot express: number the touched registers densely.
        points = grid(node.shape)
        values = np.broadcast_to(evaluate(index, dict(zip(node.vars, points))), points[0].shape)
        dense = fl.compact_index(index, values)
        layout = fl.Fragment(node.shape, list(node.vars), base, dense, frag.num_threads, list(frag.groups), vec)
        if vec > 1 and not _vectors_stay_contiguous(layout):
            layout.vector_size = 1
        if not fl.is_invertible(layout) and _is_identity(indices, node):
            # Its threads have gaps too (rows 0..3 of an mma accumulator on threads 0..15 and 64..79):
            # the loop runs over the whole fragment's registers and skips the iterations past its
            # extents (`lower` guards them).
            layout = frag.with_shape_vars(list(node.vars))
            layout.vector_size = _widest_contiguous(layout, vec)
    return layout


def _following_packed(frag: fl.Fragment, indices, node: LoopNode, analyzer) -> fl.Fragment | None:
    """The loop layout that runs the iterations reading one element of a packed fragment
    (`B_local[i, j // 2]`, `loop_indices.Packing`) on its holders, one after another in their
    registers: iteration p is the rest(p)-th of element e = indices(p). None when the indices are not
    digits of the loop's variables."""
    try:
        packing = loop_indices.Packing(node, indices, frag.shape)
    except NotEvaluable:
        return None
    mapping = dict(zip(frag.vars, indices))
    base = analyzer.simplify(fl.substitute(frag.base, mapping))
    index = analyzer.simplify(fl.substitute(frag.index, mapping) * _c(packing.rest_extent) + packing.rest)
    layout = fl.Fragment(node.shape, list(node.vars), base, index, frag.num_threads, list(frag.groups))
    if not layout.is_injective() or not fl.is_invertible(layout):
        return None
    layout.vector_size = _widest_contiguous(layout, plan_vector_size(node.vars, node.extents, node.body, analyzer))
    return layout


def _widest_contiguous(layout: fl.Fragment, limit: int) -> int:
    """The widest vector, at most `limit`, along which `layout` keeps elements in consecutive registers."""
    vec = limit
    while vec > 1:
        layout.vector_size = vec
        if layout.shape[-1] % vec == 0 and _vectors_stay_contiguous(layout):
            return vec
        vec //= 2
    layout.vector_size = 1
    return 1


def _vectors_stay_contiguous(layout: fl.Fragment) -> bool:
    """Whether each run of `vector_size` elements along the last dimension (from a multiple of it)
    sits in consecutive registers of one thread."""
    base, index = (t.reshape(-1, layout.vector_size) for t in layout.tables())
    steps = np.arange(layout.vector_size)
    aligned = (index[:, 0] % layout.vector_size == 0).all()  # (a vector of registers starts at a multiple)
    return bool(aligned and (base == base[:, :1]).all() and (index == index[:, :1] + steps).all())


def loop_layouts_following(frag: fl.Fragment, indices, node: LoopNode) -> list:
    """Loop layouts that run each iteration on a holder of `frag[indices]` when the indices leave some
    of the loop's variables out (`scores_max[h]` read in a loop over (h, k)): the iterations that
    read one element are dealt out over its holders, round-robin, when they divide evenly (each
    runs once), else every holder runs them all (a replicated loop). Empty when the indices use
    every loop variable (`loop_layout_from`) or nothing fits."""
    split = node.split(indices, frag.shape)
    used = [k for k, v in enumerate(node.vars) if any(loop_indices.uses(i, [v]) for i in split.inner)]
    unused = [k for k in range(len(node.vars)) if k not in used]
    if not unused or frag.num_threads != node.num_threads or not _same_threads_for_every_offset(frag, split):
        return []  # (a fragment of a thread branch, `if tx < n:`, cannot give the whole block's loop its threads)
    mapping = dict(zip(frag.vars, split.representative()))
    ana = node.analyzer
    base = ana.simplify(fl.substitute(frag.base, mapping))
    index = ana.simplify(fl.substitute(frag.index, mapping))
    points = grid(node.shape)
    index = fl.compact_index(index, np.broadcast_to(evaluate(index, dict(zip(node.vars, points))), points[0].shape))
    rest, count = _c(0), 1
    for k in unused:
        rest = rest * _c(node.shape[k]) + node.vars[k]
        count *= node.shape[k]
    out, reps = [], frag.replicate
    if reps > 1 and count % reps == 0:
        thread = base + fl.spread(tirx.floormod(rest, _c(reps)), frag.groups)
        order = index * _c(count // reps) + tirx.floordiv(rest, _c(reps))
        out.append(
            fl.Fragment(node.shape, list(node.vars), ana.simplify(thread), ana.simplify(order), frag.num_threads)
        )
    # Every holder runs them all, the innermost loop variable innermost in its registers: vectorized
    # along it when it is one of the left-out ones.
    vec = plan_vector_size(node.vars, node.extents, node.body, ana) if unused[-1] == len(node.vars) - 1 else 1
    order = ana.simplify(index * _c(count) + rest)
    out.append(fl.Fragment(node.shape, list(node.vars), base, order, frag.num_threads, list(frag.groups), vec))
    return [lay for lay in out if lay.is_injective() and fl.is_invertible(lay)]


def fragment_layout_from(node: LoopNode, indices, buffer, is_store: bool = False) -> fl.Fragment:
    """The layout that the loop's layout gives `buffer`, touched at `indices`: element e lives where
    the iteration touching it runs. A dimension indexed by a loop variable is spread like it (over
    the fragment's whole extent); one indexed by a constant or by variables from outside the loop
    (`lse[k, i]` in a loop over i) is held whole by each of those threads (`fragment.with_held_dims`)."""
    shape = tuple(int(s) for s in buffer.shape)
    try:
        split = node.split(indices, shape)
        dims = split.loop_dims()
    except NotEvaluable:
        dims = [None]
    held = [d for d, k in enumerate(dims) if k == -1 and not (shape[d] == 1 and _is_zero(indices[d]))]
    if None in dims and not is_store:
        packed = _packed_layout(node, indices, shape)  # (`B_local[i, j // 2]`)
        if packed is not None:
            return packed
    if None in dims or not held:
        return _spread_layout(node, indices, shape, buffer.name, is_store)
    spread = [d for d in range(len(shape)) if d not in held]
    if spread:
        sub = _spread_layout(node, [indices[d] for d in spread], tuple(shape[d] for d in spread), buffer.name, is_store)
    else:  # only constants and outer variables: held by every thread running the loop
        sub = _spread_layout(node, [tirx.const(0, "int32")], (1,), buffer.name, is_store)
    return fl.with_held_dims(sub, shape, spread)


def _packed_layout(node: LoopNode, indices, shape) -> fl.Fragment | None:
    """The layout of a packed fragment read by several iterations per element (`B_local[i, j // 2]`,
    two 4-bit values a byte; `loop_indices.Packing`): element e is held by every thread that runs
    an iteration reading it, at the register of its first such iteration (compacted). Those are
    one thread when the loop runs an element's iterations together (vectors along j), else a
    replicated group. None when the indices are not digits of the loop's variables or the holders
    are not digit ranges of the thread id."""
    try:
        packing = loop_indices.Packing(node, indices, shape)
    except NotEvaluable:
        return None
    lay = node.layout
    count, rest = math.prod(shape), packing.rest_extent
    runners = lay.holder_threads([p.reshape(-1) for p in packing.points()])  # [loop replicas, element * rest]
    holders = runners.reshape(-1, count, rest).transpose(1, 0, 2).reshape(count, -1)
    elem_vars = fl.placeholder_vars(len(shape), "j")
    ana = sym.Analyzer()
    for v, n in zip(elem_vars, shape):
        ana.bind(v, ir.Range(0, n))
    first_thread, first_index = (ana.simplify(e) for e in lay.map(packing.iteration(elem_vars, _c(0))))
    try:
        layout = fl.replicated(tuple(shape), elem_vars, first_thread, first_index, holders, lay.num_threads)
    except fl.IrregularLayout:
        return None
    layout.vector_size = _widest_contiguous(layout, lay.vector_size)
    return layout


def _is_zero(expr) -> bool:
    return isinstance(expr, tirx.IntImm) and expr.value == 0


def _spread_layout(node: LoopNode, indices, shape, name: str, is_store: bool) -> fl.Fragment:
    """`fragment_layout_from` for indices that are the loop's variables (each at most once) and
    zeros of unit dimensions."""
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
    # A loop longer than the dimension it indexes (`sinks[i]` for i < 64 of a [1] fragment): the
    # fragment is laid out over the loop's extent, as the public TileLang does (infer_layout warns).
    shape = tuple(max(n, node.shape[k]) if k is not None and k >= 0 else n for k, n in zip(perm, shape))
    if (
        None in perm
        or sorted(used) != list(range(len(node.vars)))
        or any(node.shape[k] != n for k, n in zip(perm, shape) if k >= 0)
    ):
        raise at_span(
            f"layout inference: cannot derive a layout for fragment '{name}' of shape {list(shape)} "
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


def _touched(loop_layout: fl.Fragment, split: loop_indices.Split):
    """(runners, elements): the threads running each (point, offset combination), [loop replicas, n],
    and the element each touches."""
    runners = loop_layout.holder_threads(grid(split.loop_shape))  # (a loop layout may pad the loop)
    return np.repeat(runners, split.combinations, axis=1), split.elements()


def runs_where_held(loop_layout: fl.Fragment, frag: fl.Fragment, indices, node: LoopNode) -> bool:
    """Does every thread that runs an iteration hold the fragment element that iteration touches
    (for every value of the variables from outside the loop)?"""
    runners, elem = _touched(loop_layout, node.split(indices, frag.shape))
    return all(bool(frag.holds(row, elem).all()) for row in runners)


def writes_every_copy(loop_layout: fl.Fragment, frag: fl.Fragment, indices, node: LoopNode) -> bool:
    """Does every holder of the fragment element an iteration writes run that iteration? (A write
    to a replicated fragment must reach all its copies.)"""
    runners, elem = _touched(loop_layout, node.split(indices, frag.shape))
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
    loop_vars, extents, nest_body = split_parallel_nest(loop)
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
    for i, n, extent in zip(indices, layout.shape, extents):
        if n > int(extent):  # a layout over more than the loop (`loop_layout_from`): skip the rest
            valid = ana.simplify(tirx.And(valid, i < extent))
    mapping = {v: ana.simplify(i) for v, i in zip(loop_vars, indices)}
    body = ctx.remap(fl.substitute(nest_body, mapping))
    if layout.groups and _writes_memory(body):
        # A replicated loop runs on every holder; only the first one writes shared/global memory.
        first = ana.simplify(tirx.EQ(thread, fl.clear_groups(thread, layout.groups)))
        valid = tirx.And(valid, first) if not _is_true(valid) else first
    if not _is_true(valid):
        body = tirx.IfThenElse(valid, body, None)
    dims, scalar = [], None
    if lane is not None:
        # A vector legal only when some dynamic sizes are multiples of it: otherwise the same
        # iterations, one lane at a time, each with its own guards.
        dims = vector_guard(loop_vars, extents, nest_body, ana, vec)
        if dims:
            scalar = tirx.For(lane, tirx.const(0, "int32"), tirx.const(vec, "int32"), tirx.ForKind.SERIAL, body)
        body = _uniform_guards(body, lane)
        copy = _async_copy(body, lane, vec) if loop.annotations.get(copy_op.ASYNC_COPY) else None
        adds = _vector_atomic(body, lane, vec) if copy is None else None
        if copy is not None:
            body = copy  # one cp.async per vector
        elif adds is not None:
            body = adds  # one T.atomic_addx2/x4 per vector
        else:
            body = tirx.For(lane, tirx.const(0, "int32"), tirx.const(vec, "int32"), tirx.ForKind.VECTORIZED, body)
    extent = size // vec

    def over_registers(stmt):
        if extent == 1:
            return fl.substitute(stmt, {outer: tirx.const(0, "int32")})
        return tirx.For(
            outer, tirx.const(0, "int32"), tirx.const(extent, "int32"), tirx.ForKind.SERIAL, stmt, span=loop.span
        )

    if not dims:
        return over_registers(body)
    # (The fallback gets loop variables of its own: each variable is defined once.)
    fresh = {outer: tirx.Var("r", "int32"), lane: tirx.Var("v", "int32")}
    fallback = fl.substitute(over_registers(scalar), fresh)
    vector = mark_multiple_of(dims, vec, over_registers(body))  # (for the code generator)
    return tirx.IfThenElse(multiples(dims, vec), vector, fallback, span=loop.span)


def lower_thread_local(loop) -> tirx.Stmt:
    """The nest as serial loops that every thread runs whole (a loop over its own local buffers)."""
    node = loop
    fors = []
    while is_parallel(node):
        fors.append(node)
        node = node.body
    body = node
    for f in reversed(fors):
        body = tirx.For(f.loop_var, f.min, f.extent, tirx.ForKind.SERIAL, body, span=f.span)
    return body


def _pointer_scopes(call) -> list:
    """The memory scopes of the pointers `call` passes (address_of, T.access_ptr)."""
    out = []
    for arg in call.args:
        name = getattr(arg.op, "name", "") if isinstance(arg, ir.Call) else ""
        if name in ("tirx.address_of", "tl.access_ptr"):
            out += [a.source.scope() for a in arg.args if isinstance(a, ir.TensorLoad)]
        elif name == "tirx.tvm_access_ptr":
            out.append(str(getattr(arg.args[1].ty, "storage_scope", "global")))
    return out


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
    while is_if_then_else(value) and _is_zero_value(value.args[2]):  # (cp.async fills zeros where not ok)
        ok = value.args[0] if ok is None else tirx.And(ok, value.args[0])
        value = value.args[1]
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


def _vector_atomic(body, lane, vec):
    """The element adds of a vector's lanes (`plan_vector_size` let them through: each a plain
    `T.atomic_add` into global memory, along the lanes) as one `T.atomic_addx{vec}` each, under the
    body's guards (uniform over the lanes); None when the body has no such add."""
    found = []

    def on_eval(node):
        first = atomic.vectorizable_add(node.value)
        if first is None:
            return node
        found.append(node)
        at = [{lane: tirx.const(k, "int32")} for k in range(vec)]
        start = tirx.BufferLoad(first.source, [fl.substitute(i, at[0]) for i in first.indices])
        value = atomic.element_target(node.value)[1]
        values = [fl.substitute(value, lanes) for lanes in at]
        return tirx.Evaluate(atomic.vector_add_call(start, values), span=node.span)

    out = tvm_ffi.structural_map(body, [(tirx.Evaluate, on_eval)])
    return out if found else None


def _is_zero_value(expr) -> bool:
    return isinstance(expr, (tirx.IntImm, tirx.FloatImm)) and expr.value == 0


def _is_true(expr) -> bool:
    return isinstance(expr, tirx.IntImm) and expr.value == 1

"""Pass `infer_layout`: which thread runs each `T.Parallel` iteration and holds each fragment element.

Three levels, as in TileLang, each a function of its own:
  strict  layouts fixed by the user (`T.annotate_layout`, `T.Parallel(loop_layout=...)`) or an
          instruction; they are set first and never changed;
  common  breadth-first propagation: a loop touching a fragment with a layout runs each iteration
          where its element lives and gives its layout to the other fragments it touches; a
          reduction gives its destination the reduced layout of its source;
  free    what remains is grouped into connected components (ops sharing fragments); each
          component tries every loop as its root with the plain spread over the threads, and
          keeps the attempt that needs the fewest registers; then common again.

Before:  for i, j in T.Parallel(128, 64): C_f[i, j] = A_s[i, j]        (128 threads)
After:   the loop carries annotation `tl.loop_layout` (thread = (i*64+j)//4 % 128, vector 4) and the
         function attribute `tl.fragment_layouts` maps C_f to the same layout; annotated shared
         layouts go to `tl.shared_layouts`.

A loop over a dynamic extent (`T.Parallel(m)`, or a copy between global regions of dynamic size)
has no layout to infer: it is annotated `dynamic` and runs in rounds over the threads; it may not
touch fragments.

Requires: copies and fills expanded to loops. Guarantees: every parallel loop and every fragment
has a layout, or a UserError names the fragment, the uses that disagree and their lines.
"""

from __future__ import annotations

import tvm_ffi
from tvm import ir, tirx

from tilelang.errors import at_span
from tilelang.layout import fragment as fl
from tilelang.layout import layout as sl
from tilelang.layout.evaluate import NotEvaluable
from tilelang.layout.layout import shared_layout_from_ir, shared_layout_to_ir
from tilelang.op import base, parallel
from tilelang.op.loops import is_parallel
from tilelang.options import DEFAULT_OPTIONS, CompileOptions
from tilelang.transform.common import Scope, collect, mutate_with_scope, walk

LOOP_LAYOUT = "tl.loop_layout"
DYNAMIC = "dynamic"  # the loop layout of a loop over a dynamic extent: rounds over the threads
FRAGMENT_LAYOUTS = "tl.fragment_layouts"
SHARED_LAYOUTS = "tl.shared_layouts"
ANNOTATED_LAYOUTS = "tl.annotated_layouts"  # set by T.annotate_layout (language/annotations.py)


class OpNode:
    """A tile op (`op/base.py` TileOp) as seen by layout inference: the op and its scope's threads.

    The op's own hooks give its layouts: `strict_layouts` (an instruction's registers) and
    `common_layouts` (from its operands' layouts, e.g. a reduction's destination)."""

    def __init__(self, op, threads):
        self.op, self.span = op, op.span
        self.num_threads = threads[1]

    @property
    def fragments(self):
        return self.op.fragments()

    def describe(self) -> str:
        return self.op.describe()


def _is_loop(node) -> bool:
    return isinstance(node, parallel.LoopNode)


# ---- collection ----------------------------------------------------------------------------------


def _collect(func):
    scope = Scope()
    nodes = []

    def on_for(loop, recurse):
        if is_parallel(loop):
            if not scope.threads:
                raise at_span("T.Parallel must be inside `with T.Kernel(...)`", loop.span)
            node = parallel.LoopNode(loop, scope.thread_var())
            if node.is_dynamic:
                _check_dynamic_loop(node)
            nodes.append(node)
            return loop  # nested parallel loops belong to this nest
        return recurse(loop)

    def on_eval(stmt, recurse):
        op = base.parse(stmt)
        if op is not None:
            nodes.append(OpNode(op, scope.thread_var()))
        return stmt

    mutate_with_scope(func.body, scope, {tirx.For: on_for, tirx.Evaluate: on_eval})
    return nodes, scope.analyzer


def _check_dynamic_loop(node):
    """A loop over a dynamic extent runs in rounds over the threads, with no layout: the fixed-shape
    fragments, whose elements each live on one thread, cannot follow it."""
    if node.accesses:
        raise at_span(
            f"layout inference: the {node.describe()} has a dynamic extent, but touches fragment "
            f"'{node.accesses[0][0].name}', whose elements live on fixed threads; loop over the "
            f"fragment's own shape (e.g. T.Parallel(block_M, block_N)) and guard the tail instead",
            node.span,
        )


class _State:
    """Layouts found so far; copied for the trial runs of the free level."""

    def __init__(self, analyzer):
        self.analyzer = analyzer
        self.fragments = {}  # buffer -> Fragment
        self.sources = {}  # buffer -> span of the use that fixed its layout
        self.loops = {}  # LoopNode -> Fragment
        self.settled = set()  # OpNodes whose common-level layouts are given
        self.shared = {}  # shared tile -> Layout imposed by an instruction (gemm operand swizzles)
        self.partial = set()  # replicated fragments whose copies hold partial values (reducers)

    def copy(self):
        other = _State(self.analyzer)
        other.fragments, other.sources, other.loops = dict(self.fragments), dict(self.sources), dict(self.loops)
        other.settled = set(self.settled)
        other.shared = dict(self.shared)
        other.partial = self.partial
        return other

    def pending(self, node) -> bool:
        if _is_loop(node):
            return not node.is_dynamic and node not in self.loops
        return node.op.infers_layouts() and node not in self.settled


def _thread_hint(old, new) -> str:
    """Why two layouts of a fragment differ when it is the threads they span: a use inside
    `if tx < n:` lays the fragment out over the first n threads only."""
    if old.num_threads == new.num_threads:
        return ""
    return (
        f" (the first spans {old.num_threads} threads, the second {new.num_threads}: a fragment used "
        f"inside `if tx < n:` belongs to those n threads; use it only there, and pass values to the "
        f"other threads through a shared tile)"
    )


def _give(state, buffer, layout, span, node):
    """Record `buffer`'s layout, or check it agrees with the one it already has."""
    if buffer in state.fragments:
        old = state.fragments[buffer]
        if not old.is_equivalent(layout):
            raise at_span(
                f"layout inference: fragment '{buffer.name}' is used by two operations that need "
                f"different layouts: its layout came from the first location below, and "
                f"{node.describe()} at the second needs another{_thread_hint(old, layout)}",
                state.sources[buffer],
                span,
            )
        return
    state.fragments[buffer] = layout
    state.sources[buffer] = span


def _runs_where_held(layout, fragment, buffer, indices, node) -> bool:
    """`parallel.runs_where_held`, with a user error for an index that is not the loop's."""
    try:
        return parallel.runs_where_held(layout, fragment, indices, node.vars)
    except NotEvaluable as err:
        raise at_span(
            f"layout inference: fragment '{buffer.name}' is indexed as [{', '.join(str(i) for i in indices)}] in "
            f"the {node.describe()}, with a {err} that is not one of the loop's variables: index a fragment "
            "with the T.Parallel loop's variables and constants (a leading index from an outer loop, such "
            "as one of several accumulators, is not supported: allocate them as separate fragments)",
            node.span,
        ) from None


def _settle_loop(state, node, layout):
    """Fix a loop's layout; give it to the fragments it touches, check those that have one."""
    state.loops[node] = layout
    node_layout_backup, node.layout = node.layout, layout
    try:
        for buffer, indices, is_store in node.accesses:
            if buffer in state.fragments:
                frag = state.fragments[buffer]
                if not _runs_where_held(layout, frag, buffer, indices, node):
                    raise at_span(
                        f"layout inference: fragment '{buffer.name}' is used by two operations that need "
                        f"different layouts: its layout came from the first location below, and the "
                        f"{node.describe()} at the second would run its elements on other threads"
                        f"{_thread_hint(frag, layout)}",
                        state.sources[buffer],
                        node.span,
                    )
                partial = buffer in state.partial  # each copy accumulates its own part (a reducer)
                if is_store and frag.groups and not partial and not parallel.writes_every_copy(
                    layout, frag, indices, node.vars
                ):
                    source = state.sources[buffer]
                    origin = "came from the first location below" if source is not None else "was annotated"
                    raise at_span(
                        f"layout inference: fragment '{buffer.name}' is held by several threads per element "
                        f"(its layout {origin}), but the {node.describe()} below writes it on only some of "
                        f"them, which would leave the other copies stale; write it in a loop that follows its "
                        f"layout, or into a fragment of its own",
                        source,
                        node.span,
                    )
            else:
                layout_of = parallel.fragment_layout_from(node, indices, buffer, is_store)
                _give(state, buffer, layout_of, node.span, node)
    finally:
        node.layout = node_layout_backup


# ---- the three levels ----------------------------------------------------------------------------


def strict_level(func, nodes, state, options=None):
    """User-annotated fragment layouts and loop layouts, and the layouts tile ops impose (the
    register layouts and operand swizzles of gemms)."""
    annotated = func.attrs.get(ANNOTATED_LAYOUTS) if func.attrs is not None else None
    for buffer, value in (annotated or {}).items():
        if buffer.scope() == "local.fragment":
            _give(state, buffer, fl.from_ir(value), None, None)
    target = func.attrs.get("target") if func.attrs is not None else None
    for node in nodes:
        if _is_loop(node):
            continue
        fragments, shared = node.op.strict_layouts(target, node.num_threads, options)
        state.partial.update(node.op.partial_fragments())
        for buffer, layout in fragments.items():
            _give(state, buffer, layout, node.span, node)
        for buffer, layout in shared.items():
            user = (annotated or {}).get(buffer)
            if user is not None and not _same_shared_layout(shared_layout_from_ir(user), layout):
                raise at_span(
                    f"layout inference: shared tile '{buffer.name}' is annotated with a layout that "
                    f"differs from the swizzle {node.describe()} reads it with",
                    node.span,
                )
            state.shared[buffer] = layout
    for node in nodes:
        if _is_loop(node) and "loop_layout" in node.loop.annotations:
            _settle_loop(state, node, fl.from_ir(node.loop.annotations["loop_layout"]).with_shape_vars(node.vars))


def common_level(nodes, state):
    """Propagate from known layouts until nothing changes. Returns True if anything was set."""
    progress_any = False
    progress = True
    while progress:
        progress = False
        for node in nodes:
            if _is_loop(node) and node not in state.loops:
                known = [a for a in node.accesses if a[0] in state.fragments]
                if not known:
                    continue
                stores = [a for a in known if a[2]]
                layout = None
                for buffer, indices, _ in stores + [a for a in known if not a[2]]:
                    try:
                        layout = parallel.loop_layout_from(state.fragments[buffer], indices, node, state.analyzer)
                        break
                    except Exception:  # noqa: BLE001 (this fragment's indices repeat: try another)
                        continue
                if layout is None:
                    continue  # the free level gives it a layout, then checks the fragments
                _settle_loop(state, node, layout)
                progress = progress_any = True
            elif not _is_loop(node) and state.pending(node):
                given = node.op.common_layouts(state.fragments)
                if given is not None:
                    for buffer, layout in given.items():
                        _give(state, buffer, layout, node.span, node)
                    state.settled.add(node)
                    progress = progress_any = True
    return progress_any


def _components(pending):
    """Connected components of the pending nodes, linked by the fragments they share."""
    comps = []
    for node in pending:
        frags = set(node.fragments)
        joined = [c for c in comps if c[1] & frags]
        merged = ([node], frags)
        for c in joined:
            merged = (c[0] + merged[0], c[1] | merged[1])
            comps.remove(c)
        comps.append(merged)
    return [sorted(c[0], key=pending.index) for c in comps]


def _register_cost(state, buffers):
    import tvm

    cost = 0
    for b in buffers:
        if b in state.fragments:
            cost += state.fragments[b].local_size * tvm.DataType(str(b.dtype)).bits
    return cost


def free_level(nodes, state):
    """Give the first unresolved component the cheapest root layout. Returns True if it did."""
    pending = [n for n in nodes if state.pending(n)]
    if not pending:
        return False
    component = _components(pending)[0]
    roots = [n for n in component if _is_loop(n)]
    if not roots:
        node = component[0]
        raise at_span(
            f"layout inference: the layout of fragment '{node.fragments[0].name}' cannot be inferred: "
            f"{node.describe()} needs its source's layout; write the source in a T.Parallel loop "
            f"or a copy first",
            node.span,
        )
    buffers = set(b for n in component for b in n.fragments)
    best, best_cost, first_error = None, None, None
    for root in roots:
        for candidate in parallel.free_layouts(root, state.analyzer, _coalesced_width(root.loop)):
            trial = state.copy()
            try:
                _settle_loop(trial, root, candidate)
                _complete(component, trial)
            except Exception as err:  # noqa: BLE001 (a root that leads to a conflict is not a candidate)
                first_error = first_error or err
                continue
            cost = _register_cost(trial, buffers)
            if best is None or cost < best_cost:
                best, best_cost = trial, cost
    if best is None:
        raise first_error
    state.fragments, state.sources, state.loops, state.settled = best.fragments, best.sources, best.loops, best.settled
    return True


def _complete(component, trial):
    """Propagate from the root; loops still unresolved get the first free layout that fits."""
    common_level(component, trial)
    while True:
        rest = [n for n in component if _is_loop(n) and trial.pending(n)]
        if not rest:
            return
        _settle_loop(trial, rest[0], parallel.free_layouts(rest[0], trial.analyzer, _coalesced_width(rest[0].loop))[0])
        common_level(component, trial)


def _coalesced_width(loop) -> int:
    value = loop.annotations.get("coalesced_width") if loop.annotations else None
    return int(value) if value is not None else 0


def infer_layout(func: tirx.PrimFunc, options: CompileOptions = DEFAULT_OPTIONS) -> tirx.PrimFunc:
    nodes, analyzer = _collect(func)
    state = _State(analyzer)
    strict_level(func, nodes, state, options)
    common_level(nodes, state)
    while free_level(nodes, state):
        common_level(nodes, state)
    _check_complete(func, nodes, state)
    return _annotate(func, nodes, state)


def _check_complete(func, nodes, state):
    for node in nodes:
        if not _is_loop(node) and state.pending(node):
            raise at_span(f"layout inference: {node.describe()}: the source's layout could not be inferred", node.span)


def _annotate(func, nodes, state):
    by_var = {node.vars[0]: fl.to_ir(layout) for node, layout in state.loops.items()}
    by_var.update({node.vars[0]: DYNAMIC for node in nodes if _is_loop(node) and node.is_dynamic})

    def on_for(loop):
        if loop.loop_var in by_var:
            ann = dict(loop.annotations)
            ann[LOOP_LAYOUT] = by_var[loop.loop_var]
            return tirx.For(
                loop.loop_var, loop.min, loop.extent, loop.kind, loop.body, loop.thread_binding, ann, span=loop.span
            )
        return loop

    func = func.with_body(tvm_ffi.structural_map(func.body, [(tirx.For, on_for)]))
    if state.fragments:
        func = func.with_attr(FRAGMENT_LAYOUTS, tvm_ffi.convert({b: fl.to_ir(f) for b, f in state.fragments.items()}))
    annotated = func.attrs.get(ANNOTATED_LAYOUTS) if func.attrs is not None else None
    shared = {b: v for b, v in (annotated or {}).items() if b.scope() != "local.fragment"}
    shared.update({b: shared_layout_to_ir(lay) for b, lay in state.shared.items()})
    for b, layout in _fragment_staging_tiles(func.body, state.fragments).items():
        if b not in shared:
            shared[b] = shared_layout_to_ir(layout)
    shared = _share_view_layouts(nodes, shared)
    if shared:
        func = func.with_attr(SHARED_LAYOUTS, tvm_ffi.convert(shared))
    if annotated is not None:
        func = func.without_attr(ANNOTATED_LAYOUTS)
    return func


def _share_view_layouts(nodes, shared: dict) -> dict:
    """A shared tile and its views (T.view / T.reshape) are one memory: a tile with a layout gives it
    to its views, and a view to its source, seen through the view's shape and dtype (`TileOp.
    shared_layouts`). A view whose own layout disagrees is reported where it is lowered."""
    known = {b: shared_layout_from_ir(v) for b, v in shared.items()}
    ops = [n.op for n in nodes if not _is_loop(n)]
    changed = True
    while changed:
        changed = False
        for op in ops:
            for b, layout in (op.shared_layouts(known) or {}).items():
                if b not in known:
                    known[b], changed = layout, True
    shared.update({b: shared_layout_to_ir(lay) for b, lay in known.items() if b not in shared})
    return shared


def _fragment_staging_tiles(body, fragments) -> dict:
    """Shared tiles written from fragments and otherwise only loaded and stored element-wise (an
    epilogue's `T.copy(acc, O_shared)` before `T.copy(O_shared, Out)`): they take the widest swizzle
    their rows allow. Row-major, the eight rows a warp stores from an accumulator layout share
    their banks when a row is a multiple of 128 bytes (8-way conflicts); swizzled they do not, and
    16-byte accesses stay whole. Tiles a tile op or a call reads whole (gemm operands, TMA, externs)
    keep the layout those impose."""
    staged, whole = [], []

    def on_store(st):
        if st.buffer.scope().startswith("shared") and any(
            ld.source in fragments for ld in collect(st.value, ir.TensorLoad)
        ):
            staged.append(st.buffer)

    def on_call(call):
        whole.extend(r.source for r in collect(call, ir.TensorRegion))
        whole.extend(a for a in call.args if base.is_buffer(a))

    walk(body, [(tirx.BufferStore, on_store), (ir.Call, on_call)])
    out = {}
    for b in staged:
        static = all(isinstance(n, tirx.IntImm) for n in b.shape)
        if not static or len(b.shape) < 2 or b in out or any(b.same_as(w) for w in whole):
            continue
        layout = sl.make_swizzled_layout(b)
        if layout.name != "linear":
            out[b] = layout
    return out


def _same_shared_layout(a: sl.Layout, b: sl.Layout) -> bool:
    import numpy as np

    return tuple(a.shape) == tuple(b.shape) and np.array_equal(a.inverse_table(), b.inverse_table())

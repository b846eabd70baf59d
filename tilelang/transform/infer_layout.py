"""Pass `infer_layout`: which thread runs each `T.Parallel` iteration and holds each fragment element.

Three levels, as in TileLang, each a function of its own:
  strict  layouts fixed by the user (`T.annotate_layout`, `T.Parallel(loop_layout=...)`) or an
          instruction; they are set first and never changed. A fragment touched outside loops
          and tile ops (`if mask[k]:`, `total += s[0]`) is read there by every thread: every
          thread holds all of it;
  common  breadth-first propagation: a loop touching a fragment with a layout runs each iteration
          where its element lives and gives its layout to the other fragments it touches; a
          reduction gives its destination the reduced layout of its source;
  free    what remains is grouped into connected components (ops sharing fragments); each
          component tries every loop as its root with the plain spread over the threads, and
          keeps the attempt that needs the fewest registers; then common again. When no attempt
          fits, a wider search lets loops follow fragments that do not cover them (`m[h]` in a
          loop over (h, k): row h's iterations on m[h]'s holders) and visits first the loops that
          touch laid-out fragments.

A fragment may be indexed by variables from outside the nest (`lse[k, i]`, `x[i, jj * 4 + j]`,
k and jj from loops around it): a loop follows it if the elements it touches stay on the same
threads for every value of those variables, and a fragment laid out from such a loop holds the
dimensions they index whole in each thread (`op/loop_indices.py`).

Before:  for i, j in T.Parallel(128, 64): C_f[i, j] = A_s[i, j]        (128 threads)
After:   the loop carries annotation `tl.loop_layout` (thread = (i*64+j)//4 % 128, vector 4) and the
         function attribute `tl.fragment_layouts` maps C_f to the same layout; annotated shared
         layouts go to `tl.shared_layouts`.

A loop over a dynamic extent (`T.Parallel(m)`, or a copy between global regions of dynamic size)
has no layout to infer: it is annotated `dynamic` and runs in rounds over the threads; it may not
touch fragments. (An extent the scope makes constant, `H1 - H0` with H1 bound to H0 + 64, is
folded first.) A loop that stores only into each thread's own buffers (`T.alloc_local`) and touches
no fragment is annotated `thread_local`: every thread runs all of it, over its own buffer.

Requires: copies and fills expanded to loops. Guarantees: every parallel loop and every fragment
has a layout, or a UserError names the fragment, the uses that disagree and their lines.
"""

from __future__ import annotations

import logging

import tvm_ffi
from tvm import ir, tirx

from tilelang.errors import at_span, describe_span
from tilelang.layout import fragment as fl
from tilelang.layout import layout as sl
from tilelang.layout.evaluate import NotEvaluable
from tilelang.layout.layout import shared_layout_from_ir, shared_layout_to_ir
from tilelang.op import base, loop_indices, parallel
from tilelang.op.loops import is_parallel
from tilelang.options import DEFAULT_OPTIONS, CompileOptions
from tilelang.transform.common import Scope, collect, mutate_with_scope, walk

LOOP_LAYOUT = "tl.loop_layout"
DYNAMIC = "dynamic"  # the loop layout of a loop over a dynamic extent: rounds over the threads
THREAD_LOCAL = "thread_local"  # the loop layout of a loop over local buffers: every thread runs it whole
FRAGMENT_LAYOUTS = "tl.fragment_layouts"
SHARED_LAYOUTS = "tl.shared_layouts"
ANNOTATED_LAYOUTS = "tl.annotated_layouts"  # set by T.annotate_layout (language/annotations.py)

logger = logging.getLogger("tilelang")


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
    """(`func` with the extents of its parallel nests folded where the scope makes them constant,
    its parallel nests and tile ops in program order, the scope's analyzer, the fragments touched
    outside them: {buffer: (span of the first such statement, threads there, "read" or "written")})."""
    scope = Scope()
    nodes, floating = [], {}

    def touch(stmt, *exprs, stored=None):
        found = [(stored, "written")] if stored is not None and stored.scope() == "local.fragment" else []
        for e in exprs:
            found += [(ld.source, "read") for ld in collect(e, ir.TensorLoad) if ld.source.scope() == "local.fragment"]
        for b, verb in found:
            if b not in floating and scope.threads:
                floating[b] = (stmt.span, scope.thread_var()[1], verb)

    def on_for(loop, recurse):
        if is_parallel(loop):
            if not scope.threads:
                raise at_span("T.Parallel must be inside `with T.Kernel(...)`", loop.span)
            loop = parallel.with_static_extents(loop, scope.analyzer)
            node = parallel.LoopNode(loop, scope.thread_var(), scope.analyzer)
            if node.is_dynamic:
                _check_dynamic_loop(node)
            nodes.append(node)
            return loop  # nested parallel loops belong to this nest
        touch(loop, loop.min, loop.extent)
        return recurse(loop)

    def on_eval(stmt, recurse):
        op = base.parse(stmt)
        if op is not None:
            nodes.append(OpNode(op, scope.thread_var()))
            return stmt
        touch(stmt, stmt.value)
        return stmt

    def on_store(stmt, recurse):
        touch(stmt, stmt.value, *stmt.indices, stored=stmt.buffer)
        return stmt

    def on_if(stmt, recurse):
        touch(stmt, stmt.condition)
        return recurse(stmt)

    def on_bind(stmt, recurse):
        touch(stmt, stmt.value)
        return recurse(stmt)

    callbacks = {tirx.For: on_for, tirx.Evaluate: on_eval, tirx.BufferStore: on_store, tirx.IfThenElse: on_if}
    callbacks[tirx.Bind] = on_bind
    body = mutate_with_scope(func.body, scope, callbacks)
    return func.with_body(body), nodes, scope.analyzer, floating


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
        self.floating = {}  # fragments touched outside loops and tile ops -> (span, threads there, verb)
        self.fixed_by = {}  # fragments whose layout a tile op fixes (strict level) -> that op, described

    def copy(self):
        other = _State(self.analyzer)
        other.fragments, other.sources, other.loops = dict(self.fragments), dict(self.sources), dict(self.loops)
        other.settled = set(self.settled)
        other.shared = dict(self.shared)
        other.partial, other.floating, other.fixed_by = self.partial, self.floating, self.fixed_by
        return other

    def adopt(self, other):
        """Take the layouts `other` (a copy of this state, extended) found."""
        self.fragments, self.sources = other.fragments, other.sources
        self.loops, self.settled = other.loops, other.settled

    def pending(self, node) -> bool:
        if _is_loop(node):
            return not node.is_dynamic and not node.is_thread_local and node not in self.loops
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
                f"{node.describe()} at the second needs another{_thread_hint(old, layout)}"
                f"{_floating_hint(state, buffer)}",
                state.sources[buffer],
                span,
            )
        return
    state.fragments[buffer] = layout
    state.sources[buffer] = span


def _origin(source) -> str:
    return "came from the first location below" if source is not None else "was annotated"


def _outer_hint(buffer, indices, node) -> str:
    """Why a loop indexing a fragment with variables from outside it cannot follow the fragment."""
    names = loop_indices.outer_variables(indices, node)
    if not names:
        return ""
    return (
        f" (it reads {buffer.name}[{', '.join(str(i) for i in indices)}], whose elements move to other threads "
        f"as {', '.join(names)} changes; the loop can only follow a fragment that keeps them on the same threads)"
    )


def _fixed_hint(state, buffer, node) -> str:
    """Why a loop cannot follow two fragments whose layouts instructions fix (the accumulators of
    two gemms added element-wise, when the gemms use different instructions or warp layouts)."""
    if buffer not in state.fixed_by:
        return ""
    for other in node.fragments:
        if (
            other is not buffer
            and other in state.fixed_by
            and not state.fragments[other].is_equivalent(state.fragments[buffer])
        ):
            return (
                f" ({state.fixed_by[buffer]} and {state.fixed_by[other]} fix the layouts of '{buffer.name}' and "
                f"'{other.name}', and they differ (different instructions or warp layouts); give the ops the "
                f"same instruction and warp policy, or pass one result through a shared tile first)"
            )
    return ""


def _floating_hint(state, buffer) -> str:
    if buffer not in state.floating:
        return ""
    return (
        f" ('{buffer.name}' is also read or written outside T.Parallel loops and tile ops, so every thread "
        f"must hold all of it; read it inside a T.Parallel loop, or copy it to a T.alloc_local first)"
    )


def _runs_where_held(layout, fragment, buffer, indices, node) -> bool:
    """`parallel.runs_where_held`, with a user error for an index the layout cannot follow."""
    try:
        return parallel.runs_where_held(layout, fragment, indices, node)
    except NotEvaluable as err:
        raise at_span(
            f"layout inference: fragment '{buffer.name}' is indexed as [{', '.join(str(i) for i in indices)}] in "
            f"the {node.describe()}, with an {err}: index a fragment with the T.Parallel loop's variables, "
            "plus constants or variables of loops around it (`frag[k, i]`, `frag[i, jj * 4 + j]`)",
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
                    source = state.sources[buffer]
                    raise at_span(
                        f"layout inference: fragment '{buffer.name}' is used by two operations that need "
                        f"different layouts: its layout {_origin(source)}, and the {node.describe()} "
                        f"{'at the second' if source is not None else 'below'} would run its elements on "
                        f"other threads{_thread_hint(frag, layout)}{_outer_hint(buffer, indices, node)}"
                        f"{_fixed_hint(state, buffer, node)}",
                        source,
                        node.span,
                    )
                partial = buffer in state.partial  # each copy accumulates its own part (a reducer)
                if (
                    is_store
                    and frag.groups
                    and not partial
                    and not parallel.writes_every_copy(layout, frag, indices, node)
                ):
                    source = state.sources[buffer]
                    raise at_span(
                        f"layout inference: fragment '{buffer.name}' is held by several threads per element "
                        f"(its layout {_origin(source)}), but the {node.describe()} below writes it on only some of "
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
            state.fixed_by[buffer] = node.describe()
            if len(layout.shape) != len(buffer.shape):
                raise at_span(
                    f"layout inference: {node.describe()} lays out fragment '{buffer.name}' as a "
                    f"{list(layout.shape)} tile, but it has shape {[int(n) for n in buffer.shape]} (a slice of a "
                    f"larger fragment); give each such tile a fragment of its own",
                    node.span,
                )
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
    _give_floating(state)
    for node in nodes:
        if _is_loop(node) and "loop_layout" in node.loop.annotations:
            _settle_loop(state, node, fl.from_ir(node.loop.annotations["loop_layout"]).with_shape_vars(node.vars))


def _give_floating(state):
    """A fragment touched outside T.Parallel loops and tile ops (`if mask[k]:`, `x = s[0]`) is read
    there by every thread: every thread holds all of it (the public TileLang's rule too). One whose
    layout an instruction or annotation spreads over the threads is the user's mistake."""
    for buffer, (span, threads, verb) in state.floating.items():
        whole = fl.fully_replicated(tuple(int(n) for n in buffer.shape), threads)
        if buffer not in state.fragments:
            state.fragments[buffer], state.sources[buffer] = whole, span
        elif not state.fragments[buffer].is_equivalent(whole):
            raise at_span(
                f"fragment '{buffer.name}' is {verb} outside a T.Parallel loop or tile op (first "
                f"location below), where every thread must hold all of it, but its layout spreads it over the "
                f"threads{' (second location)' if state.sources[buffer] is not None else ' (annotated)'}; "
                f"touch it inside a T.Parallel loop, or copy it to a T.alloc_local or shared tile first",
                span,
                state.sources[buffer],
            )


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
    """Give the first unresolved component the cheapest root layout. Returns True if it did.

    Each loop of the component is tried as the root, with each of its free layouts; the others
    follow by propagation, in program order. When no attempt fits, a wider search follows: roots
    may also follow a fragment that does not cover them (`loop_candidates`), and propagation goes
    to the loops that touch laid-out fragments first (as the public TileLang's queue does)."""
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
    best, first_error = _search(component, roots, state, wide=False)
    if best is None:
        best, _ = _search(component, roots, state, wide=True)
    if best is None:
        raise first_error
    state.adopt(best)
    return True


def _search(component, roots, state, wide: bool):
    """(the cheapest complete attempt or None, the first error met)."""
    buffers = set(b for n in component for b in n.fragments)
    best, best_cost, first_error = None, None, None
    for root in roots:
        for candidate in loop_candidates(root, state) if wide else _free(root, state):
            trial = state.copy()
            try:
                _settle_loop(trial, root, candidate)
                _complete(component, trial, wide)
            except Exception as err:  # noqa: BLE001 (a root that leads to a conflict is not a candidate)
                first_error = first_error or err
                continue
            cost = _register_cost(trial, buffers)
            if best is None or cost < best_cost:
                best, best_cost = trial, cost
    return best, first_error


def _free(node, state) -> list:
    return parallel.free_layouts(node, state.analyzer, _coalesced_width(node.loop))


def loop_candidates(node, state) -> list:
    """A loop's free layouts, then the layouts that follow a laid-out fragment it reads without
    covering the loop (`scale[i]` in a loop over (i, j): row i's iterations on scale[i]'s holders)."""
    out = list(_free(node, state))
    for buffer, indices, is_store in node.accesses:
        if buffer in state.fragments and not is_store and buffer not in state.partial:
            out += parallel.loop_layouts_following(state.fragments[buffer], indices, node)
    return out


def _complete(component, trial, wide: bool = False):
    """Propagate from the root; loops still unresolved get the first free layout, or (wide) the
    first loop touching a laid-out fragment gets the first of its candidates that fits."""
    common_level(component, trial)
    while True:
        rest = [n for n in component if _is_loop(n) and trial.pending(n)]
        if not rest:
            return
        if not wide:
            _settle_loop(trial, rest[0], _free(rest[0], trial)[0])
        else:
            informed = [n for n in rest if any(b in trial.fragments for b in n.fragments)]
            _settle_first_fitting(trial, (informed or rest)[0])
        common_level(component, trial)


def _settle_first_fitting(state, node):
    first_error = None
    for candidate in loop_candidates(node, state):
        attempt = state.copy()
        try:
            _settle_loop(attempt, node, candidate)
        except Exception as err:  # noqa: BLE001 (a layout that conflicts is not a candidate)
            first_error = first_error or err
            continue
        state.adopt(attempt)
        return
    raise first_error


def _coalesced_width(loop) -> int:
    value = loop.annotations.get("coalesced_width") if loop.annotations else None
    return int(value) if value is not None else 0


def infer_layout(func: tirx.PrimFunc, options: CompileOptions = DEFAULT_OPTIONS) -> tirx.PrimFunc:
    func, nodes, analyzer, floating = _collect(func)
    state = _State(analyzer)
    state.floating = floating
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


def _warn_enlarged(state):
    """A fragment indexed past its extent by a loop over more elements (`sinks[i]`, i < 64, of a
    [1] fragment) is laid out over the loop's extent, as the public TileLang does; say so."""
    for buffer, layout in state.fragments.items():
        shape = [int(n) for n in buffer.shape]
        if list(layout.shape) != shape:
            logger.warning(
                "layout inference: fragment '%s' of shape %s is indexed up to %s by a T.Parallel loop; it is "
                "laid out over the loop's extent (declare it with that shape)%s",
                buffer.name,
                shape,
                [n - 1 for n in layout.shape],
                describe_span(state.sources.get(buffer)).split("\n")[0].replace(" -->", ", at"),
            )


def _annotate(func, nodes, state):
    _warn_enlarged(state)
    by_var = {node.vars[0]: fl.to_ir(layout) for node, layout in state.loops.items()}
    by_var.update({node.vars[0]: DYNAMIC for node in nodes if _is_loop(node) and node.is_dynamic})
    by_var.update({node.vars[0]: THREAD_LOCAL for node in nodes if _is_loop(node) and node.is_thread_local})

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
    keep the layout those impose, as do tiles read as vectors at this point (`T.atomic_addx4(dst,
    acc_shared[i, d * 4])` hands a call four consecutive elements: a layout would have to map a
    vector index, which the lowering does not do)."""
    staged, whole = [], []

    def on_store(st):
        if st.buffer.scope().startswith("shared") and any(
            ld.source in fragments for ld in collect(st.value, ir.TensorLoad)
        ):
            staged.append(st.buffer)

    def on_call(call):
        whole.extend(r.source for r in collect(call, ir.TensorRegion))
        whole.extend(a for a in call.args if base.is_buffer(a))

    def on_load(ld):
        if any(isinstance(i, tirx.Ramp) for i in ld.indices):
            whole.append(ld.source)

    walk(body, [(tirx.BufferStore, on_store), (ir.Call, on_call), (ir.TensorLoad, on_load)])
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

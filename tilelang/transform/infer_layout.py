"""Pass `infer_layout`: decide which thread runs each `T.Parallel` iteration and holds each fragment element.

Levels, as in TileLang:
  strict  layouts fixed by an instruction or the user (none yet in this version of the compiler);
  common  a loop that touches a fragment whose layout is known takes its loop layout from that
          fragment (iteration (i, j) runs where the element it touches lives); the loop then gives
          its layout to the other fragments it touches; repeated until nothing changes;
  free    the first loop still without a layout gets the plain spread over the threads
          (`layout.fragment.partition`), vectorized as wide as its accesses allow; then common again.

Before:  for i, j in T.Parallel(128, 64): C_f[i, j] = A_s[i, j]        (128 threads)
After:   the loop carries annotation `tl.loop_layout` (thread = (i*64+j)//4 % 128, vector 4) and the
         function attribute `tl.fragment_layouts` maps C_f to the same layout.

Requires: copies and fills expanded to loops. Guarantees: every parallel loop and every fragment of
a kernel has a layout, or a UserError names the fragment, the two uses that disagree and their lines.
"""

from __future__ import annotations

import tvm_ffi
from tvm import ir, tirx

from tilelang.language.diagnostics import at_span
from tilelang.layout import fragment as fl
from tilelang.transform.common import Scope, is_parallel, mutate_with_scope, parallel_nest
from tilelang.transform.plan_vectorize import plan_vector_size

LOOP_LAYOUT = "tl.loop_layout"
FRAGMENT_LAYOUTS = "tl.fragment_layouts"


class _Loop:
    """An outermost T.Parallel nest and what inference needs to know about it."""

    def __init__(self, loop, threads):
        self.loop = loop
        self.vars, self.extents, self.body = parallel_nest(loop)
        self.thread_expr, self.num_threads = threads
        self.layout = None
        self.fragment_accesses = []  # (buffer, indices, is_store)

        def on_load(ld):
            if ld.source.scope() == "local.fragment":
                self.fragment_accesses.append((ld.source, list(ld.indices), False))

        def on_store(st):
            if st.buffer.scope() == "local.fragment":
                self.fragment_accesses.append((st.buffer, list(st.indices), True))

        tvm_ffi.structural_walk(self.body, [(ir.TensorLoad, on_load), (tirx.BufferStore, on_store)])

    @property
    def shape(self):
        return tuple(int(e) for e in self.extents)


def _collect_loops(func):
    scope = Scope()
    loops = []

    def on_for(loop, recurse):
        if is_parallel(loop):
            if scope.thread_var()[1] == 1 and not scope.threads:
                raise at_span("T.Parallel must be inside `with T.Kernel(...)`", loop.span)
            loops.append(_Loop(loop, scope.thread_var()))
            return loop  # nested parallel loops belong to this nest
        return recurse(loop)

    mutate_with_scope(func.body, scope, {tirx.For: on_for})
    return loops, scope.analyzer


def _is_identity(indices, loop) -> bool:
    return len(indices) == len(loop.vars) and all(
        isinstance(i, ir.Var) and i.same_as(v) for i, v in zip(indices, loop.vars))


def _loop_layout_from(frag, indices, loop, analyzer):
    """The loop layout under which iteration `loop.vars` touches `frag[indices]` on its owner thread."""
    thread, index = frag.map(indices)
    vec = 1
    if _is_identity(indices, loop) and frag.vector_size > 1:
        vec = plan_vector_size(loop.vars, loop.extents, loop.body, analyzer, limit=frag.vector_size)
    layout = fl.Fragment(loop.shape, list(loop.vars), analyzer.simplify(thread), analyzer.simplify(index),
                         frag.num_threads, vector_size=vec)
    return layout


def _check_bijective(layout, loop, buffer):
    try:
        layout.inverse()
    except Exception:  # noqa: BLE001 (TVM raises a generic error when the map is not invertible)
        raise at_span(
            f"layout inference: the T.Parallel loop of shape {list(loop.shape)} touches fragment "
            f"'{buffer.name}' at indices that do not cover it one element per iteration; "
            f"loops over a fragment must index it with their own loop variables",
            loop.loop.span) from None


def _fragment_layout_from(loop, indices, buffer):
    """The fragment layout that loop layout `loop.layout` gives `buffer`, accessed at `indices`.

    The access must visit each element once: the indices are the loop variables in some order,
    over the fragment's whole shape. Then element e lives where the iteration touching it runs.
    """
    shape = tuple(int(s) for s in buffer.shape)
    perm = []
    for idx in indices:
        hit = [k for k, v in enumerate(loop.vars) if isinstance(idx, ir.Var) and idx.same_as(v)]
        perm.append(hit[0] if hit else None)
    if None in perm or sorted(perm) != list(range(len(loop.vars))) or \
            tuple(loop.shape[k] for k in perm) != shape:
        raise at_span(
            f"layout inference: cannot derive a layout for fragment '{buffer.name}' of shape "
            f"{list(shape)} from a T.Parallel loop of shape {list(loop.shape)} indexing it as "
            f"[{', '.join(str(i) for i in indices)}]; index a fragment with the loop variables of a "
            f"loop over its own shape", loop.loop.span)
    elem_vars = fl.placeholder_vars(len(indices), "j")
    loop_point = [None] * len(loop.vars)
    for d, k in enumerate(perm):
        loop_point[k] = elem_vars[d]
    thread, index = loop.layout.map(loop_point)
    vec = loop.layout.vector_size if perm == sorted(perm) else 1
    return fl.Fragment(shape, elem_vars, thread, index, loop.layout.num_threads, vector_size=vec)


def _assign(loop, layouts, sources, analyzer):
    """Give the loop's layout to the fragments it touches; check those that have one already."""
    for buffer, indices, _ in loop.fragment_accesses:
        if buffer in layouts:
            frag = layouts[buffer]
            thread, _ = frag.map(indices)
            if not analyzer.can_prove_equal(thread, loop.layout.thread):
                raise at_span(
                    f"layout inference: fragment '{buffer.name}' is used by two loops that need different "
                    f"layouts (its layout came from the first location below; the second loop would run "
                    f"its elements on other threads)", sources[buffer], loop.loop.span)
        else:
            layouts[buffer] = _fragment_layout_from(loop, indices, buffer)
            sources[buffer] = loop.loop.span


def infer_layout(func: tirx.PrimFunc) -> tirx.PrimFunc:
    loops, analyzer = _collect_loops(func)
    layouts, sources = {}, {}
    pending = list(loops)
    while pending:
        chosen = None
        for loop in pending:  # common: a loop touching a fragment with a known layout
            known = [a for a in loop.fragment_accesses if a[0] in layouts]
            if known:
                stores = [a for a in known if a[2]]
                buffer, indices, _ = (stores or known)[0]
                loop.layout = _loop_layout_from(layouts[buffer], indices, loop, analyzer)
                _check_bijective(loop.layout, loop, buffer)
                chosen = loop
                break
        if chosen is None:  # free: the first remaining loop gets the plain spread over its threads
            chosen = pending[0]
            vec = plan_vector_size(chosen.vars, chosen.extents, chosen.body, analyzer,
                                   limit=_coalesced_width(chosen.loop))
            total = 1
            for n in chosen.shape:
                total *= n
            while vec > 1 and total % (chosen.num_threads * vec) != 0:
                vec //= 2  # wider vectors would leave threads idle or split a round unevenly
            chosen.layout = fl.partition(chosen.shape, chosen.num_threads, vec).with_shape_vars(chosen.vars)
        _assign(chosen, layouts, sources, analyzer)
        pending.remove(chosen)

    by_var = {loop.vars[0]: loop.layout for loop in loops}

    def on_for(loop):
        if loop.loop_var in by_var:
            ann = dict(loop.annotations)
            ann[LOOP_LAYOUT] = fl.to_ir(by_var[loop.loop_var])
            return tirx.For(loop.loop_var, loop.min, loop.extent, loop.kind, loop.body, loop.thread_binding,
                            ann, span=loop.span)
        return loop

    body = tvm_ffi.structural_map(func.body, [(tirx.For, on_for)])
    func = func.with_body(body)
    if layouts:
        func = func.with_attr(FRAGMENT_LAYOUTS, tvm_ffi.convert({b: fl.to_ir(f) for b, f in layouts.items()}))
    return func


def _coalesced_width(loop) -> int:
    value = loop.annotations.get("coalesced_width") if loop.annotations else None
    return int(value) if value is not None else 0

"""Pass `lower_parallel_loops`: each `T.Parallel` nest becomes the loop one thread runs; fragments
become per-thread register arrays.

With the loop layout from `infer_layout` (iteration -> (thread, register index)), a thread visits the
iterations it owns by inverting the layout: for each register index r, the logical iteration is
`inverse(thread, r)`. The innermost `vector_size` registers are one vector loop, which TVM's
`VectorizeLoop` turns into 128-bit accesses. A fragment `F[i, j]` becomes `F_local[index(i, j)]`
with `F_local` holding only the thread's own elements.

Before:  for i, j in T.Parallel(128, 64): C_f[i, j] = A_s[i, j]          (128 threads, vector 4)
After:   for r0 in range(16): for r1 in T.vectorized(4):
             C_f_local[r0 * 4 + r1] = A_s[r0 * 2 + tx // 16, tx % 16 * 4 + r1]

Requires: `infer_layout`. Guarantees: no parallel loops and no `local.fragment` buffers remain;
guards that vary within a vector were ruled out by the vector-size plan, so they are rewritten at
the vector's first lane and stay uniform.
"""

from __future__ import annotations

import tvm_ffi
from tvm import ir, tirx

from tilelang.language.diagnostics import at_span
from tilelang.layout import fragment as fl
from tilelang.transform.common import Scope, collect, mutate_with_scope, parallel_nest, walk
from tilelang.transform.infer_layout import FRAGMENT_LAYOUTS, LOOP_LAYOUT


def _uniform_guards(stmt, vec_var):
    """Guards evaluated at the vector's first lane (valid: the plan proved them uniform)."""
    zero = {vec_var: tirx.const(0, "int32")}

    def on_if(node):
        return tirx.IfThenElse(fl.substitute(node.condition, zero), node.then_case, node.else_case, span=node.span)

    def on_call(call):
        if getattr(call.op, "name", "") == "tirx.if_then_else":
            return tirx.if_then_else(fl.substitute(call.args[0], zero), call.args[1], call.args[2])
        return call

    return tvm_ffi.structural_map(stmt, [(tirx.IfThenElse, on_if), (ir.Call, on_call)])


def lower_parallel_loops(func: tirx.PrimFunc) -> tirx.PrimFunc:
    layouts = {}
    if func.attrs is not None and FRAGMENT_LAYOUTS in func.attrs:
        layouts = {b: fl.from_ir(v) for b, v in func.attrs[FRAGMENT_LAYOUTS].items()}
    local_of = {b: tirx.decl_buffer((f.local_size,), str(b.dtype), f"{b.name}_local", scope="local")
                for b, f in layouts.items()}
    scope = Scope()
    ana = scope.analyzer

    def remap_fragments(stmt):
        def on_load(ld):
            if ld.source in layouts:
                _, index = layouts[ld.source].map(list(ld.indices))
                return tirx.BufferLoad(local_of[ld.source], [ana.simplify(index)])
            return ld

        def on_store(st):
            if st.buffer in layouts:
                _, index = layouts[st.buffer].map(list(st.indices))
                return tirx.BufferStore(local_of[st.buffer], st.value, [ana.simplify(index)], span=st.span)
            return st

        return tvm_ffi.structural_map(stmt, [(ir.TensorLoad, on_load), (tirx.BufferStore, on_store)], order="post")

    def on_for(loop, recurse):
        if LOOP_LAYOUT not in loop.annotations:
            return recurse(loop)
        layout = fl.from_ir(loop.annotations[LOOP_LAYOUT])
        loop_vars, _, body = parallel_nest(loop)
        thread, _count = scope.thread_var()
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
        body = remap_fragments(fl.substitute(body, mapping))
        if not (isinstance(valid, tirx.IntImm) and valid.value == 1):
            body = tirx.IfThenElse(valid, body, None)
        if lane is not None:
            body = _uniform_guards(body, lane)
            body = tirx.For(lane, tirx.const(0, "int32"), tirx.const(vec, "int32"), tirx.ForKind.VECTORIZED, body)
            extent = size // vec
        else:
            extent = size
        if extent == 1:
            return fl.substitute(body, {outer: tirx.const(0, "int32")})
        return tirx.For(outer, tirx.const(0, "int32"), tirx.const(extent, "int32"), tirx.ForKind.SERIAL, body,
                        span=loop.span)

    def on_alloc(stmt, recurse):
        if stmt.buffer in local_of:
            return tirx.AllocBuffer(local_of[stmt.buffer])
        return stmt

    body = mutate_with_scope(func.body, scope, {tirx.For: on_for, tirx.AllocBuffer: on_alloc})
    _check_no_fragment_left(body)
    func = func.with_body(body)
    return func.without_attr(FRAGMENT_LAYOUTS) if layouts else func


def _check_no_fragment_left(body):
    """Fragments touched outside parallel loops have no per-thread form: report the statement."""

    def fragment_reads(node):
        return [ld.source.name for ld in collect(node, ir.TensorLoad) if ld.source.scope() == "local.fragment"]

    def on_store(st):
        if st.buffer.scope() == "local.fragment":
            raise at_span(f"fragment '{st.buffer.name}' is written outside a T.Parallel loop or tile op; "
                          f"fragments are spread over threads, so index them only inside T.Parallel", st.span)
        reads = fragment_reads(st.value) + [n for i in st.indices for n in fragment_reads(i)]
        if reads:
            raise at_span(f"fragment '{reads[0]}' is read outside a T.Parallel loop or tile op; "
                          f"use T.alloc_local or T.alloc_var for per-thread values", st.span)

    def on_if(node):
        reads = fragment_reads(node.condition)
        if reads:
            raise at_span(f"fragment '{reads[0]}' is read outside a T.Parallel loop or tile op", node.span)

    walk(body, [(tirx.BufferStore, on_store), (tirx.IfThenElse, on_if)])

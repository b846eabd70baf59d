"""Pass `apply_global_layouts`: a global tensor with a layout from `T.annotate_layout` is read and
written through it.

The layout maps the tensor's logical index to where the element is stored: the tensor's memory holds
the layout's output space row-major (TileLang's rule for a global buffer with a layout). A backward
kernel may, for example, keep its float32 dQ in the order its gemm fragments hold it, so that each
thread's atomic adds go to adjacent addresses, and a second kernel reads it back through the same
layout. Every load and store of the tensor goes to a flat view of the same memory, at the layout's
offset; the kernel's parameter, and so what the caller passes and the host checks, is unchanged.

Before:  T.annotate_layout({A: T.Layout((64, 64), lambda i, j: [j, i])})
         for i, j in T.Parallel(64, 64): B[i, j] = A[i, j]
After:   A_1 = T.decl_buffer((4096,), data=A.data)      (at the top of each kernel reading A)
         for i, j in T.Parallel(64, 64): B[i, j] = A_1[j * 64 + i]

It runs after `legalize_safe_memory_access`, whose guards compare logical indices with the logical
shape (a logical index past the edge may well land inside the memory through the layout), and
before `infer_layout`, whose vector plan then sees the physical offsets: a loop whose consecutive
iterations are not adjacent in memory is not vectorized. The TMA planners (`lower_tma_copies`,
`plan_pipelines`) leave copies of such a tensor to the element-wise form (`laid_out_global`).

Requires: copies and fills expanded to loops. Guarantees: no access of the annotated tensor is left
but through the view, the layout is gone from `tl.annotated_layouts`; any other use of the tensor
(a tile op that reads it as stored, such as a bulk `T.atomic_add(..., use_tma=True)`, a view, a
pointer) is a UserError at its line.
"""

from __future__ import annotations

import tvm_ffi
from tvm import ir, sym, tirx

from tilelang.errors import at_span
from tilelang.layout.fragment import substitute
from tilelang.layout.layout import shared_layout_from_ir
from tilelang.op import base
from tilelang.transform.common import collect, is_innermost_thread_extent
from tilelang.transform.infer_layout import ANNOTATED_LAYOUTS
from tilelang.utils.ir import first_use_span, seq


def global_layouts(func) -> dict:
    """{global tensor: Layout} of the tensors `T.annotate_layout` gave a layout."""
    annotated = func.attrs.get(ANNOTATED_LAYOUTS) if func.attrs is not None else None
    return {b: shared_layout_from_ir(v) for b, v in (annotated or {}).items() if b.scope() == "global"}


def laid_out_global(buffer, func) -> bool:
    """Whether `buffer` is a global tensor with a layout: its copies stay element-wise (a TMA box
    reads the tensor as stored)."""
    annotated = func.attrs.get(ANNOTATED_LAYOUTS) if func.attrs is not None else None
    return annotated is not None and buffer.scope() == "global" and buffer in annotated


def apply_global_layouts(func: tirx.PrimFunc) -> tirx.PrimFunc:
    layouts = global_layouts(func)
    if not layouts:
        return func
    views = {
        b: tirx.decl_buffer((lay.physical_size,), str(b.dtype), b.name, scope="global") for b, lay in layouts.items()
    }
    ana = sym.Analyzer()

    def physical(buffer, indices):
        lay = layouts[buffer]
        indices = [i if str(i.ty.dtype) == "int32" else tirx.Cast("int32", i) for i in indices]
        return [ana.simplify(substitute(lay.forward, dict(zip(lay.vars, indices))))]

    def on_load(ld):
        if ld.source in views:
            return tirx.BufferLoad(views[ld.source], physical(ld.source, list(ld.indices)))
        return ld

    def on_store(st):
        if st.buffer in views:
            return tirx.BufferStore(views[st.buffer], st.value, physical(st.buffer, list(st.indices)), span=st.span)
        return st

    body = tvm_ffi.structural_map(func.body, [(ir.TensorLoad, on_load), (tirx.BufferStore, on_store)], order="post")
    _check_no_other_use(body, layouts)
    body = _declare_views(body, views, [p for p in func.params if p in views])
    annotated = {b: v for b, v in func.attrs[ANNOTATED_LAYOUTS].items() if b not in layouts}
    func = func.with_body(body).without_attr(ANNOTATED_LAYOUTS)
    return func.with_attr(ANNOTATED_LAYOUTS, tvm_ffi.convert(annotated)) if annotated else func


def _declare_views(body, views: dict, params: list):
    """Each view declared where its tensor is: at the top of every kernel using a parameter, right
    after the declaration of a tensor the function declares itself (a T.make_tensor, a view)."""

    def uses(node):
        found = {v for v in collect(node, ir.Var) if tirx.is_buffer_var(v)}
        return [b for b in params if views[b] in found]

    def on_attr(attr):
        if not is_innermost_thread_extent(attr):
            return attr
        used = uses(attr.body)
        if not used:
            return attr
        decls = [tirx.DeclBuffer(views[b], data=b.data) for b in used]
        return tirx.AttrStmt(attr.node, attr.attr_key, attr.value, seq([*decls, attr.body]), span=attr.span)

    def on_decl(stmt):
        if stmt.buffer in views and stmt.buffer not in params:
            return seq([stmt, tirx.DeclBuffer(views[stmt.buffer], data=stmt.buffer.data)])
        return stmt

    return tvm_ffi.structural_map(
        body, [(tirx.AttrStmt, on_attr), (tirx.DeclBuffer, on_decl), (tirx.AllocBuffer, on_decl)], order="post"
    )


def _check_no_other_use(body, layouts: dict):
    """After the rewrite, the annotated tensors may appear only in their own declarations: any other
    use reads or writes the memory as stored, not through the layout."""

    def named(node):
        return [b for b in layouts if any(v.same_as(b) for v in collect(node, ir.Var))]

    def first_use(stmts):
        for st in stmts:
            if isinstance(st, tirx.Evaluate):
                hit = named(st)
                if hit:
                    return st, hit[0]
        return None

    for decl in collect(body, tirx.DeclBuffer):
        if decl.buffer not in layouts and named(decl.data):
            raise at_span(
                f"'{decl.buffer.name}' views global tensor '{named(decl.data)[0].name}', which has a layout from "
                f"T.annotate_layout: a view reads the memory as stored, not through the layout; index the tensor "
                f"itself, or drop its layout",
                decl.span or first_use_span(body, decl.buffer),
            )
    found = first_use(collect(body, tirx.Evaluate))
    if found is None:
        return
    stmt, buffer = found
    op = base.parse(stmt)
    what = op.describe() if op is not None else "this statement"
    hint = "; drop use_tma=True (element atomics go through the layout)" if getattr(op, "use_tma", False) else ""
    raise at_span(
        f"{what} uses global tensor '{buffer.name}' as it is stored in memory, but the tensor has a layout "
        f"from T.annotate_layout; only T.copy, T.atomic_add of elements and element accesses go through the "
        f"layout{hint}",
        getattr(op, "span", None) or stmt.span,
    )

"""`T.prim_func`: parse a kernel with TVM's TVMScript parser, then give two constructs TileLang's meaning.

TVM 0.27's parser already accepts the T.* helpers as plain Python (see `kernel.py`, `loops.py`).
Two constructs parse to a different meaning than TileLang's, and are fixed right after parsing:

1. `for i, j in T.Parallel(M, N)` parses to serial loops; the loops whose variables `T.Parallel`
   recorded become parallel loops carrying the annotations given to `T.Parallel`.
2. `x = expr` parses to a mutable one-element local buffer; when such a scalar is stored exactly
   once, right after its allocation, with a value that does not read itself, it becomes an
   immutable binding (`Bind`), as in TileLang (so `y = by * 64 + i` inside a `T.Parallel` is an
   index expression, not a register write). Scalars assigned more than once stay variables.
"""

from __future__ import annotations

import functools

import tvm_ffi
from tvm import ir, tirx
from tvm.error import DiagnosticError
from tvm.script import tirx as _script

from tilelang.errors import UserError, describe_function
from tilelang.language import annotations as annotations_mod
from tilelang.language import (
    loops,
    symbolics,
    syntax,  # noqa: F401 (tuple assignment, comparisons: the parser's rules)
)


def prim_func(func=None, *, private=False, check_well_formed=True):
    """Decorator: trace a Python function written with T.* into a kernel (a TIR PrimFunc).

    Example:
        @T.prim_func
        def main(A: T.Tensor((1024,), "float32"), B: T.Tensor((1024,), "float32")):
            with T.Kernel(8, threads=128) as bx:
                for i in T.Parallel(128):
                    B[bx * 128 + i] = A[bx * 128 + i] * 2.0
    """
    if func is None:
        return functools.partial(prim_func, private=private, check_well_formed=check_well_formed)
    parse = functools.partial(_script.prim_func, func, private=private, check_well_formed=check_well_formed)
    return finish_parse(parse, describe_function(func), func)


def finish_parse(parse, where: str, func=None):
    """Run `parse` (TVM's parser on one kernel, returning its PrimFunc) and give the two constructs of
    the module doc TileLang's meaning; `where` locates the kernel in errors about its symbols, `func`
    (the kernel's Python function, when there is one) the line using an undefined one."""
    loops.parallel_loop_vars.clear()
    loops.persistent_loops.clear()
    annotations_mod.annotated_layouts.clear()
    try:
        try:
            parsed = parse()
        except DiagnosticError as err:
            # TVM's excepthook prints only a hint for its DiagnosticError, not the message.
            raise UserError(symbolics.explain_undefined(str(err).strip(), func)) from None
        parallel = dict(loops.parallel_loop_vars)
        persistent = dict(loops.persistent_loops)
        layouts = dict(annotations_mod.annotated_layouts)
    finally:
        loops.parallel_loop_vars.clear()
        loops.persistent_loops.clear()
        annotations_mod.annotated_layouts.clear()
    symbolics.check_symbols(parsed, where)
    body = loops.lower_persistent_loops(parsed.body, persistent)
    body = mark_parallel_loops(body, parallel)
    body = bind_single_store_scalars(body)
    parsed = parsed.with_body(body)
    if layouts:
        parsed = parsed.with_attr(
            "tl.annotated_layouts", tvm_ffi.convert({b: _layout_to_ir(lay) for b, lay in layouts.items()})
        )
    return parsed


def _layout_to_ir(layout):
    from tilelang.layout.fragment import Fragment, to_ir
    from tilelang.layout.layout import shared_layout_to_ir

    return to_ir(layout) if isinstance(layout, Fragment) else shared_layout_to_ir(layout)


def mark_parallel_loops(body, parallel_vars: dict):
    """Turn the loops whose variable is a key of `parallel_vars` into parallel loops."""
    if not parallel_vars:
        return body

    def on_for(loop):
        if loop.loop_var not in parallel_vars:
            return loop
        ann = dict(loop.annotations)
        ann.update(parallel_vars[loop.loop_var])
        return tirx.For(
            loop.loop_var,
            loop.min,
            loop.extent,
            tirx.ForKind.PARALLEL,
            loop.body,
            loop.thread_binding,
            ann,
            span=loop.span,
        )

    return tvm_ffi.structural_map(body, [(tirx.For, on_for)], order="post")


def _is_scalar_alloc(stmt) -> bool:
    if not isinstance(stmt, tirx.AllocBuffer):
        return False
    buf = stmt.buffer
    return (
        buf.scope() == "local"
        and len(buf.shape) == 1
        and isinstance(buf.shape[0], tirx.IntImm)
        and buf.shape[0].value == 1
    )


def _touches(node, buf, kinds) -> bool:
    found = []

    def visit(n):
        target = n.buffer if isinstance(n, tirx.BufferStore) else n.source
        if target.same_as(buf):
            found.append(n)

    tvm_ffi.structural_walk(node, [(k, visit) for k in kinds])
    return bool(found)


def bind_single_store_scalars(body):
    """Replace `alloc x; x[0] = v; ...uses of x[0]` by `Bind(x, v); ...uses of x` (see module doc)."""

    def on_seq(seq):
        stmts = list(seq.seq)
        out, changed, k = [], False, 0
        while k < len(stmts):
            s, nxt = stmts[k], (stmts[k + 1] if k + 1 < len(stmts) else None)
            rest = stmts[k + 2 :]
            if (
                _is_scalar_alloc(s)
                and isinstance(nxt, tirx.BufferStore)
                and nxt.buffer.same_as(s.buffer)
                and not _touches(nxt.value, s.buffer, [ir.TensorLoad])
                and not any(_touches(r, s.buffer, [tirx.BufferStore]) for r in rest)
            ):
                buf = s.buffer
                var = tirx.Var(buf.name, str(nxt.value.ty.dtype))
                out.append(tirx.Bind(var, nxt.value, span=nxt.span))
                replace = [(ir.TensorLoad, lambda ld, buf=buf, var=var: var if ld.source.same_as(buf) else ld)]
                stmts = stmts[: k + 2] + [tvm_ffi.structural_map(r, replace) for r in rest]
                k += 2
                changed = True
                continue
            out.append(s)
            k += 1
        return seq_of(out, seq.span) if changed else seq

    return tvm_ffi.structural_map(body, [(tirx.SeqStmt, on_seq)], order="post")


def seq_of(stmts, span=None):
    return stmts[0] if len(stmts) == 1 else tirx.SeqStmt(stmts, span=span)


# The parser finds the dialect of a decorated function through this attribute of its decorator.
prim_func.dispatch_token = "tirx"

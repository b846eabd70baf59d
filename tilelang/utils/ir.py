"""Small helpers over TVM 0.27 IR nodes, used by every layer of the compiler."""

from __future__ import annotations

from tvm import ir, tirx


def dtype_of(expr) -> str:
    """The dtype string of a PrimExpr."""
    return str(expr.ty.dtype)


def const_int(expr):
    """The Python int of a constant integer expression, or None."""
    if isinstance(expr, int):
        return expr
    if isinstance(expr, tirx.IntImm):
        return int(expr.value)
    return None


def is_one(expr) -> bool:
    return const_int(expr) == 1


def is_zero(expr) -> bool:
    return const_int(expr) == 0


def seq(stmts) -> tirx.Stmt:
    """One statement from a list (a SeqStmt only when there are several)."""
    stmts = [s for s in stmts if s is not None]
    if len(stmts) == 1:
        return stmts[0]
    return tirx.SeqStmt(stmts)


def extern(name: str, *args) -> tirx.Stmt:
    """The statement `name(args...);` calling a device function (a tl:: template, a PTX wrapper)."""
    return tirx.Evaluate(tirx.call_extern("void", name, *args))


def extern_name(stmt) -> str | None:
    """The device function an `Evaluate(call_extern(...))` statement calls (what `extern` builds),
    else None."""
    call = stmt.value if isinstance(stmt, tirx.Evaluate) else None
    if isinstance(call, ir.Call) and isinstance(call.op, ir.Op) and call.op.name == "tirx.call_extern":
        return str(call.args[0].value)
    return None


def loop_with_body(loop: tirx.For, body: tirx.Stmt) -> tirx.For:
    """`loop` (its variable, range, kind, binding, annotations and step) around another body."""
    return tirx.For(
        loop.loop_var, loop.min, loop.extent, loop.kind, body, loop.thread_binding, loop.annotations, loop.step,
        span=loop.span,
    )  # fmt: skip


def block_sync(scope: str) -> tirx.Stmt:
    """A barrier over the whole block for `scope`'s memory, as TVM's barrier insertion writes it."""
    return tirx.Evaluate(tirx.call_intrin("int32", "tirx.tvm_storage_sync", ir.StringImm(scope)))


def is_block_barrier(stmt) -> bool:
    """Whether `stmt` is a barrier over the whole block: TVM's `tvm_storage_sync` of shared memory
    (what its barrier insertion adds) or a `__syncthreads()` call."""
    call = stmt.value if isinstance(stmt, tirx.Evaluate) else None
    if isinstance(call, ir.Call) and isinstance(call.op, ir.Op) and call.op.name == "tirx.tvm_storage_sync":
        return str(call.args[0].value) in ("shared", "shared.dyn")
    return extern_name(stmt) == "__syncthreads"


def statements(stmt) -> list:
    """The statements of a SeqStmt, or `stmt` alone."""
    return list(stmt.seq) if isinstance(stmt, tirx.SeqStmt) else [stmt]


def i32(x):
    """An int32 constant (index arithmetic is int32 throughout)."""
    return tirx.const(int(x), "int32")


def collect(node, kind) -> list:
    """Every sub-node of `node` of type `kind`, in pre-order."""
    import tvm_ffi

    out = []
    tvm_ffi.structural_walk(node, [(kind, out.append)], order="pre")
    return out


def touches(node, buffer) -> bool:
    """Whether `node` loads, stores or otherwise names `buffer`'s memory."""
    if any(st.buffer.same_as(buffer) for st in collect(node, tirx.BufferStore)):
        return True
    if any(ld.source.same_as(buffer) for ld in collect(node, ir.TensorLoad)):
        return True
    return any(v.same_as(buffer.data) for v in collect(node, ir.Var))


def first_use_span(body, buffer):
    """The span of the innermost statement with one around the first use of `buffer` in `body` (for an
    error about a buffer whose declaration has no span: a parameter, a view), or None. Lowered tile
    ops keep the user's line on their loops, not on the stores inside."""
    best = None
    for stmt in collect(body, tirx.Stmt):
        if stmt.span is None or not touches(stmt, buffer):
            continue
        if best is not None and not any(s.same_as(stmt) for s in collect(best, tirx.Stmt)):
            break  # past the first use
        best = stmt
    return best.span if best is not None else None


def is_pure_call(call) -> bool:
    """Whether a call has no side effects (its op's TCallEffectKind is pure or weaker): a condition
    made of such calls has one value wherever it is evaluated, given the same arguments."""
    effect = call.op.get_attr("TCallEffectKind") if isinstance(call.op, ir.Op) else None
    return effect is not None and int(effect) <= tirx.CallEffectKind.Pure.value


def is_if_then_else(expr) -> bool:
    """Whether `expr` is a call to if_then_else (TVM 0.27 names the op `prim.if_then_else`)."""
    return isinstance(expr, ir.Call) and getattr(expr.op, "name", "") == "prim.if_then_else"

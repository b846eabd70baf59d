"""Pass `hoist_shared_reads`: a branch condition or loop bound that reads shared memory is computed
into a binding just before its statement, where TVM's barrier insertion can see the read.

TVM's barrier insertion (`ThreadSync`) records the shared-memory reads of stores, calls and bindings
and orders them with barriers; a read in an `if` condition or a `for` bound is one it does not
expect, and it stops with "Check failed: (allow_append_) is false". Kernels read shared memory
there freely: a top-k kernel's `if s_histogram[tx] >= k and s_histogram[tx + 1] < k:`, a loop
over `s_count[0]` items. The condition (each bound) is evaluated once, where the statement starts,
so binding it just before is the same program; the barrier insertion then orders the read after
the writes it depends on like any other read.

Before:  if S[tx] >= k and S[tx + 1] < k: ...
After:   cond = S[tx] >= k and S[tx + 1] < k
         if cond: ...

A `while` condition is read again each iteration and stays where it is.

Requires: shared memory merged (it runs right before the barrier passes). Guarantees: no `if`
condition or `for` bound reads shared memory.
"""

from __future__ import annotations

import tvm_ffi
from tvm import ir, tirx

from tilelang.transform.common import collect
from tilelang.utils.ir import seq

_SHARED = ("shared", "shared.dyn")


def _reads_shared(expr) -> bool:
    return any(ld.source.scope() in _SHARED for ld in collect(expr, ir.TensorLoad))


def hoist_shared_reads(func: tirx.PrimFunc) -> tirx.PrimFunc:
    def bind(name, value):
        var = tirx.Var(name, value.ty.dtype)
        return var, tirx.Bind(var, value)

    def on_if(node):
        if not _reads_shared(node.condition):
            return node
        cond, binding = bind("cond", node.condition)
        return seq([binding, tirx.IfThenElse(cond, node.then_case, node.else_case, span=node.span)])

    def on_for(node):
        bindings, bounds = [], []
        for name, value in (("start", node.min), ("extent", node.extent)):
            if _reads_shared(value):
                var, binding = bind(f"{node.loop_var.name}_{name}", value)
                bindings.append(binding)
                value = var
            bounds.append(value)
        if not bindings:
            return node
        loop = tirx.For(
            node.loop_var,
            bounds[0],
            bounds[1],
            node.kind,
            node.body,
            node.thread_binding,
            node.annotations,
            step=node.step,
            span=node.span,
        )
        return seq([*bindings, loop])

    body = tvm_ffi.structural_map(func.body, [(tirx.IfThenElse, on_if), (tirx.For, on_for)], order="post")
    return func if body.same_as(func.body) else func.with_body(body)

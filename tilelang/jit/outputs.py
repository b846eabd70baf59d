"""The check of `out_idx` against what a kernel does with each output: an output is allocated
uninitialized per call, so a parameter listed there that the kernel reads but never writes is an
input the user listed by mistake (its values would be whatever the allocator left there).

What counts as a write: a store to the tensor, a tile op whose `writes()` names it, and any call
whose arguments reach it without saying what it does (an atomic, an extern call, a tile op that
does not declare its writes): those may write, so the check stays silent for them.
"""

from __future__ import annotations

import tvm_ffi
from tvm import ir, tirx

from tilelang.errors import UserError, describe_span
from tilelang.op import base


def _buffers_in(node) -> list:
    found = []
    tvm_ffi.structural_walk(node, [(ir.Var, lambda v: found.append(v) if tirx.is_buffer_var(v) else None)])
    return found


def check_outputs(func: tirx.PrimFunc, out_idx: list, kernel_name: str) -> None:
    """Raise a UserError if a parameter in `out_idx` is read by the kernel and never written."""
    outputs = [func.params[k] for k in out_idx if tirx.is_buffer_var(func.params[k])]
    if not outputs:
        return
    read, written = [], []

    def on_store(node):
        written.append(node.buffer)

    def on_load(node):
        read.append((node.source, getattr(node, "span", None)))

    def on_eval(node):
        value = node.value
        if not isinstance(value, ir.Call):
            return
        op = base.parse(value) if base.is_tile_op(value) else None
        touched = _buffers_in(value)
        declared = op.writes() if op is not None else None
        written.extend(touched if declared is None else declared)
        read.extend((b, node.span) for b in touched)

    tvm_ffi.structural_walk(
        func.body, [(tirx.BufferStore, on_store), (ir.TensorLoad, on_load), (tirx.Evaluate, on_eval)]
    )
    for out in outputs:
        if any(w.same_as(out) for w in written):
            continue
        spans = [s for b, s in read if b.same_as(out)]
        if spans:
            where = next((d for d in (describe_span(s) for s in spans) if d), "")
            raise UserError(
                f"{kernel_name}: out_idx lists parameter '{out.name}', which the kernel reads but never writes: "
                f"outputs are allocated fresh (uninitialized) for each call, so '{out.name}' must be an input; "
                f"remove it from out_idx" + (f"\n{where}" if where else "")
            )

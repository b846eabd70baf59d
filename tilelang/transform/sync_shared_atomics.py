"""Passes `expose_shared_atomics` and `restore_shared_atomics`: barrier insertion sees an atomic on
shared memory (T.atomic_add / max / min / or / load / store / addx2 / addx4 on a shared element) as
what it is, a read and a write of that memory.

TVM's barrier insertion does not look inside `address_of`, the pointer an atomic takes: an atomic
was invisible to it, so nothing ordered it after other threads' plain stores or before their plain
loads. A split-K GEMV (one thread zeroes `acc[tn]`, every thread adds its partial sum with
`T.atomic_add(acc[tn], s)`, then `C[...] = acc[tn]`) added into shared memory another thread had
not zeroed yet (wrong in 73% of the elements on the H200).

So, around TVM's barrier insertion (`thread_sync` in sync_thread_branches.py):

1. `expose_shared_atomics` gives each such pointer argument a twin TVM reads:
   `address_of(S[i])` becomes `tl.exposed_atomic(tvm_access_ptr(S, <atomic index>, 1, rw), address_of(S[i]))`
   (rw: read and write; an atomic load reads, an atomic store writes). A plain load or store of S
   by other threads then conflicts with it, and a barrier goes between them.
2. `restore_shared_atomics` puts the pointer back.

Atomics among themselves need no barrier (the hardware orders them; one between them would
serialize them for nothing, and an atomic in a loop or a branch would get barriers inside it), as
in the public TileLang. TVM takes two accesses at one index that depends on the thread index as the
same thread's and orders none of them, so every atomic is shown at one such index, `<atomic
index>` (each thread variable times zero): whatever elements two atomics touch, TVM sees no
conflict between them, while a plain access (at its own index) conflicts with every atomic.

Requires: shared memory merged, all accesses explicit (after `flatten_buffer`). Guarantees: the IR
after `restore_shared_atomics` is the IR before `expose_shared_atomics`, with TVM's barriers.
"""

from __future__ import annotations

import tvm_ffi
from tvm import ir, tirx

from tilelang import intrinsics

EXPOSED = "tl.exposed_atomic"  # call_extern name of the twin: (tvm_access_ptr, original pointer)
_SHARED = ("shared", "shared.dyn")
_READS = ("atomic_load",)  # the atomics that only read; "atomic_store" only writes
_WRITES = ("atomic_store",)


def _atomic_name(call) -> str | None:
    """'atomic_add', 'atomic_max_ret', ... for a call to an element atomic, else None."""
    if not isinstance(call.op, ir.Op):
        return None
    if call.op.name == "tirx.call_extern":
        name = str(call.args[0].value)
        name = name.removeprefix("tl::").partition("<")[0]
    else:
        found = intrinsics.lookup(call)
        name = found.name if found is not None else ""
    return name if name.startswith("atomic_") and not name.startswith("atomic_bulk") else None


def _shared_element(arg):
    """The shared-memory element `arg` points at (`address_of(S[i])`), or None."""
    if isinstance(arg, ir.Call) and isinstance(arg.op, ir.Op) and arg.op.name == "tirx.address_of":
        load = arg.args[0]
        if isinstance(load, ir.TensorLoad) and str(load.source.scope()) in _SHARED:
            return load
    return None


def _index(func) -> tirx.PrimExpr:
    """The one index every atomic is shown at: each thread variable of the kernel times zero."""
    found = []

    def on_attr(attr):
        if attr.attr_key == "thread_extent" and not any(attr.node.var.same_as(v) for v in found):
            found.append(attr.node.var)

    tvm_ffi.structural_walk(func.body, [(tirx.AttrStmt, on_attr)])
    # Built as nodes: the operators would fold `tx * 0` to 0, which depends on no thread.
    terms = [tirx.Mul(var, tirx.const(0, var.ty.dtype)) for var in found]
    index = terms[0] if terms else tirx.const(0, "int32")
    for term in terms[1:]:
        index = tirx.Add(index, term)
    return index


def expose_shared_atomics(func: tirx.PrimFunc) -> tirx.PrimFunc:
    index = None

    def on_call(call):
        nonlocal index
        name = _atomic_name(call)
        if name is None:
            return call
        args, changed = list(call.args), False
        for k, arg in enumerate(args):
            load = _shared_element(arg)
            if load is None:
                continue
            if index is None:
                index = _index(func)
            rw = 1 if name in _READS else 2 if name in _WRITES else 3
            dtype = str(load.source.dtype)
            seen = tirx.tvm_access_ptr(tirx.type_annotation(dtype), load.source.data, index, 1, rw)
            args[k] = tirx.call_extern("handle", EXPOSED, seen, arg)
            changed = True
        return ir.Call(call.op, args, ret_ty=call.ty, span=call.span) if changed else call

    body = tvm_ffi.structural_map(func.body, [(ir.Call, on_call)], order="post")
    return func if body.same_as(func.body) else func.with_body(body)


def restore_shared_atomics(func: tirx.PrimFunc) -> tirx.PrimFunc:
    def on_call(call):
        if isinstance(call.op, ir.Op) and call.op.name == "tirx.call_extern" and str(call.args[0].value) == EXPOSED:
            return call.args[2]
        return call

    body = tvm_ffi.structural_map(func.body, [(ir.Call, on_call)], order="post")
    return func if body.same_as(func.body) else func.with_body(body)

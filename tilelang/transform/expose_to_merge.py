"""Passes `expose_to_merge` and `restore_after_merge`: around TVM's shared-memory merge
(`MergeSharedMemoryAllocations`), the shapes its liveness walk misreads are made plain to it, then
put back.

The merge finds when each tile is live by walking the kernel: a tile is born at the statement of
its allocation's level that first touches it and dies at the one that last does, and a tile born
where another dies may take its bytes. Stores, calls, loops and branches are such statements; two
shapes are misread:

1. A binding (`Bind`, the flat let) that reads memory at the level of the allocation it reads
   (`off = n[0] * 2` at the kernel's top, n a T.alloc_var: a grouped gemm finding its group) stops
   the walk with "Load memory in places other than store". It becomes the statement
   `tl.binding(var, value)`, whose read the walk counts where it is.
2. One statement that touches two tiles (`R[tx] = S[127 - tx]`) is both where S dies and where R is
   born, so R may be given S's bytes: every thread then writes what another has yet to read, with
   no place for a barrier between. It becomes a scope of its own (an `extern_scope` attribute), in
   which the walk births R at its start and frees S at its end: they never share bytes.

3. A tile of 32 bits or fewer (a one-element int32 count) gets no offset in the merged block (the
   merge leaves such tiles out of its free lists, from which it computes the offsets) and stops it
   with "Check failed: (it != scope.buffer_byte_offsets.end())". When a kernel has other tiles to
   merge with it, it is allocated 64 bits: its accesses stay in its first elements.
4. A pointer into a tile, `address_of(S[i])`, is no use of S to the walk (it looks at the index
   only), yet it is how a TMA load names its destination, and how mbarriers, ldmatrix and shared
   atomics reach their tile. A tile written by TMA before a loop and read after it seemed born at
   that read, after the loop, and was given the bytes of a workspace used inside it (the NaN of the
   public DeepSeek-V4 sparse attention: its sink tile overwritten by reduce_max's workspace). Each
   such pointer becomes `tl.exposed_address(address_of(S[i]), S)`, whose plain S the walk counts
   where the pointer is; so does a use of a pointer variable bound to one (`p = address_of(S[0])`).
   (`tvm_access_ptr(S, ...)`, through which gemm descriptors and cp.async take their tiles, names S
   plainly and already counted.)

Before:  off = n[0] * 2                   After: T.evaluate(tl_binding(off, n[0] * 2))
         R[tx] = S[127 - tx]                     with T.attr("tl.merge_scope", "extern_scope", 0):
                                                     R[tx] = S[127 - tx]
         tma_load(map, bar, address_of(S[0]))    tma_load(map, bar, tl_exposed_address(address_of(S[0]), S))

`restore_after_merge` turns (1), (2) and (4) back, with the accesses as the merge rewrote them. A binding deeper
than what it reads was already fine and its reads count at the same place after (1); statements
touching one tile are left alone, and (3) changes only kernels the merge stopped on: kernels with
none of the shapes get the same offsets.

Requires: buffers flattened (the merge runs on flat IR). Guarantees: after `restore_after_merge`
no mark remains and the statements are where they were.
"""

from __future__ import annotations

import tvm
import tvm_ffi
from tvm import ir, tirx

from tilelang.layout.fragment import substitute
from tilelang.transform.common import collect, kernels
from tilelang.utils.ir import const_int

_BINDING = "tl.binding"
_EXPOSED = "tl.exposed_address"  # (pointer, tile, ...): the pointer, and the tiles it points into
_SCOPE = "tl.merge_scope"  # the node of the extern_scope attribute around a statement touching two tiles
_SHARED = ("shared", "shared.dyn")


def _op(name: str):
    """The marker op `name`, registered once (opaque: no pass moves or drops it)."""
    if not hasattr(_op, name):
        tvm.ir.register_op_attr(name, "TCallEffectKind", tirx.CallEffectKind.Opaque.value)
        tvm.ir.register_op_attr(name, "TScriptPrinterName", name.replace(".", "_"))
        setattr(_op, name, ir.Op.get(name))
    return getattr(_op, name)


def _is_call(expr, name: str) -> bool:
    return isinstance(expr, ir.Call) and isinstance(expr.op, ir.Op) and expr.op.name == name


def _is_binding(stmt) -> bool:
    return isinstance(stmt, tirx.Evaluate) and _is_call(stmt.value, _BINDING)


def _is_scope(stmt) -> bool:
    return (
        isinstance(stmt, tirx.AttrStmt)
        and stmt.attr_key == "extern_scope"
        and isinstance(stmt.node, str)
        and str(stmt.node) == _SCOPE
    )


def expose_to_merge(func: tirx.PrimFunc) -> tirx.PrimFunc:
    func = _pad_small_tiles(func)
    tiles = {st.buffer for st in collect(func.body, tirx.AllocBuffer) if st.buffer.scope() in _SHARED}
    func = _expose_addresses(func, tiles)

    def touched(stmt) -> set:
        found = {v for v in collect(stmt, ir.Var) if tirx.is_buffer_var(v) and v in tiles}
        return found | ({stmt.buffer} & tiles if isinstance(stmt, tirx.BufferStore) else set())

    def own_scope(stmt):
        if len(touched(stmt)) < 2:
            return stmt
        return tirx.AttrStmt(tvm.runtime.convert(_SCOPE), "extern_scope", 0, stmt, span=stmt.span)

    def on_bind(stmt):
        # A tile named in a binding at its allocation's level (a pointer into it, after (4)) stops
        # the walk as a read does: a statement too.
        if not collect(stmt.value, ir.TensorLoad) and not touched(tirx.Evaluate(stmt.value)):
            return stmt
        return own_scope(tirx.Evaluate(ir.Call(_op(_BINDING), [stmt.var, stmt.value], ret_ty="void"), span=stmt.span))

    body = tvm_ffi.structural_map(
        func.body, [(tirx.Bind, on_bind), (tirx.BufferStore, own_scope), (tirx.Evaluate, own_scope)], order="post"
    )
    return func if body.same_as(func.body) else func.with_body(body)


def _expose_addresses(func, tiles):
    """(4): each pointer into a tile names the tile plainly beside it; so does each use of a pointer
    variable bound to such a pointer."""
    # A tile declared again over the same bytes (T.decl_buffer(data=S.data)) stands for S.
    owner = {b: b for b in tiles}
    for decl in collect(func.body, tirx.DeclBuffer):
        if _is_call(decl.data, "tirx.buffer_data") and decl.data.args[0] in owner:
            owner[decl.buffer] = owner[decl.data.args[0]]
    bound = {}  # pointer variable -> the tiles its value points into

    def pointed(expr) -> list:
        found = []
        for call in collect(expr, ir.Call):
            if _is_call(call, _EXPOSED):
                found += [t for t in call.args[1:] if not any(t.same_as(f) for f in found)]
        return found

    def expose(ptr, named):
        return ir.Call(_op(_EXPOSED), [ptr, *named], ret_ty=ptr.ty) if named else ptr

    def on_call(call):
        if _is_call(call, "tirx.address_of") and isinstance(call.args[0], ir.TensorLoad):
            return expose(call, [owner[call.args[0].source]] if call.args[0].source in owner else [])
        if _is_call(call, _EXPOSED):
            return call
        args = [expose(a, bound[a]) if isinstance(a, ir.Var) and a in bound else a for a in call.args]
        changed = any(not a.same_as(b) for a, b in zip(args, call.args))
        return ir.Call(call.op, args, ret_ty=call.ty, span=call.span) if changed else call

    def on_bind(stmt):
        if isinstance(stmt.var.ty, ir.PointerType) and pointed(stmt.value):
            bound[stmt.var] = pointed(stmt.value)
        return stmt

    # Post-order: a (flat) binding is mapped, its pointer recorded, before the statements after it.
    body = tvm_ffi.structural_map(func.body, [(tirx.Bind, on_bind), (ir.Call, on_call)], order="post")
    return func if body.same_as(func.body) else func.with_body(body)


def _pad_small_tiles(func):
    """(3): tiles of 32 bits or fewer allocated 64 bits, in kernels with other tiles of their scope."""
    swap = {}
    for kernel in kernels(func.body):
        allocs = [st.buffer for st in collect(kernel, tirx.AllocBuffer) if st.buffer.scope() in _SHARED]
        for b in allocs:
            bits = tvm.DataType(str(b.dtype)).bits * tvm.DataType(str(b.dtype)).lanes
            size = const_int(b.shape[0]) if len(b.shape) == 1 else None
            others = [o for o in allocs if o.scope() == b.scope() and not o.same_as(b)]
            if size is not None and size * bits <= 32 and others:
                swap[b] = tirx.decl_buffer((64 // bits,), str(b.dtype), b.name, scope=b.scope())
    return func.with_body(substitute(func.body, swap)) if swap else func


def restore_after_merge(func: tirx.PrimFunc) -> tirx.PrimFunc:
    def on_eval(stmt):
        if not _is_binding(stmt):
            return stmt
        var, value = stmt.value.args
        return tirx.Bind(var, value, span=stmt.span)

    def on_attr(stmt):
        return stmt.body if _is_scope(stmt) else stmt

    def on_call(call):
        return call.args[0] if _is_call(call, _EXPOSED) else call

    body = tvm_ffi.structural_map(
        func.body, [(tirx.Evaluate, on_eval), (tirx.AttrStmt, on_attr), (ir.Call, on_call)], order="post"
    )
    return func if body.same_as(func.body) else func.with_body(body)

"""Passes `expose_to_merge` and `restore_after_merge`: around TVM's shared-memory merge
(`MergeSharedMemoryAllocations`), the two statement shapes its liveness walk misreads are made
plain to it, then put back.

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

Before:  off = n[0] * 2                   After: T.evaluate(tl_binding(off, n[0] * 2))
         R[tx] = S[127 - tx]                     with T.attr("tl.merge_scope", "extern_scope", 0):
                                                     R[tx] = S[127 - tx]

`restore_after_merge` turns (1) and (2) back, with the accesses as the merge rewrote them. A binding deeper
than what it reads was already fine and its reads count at the same place after (1); statements
touching one tile are left alone, and (3) changes only kernels the merge stopped on: kernels with
none of the shapes get the same offsets.

Requires: buffers flattened (the merge runs on flat IR). Guarantees: after `restore_after_merge`
neither mark remains and the statements are where they were.
"""

from __future__ import annotations

import tvm
import tvm_ffi
from tvm import ir, tirx

from tilelang.layout.fragment import substitute
from tilelang.transform.common import collect
from tilelang.utils.ir import const_int

_BINDING = "tl.binding"
_SCOPE = "tl.merge_scope"  # the node of the extern_scope attribute around a statement touching two tiles
_SHARED = ("shared", "shared.dyn")


def _binding_op():
    if not hasattr(_binding_op, "cached"):
        tvm.ir.register_op_attr(_BINDING, "TCallEffectKind", tirx.CallEffectKind.Opaque.value)
        tvm.ir.register_op_attr(_BINDING, "TScriptPrinterName", "tl_binding")
        _binding_op.cached = ir.Op.get(_BINDING)
    return _binding_op.cached


def _is_binding(stmt) -> bool:
    call = stmt.value if isinstance(stmt, tirx.Evaluate) else None
    return isinstance(call, ir.Call) and isinstance(call.op, ir.Op) and call.op.name == _BINDING


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

    def touched(stmt) -> set:
        found = {v for v in collect(stmt, ir.Var) if tirx.is_buffer_var(v) and v in tiles}
        return found | ({stmt.buffer} & tiles if isinstance(stmt, tirx.BufferStore) else set())

    def own_scope(stmt):
        if len(touched(stmt)) < 2:
            return stmt
        return tirx.AttrStmt(tvm.runtime.convert(_SCOPE), "extern_scope", 0, stmt, span=stmt.span)

    def on_bind(stmt):
        if not collect(stmt.value, ir.TensorLoad):
            return stmt
        return own_scope(tirx.Evaluate(ir.Call(_binding_op(), [stmt.var, stmt.value], ret_ty="void"), span=stmt.span))

    body = tvm_ffi.structural_map(
        func.body, [(tirx.Bind, on_bind), (tirx.BufferStore, own_scope), (tirx.Evaluate, own_scope)], order="post"
    )
    return func if body.same_as(func.body) else func.with_body(body)


def _pad_small_tiles(func):
    """(3): tiles of 32 bits or fewer allocated 64 bits, in kernels with other tiles of their scope."""
    swap = {}
    for kernel in _kernels(func.body):
        allocs = [st.buffer for st in collect(kernel, tirx.AllocBuffer) if st.buffer.scope() in _SHARED]
        for b in allocs:
            bits = tvm.DataType(str(b.dtype)).bits * tvm.DataType(str(b.dtype)).lanes
            size = const_int(b.shape[0]) if len(b.shape) == 1 else None
            others = [o for o in allocs if o.scope() == b.scope() and not o.same_as(b)]
            if size is not None and size * bits <= 32 and others:
                swap[b] = tirx.decl_buffer((64 // bits,), str(b.dtype), b.name, scope=b.scope())
    return func.with_body(substitute(func.body, swap)) if swap else func


def _kernels(body) -> list:
    """The outermost thread-extent statements: the kernels, as TVM's merge takes them one by one."""
    found = []

    def on_attr(node):
        if node.attr_key == "thread_extent":
            found.append(node)
            return tvm_ffi.WalkResult.SKIP
        return None

    tvm_ffi.structural_walk(body, [(tirx.AttrStmt, on_attr)], order="pre")
    return found


def restore_after_merge(func: tirx.PrimFunc) -> tirx.PrimFunc:
    def on_eval(stmt):
        if not _is_binding(stmt):
            return stmt
        var, value = stmt.value.args
        return tirx.Bind(var, value, span=stmt.span)

    def on_attr(stmt):
        return stmt.body if _is_scope(stmt) else stmt

    body = tvm_ffi.structural_map(func.body, [(tirx.Evaluate, on_eval), (tirx.AttrStmt, on_attr)], order="post")
    return func if body.same_as(func.body) else func.with_body(body)

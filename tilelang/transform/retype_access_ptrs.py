"""Pass `retype_access_ptrs`: a `tvm_access_ptr` whose element type differs from the tile it points
into gets a view of the tile in its own element type, right after the tile's allocation.

TVM's `StorageRewrite` lets tiles of different element types share one allocation when their
lifetimes do not overlap (a float32 reduction workspace, later a bfloat16 gemm operand). Loads and
stores of the later tile go through a view it declares in the tile's type, but a pointer to it,
`tvm_access_ptr(bfloat16, tile, offset, extent, rw)` (how a gemm, ldmatrix or cp.async takes its
tile), is only re-pointed at the shared allocation, of the other type; TVM's `LowerIntrin` then
stops with "tvm_access_ptr element type must match the source buffer". The offset is already in
units of the pointer's type (StorageRewrite scales it so), so pointing it at a view of that type over
the same bytes is the same address.

Before:  W = T.alloc_buffer((2048,), "float32", scope="shared.dyn")
         ...
         gemm(T.tvm_access_ptr(T.type_annotation("bfloat16"), W, 0, 4096, 1), ...)
After:   W = T.alloc_buffer((2048,), "float32", scope="shared.dyn")
         W_1 = T.decl_buffer((4096,), "bfloat16", data=W.data, scope="shared.dyn")
         ...
         gemm(T.tvm_access_ptr(T.type_annotation("bfloat16"), W_1, 0, 4096, 1), ...)

Requires: flat (1-d) tiles, right after `StorageRewrite`. Guarantees: every `tvm_access_ptr` names a
tile of its own element type.
"""

from __future__ import annotations

import tvm_ffi
from tvm import ir, tirx

from tilelang.dtypes import bits as dtype_bits
from tilelang.errors import CompilerError
from tilelang.utils.ir import seq

_ACCESS_PTR = "tirx.tvm_access_ptr"


def _is_access_ptr(expr) -> bool:
    return isinstance(expr, ir.Call) and isinstance(expr.op, ir.Op) and expr.op.name == _ACCESS_PTR


def retype_access_ptrs(func: tirx.PrimFunc) -> tirx.PrimFunc:
    views = {}  # tile -> {element type: its view}

    def view(tile, dtype: str):
        by_type = views.setdefault(tile, {})
        if dtype not in by_type:
            (n,) = (int(x) for x in tile.shape)  # flat after FlattenBuffer
            count = n * dtype_bits(str(tile.dtype)) // dtype_bits(dtype)
            by_type[dtype] = tirx.decl_buffer((count,), dtype, tile.name, scope=tile.scope())
        return by_type[dtype]

    def on_call(call):
        if not _is_access_ptr(call):
            return call
        tile, dtype = call.args[1], str(call.args[0].ty.dtype.with_lanes(1))
        if not (isinstance(tile, ir.Var) and tirx.is_buffer_var(tile)) or str(tile.dtype) == dtype:
            return call
        args = [call.args[0], view(tile, dtype), *call.args[2:]]
        return ir.Call(call.op, args, ret_ty=call.ty, span=call.span)

    body = tvm_ffi.structural_map(func.body, [(ir.Call, on_call)], order="post")
    if not views:
        return func
    declared = set()

    def on_alloc(stmt):
        if stmt.buffer not in views:
            return stmt
        declared.add(stmt.buffer)
        decls = [tirx.DeclBuffer(v, data=stmt.buffer.data) for v in views[stmt.buffer].values()]
        return seq([stmt, *decls])

    body = tvm_ffi.structural_map(body, [(tirx.AllocBuffer, on_alloc), (tirx.DeclBuffer, on_alloc)], order="post")
    missing = [t.name for t in views if t not in declared]
    if missing:
        raise CompilerError(f"retype_access_ptrs: no allocation found for tiles {missing} that pointers re-type")
    return func.with_body(body)

"""Pass `lower_blocks_for_cpu`: a kernel's blocks become one parallel loop over the CPU's cores.

Before:  bx = T.launch_thread("blockIdx.x", 8); by = T.launch_thread("blockIdx.y", 4)
         tx = T.launch_thread("threadIdx.x", 128)
         S = T.alloc_buffer((32, 128), "float16", scope="shared.dyn")
         for i, j in T.Parallel(32, 128): ...
After:   for block in T.parallel(32):       # TVM's thread pool, one block per iteration
             bx = block % 8
             by = block // 8
             S = T.alloc_local((32, 128), "float16")
             for i, j in T.grid(32, 128): ...

On the CPU a block runs on one core and its tile ops as loops over the whole tile, so the block's
threads disappear: a branch over whole warps (`if tx < 128:`) runs its then part and then its else
part, and block barriers (`T.sync_threads()`) go, program order ordering the steps they separated
(`check_cpu_constructs` rejected what this would change). Tiles of every on-chip scope (shared,
fragment, local) become arrays of the block's own (`local`: on the stack when small, in the
runtime's per-thread workspace otherwise).
`T.Parallel` loops run in order (LLVM vectorizes the innermost), `T.Pipelined` loops as plain
loops: one block has nothing to overlap.

Requires: `check_cpu_constructs` passed (the thread index is read only by whole-warp branches) and tile ops already
lowered (`lower_tile_ops_for_cpu`). Guarantees: no thread extent, no parallel loop but one per kernel
(the blocks'), no buffer in an on-chip scope.
"""

from __future__ import annotations

import tvm_ffi
from tvm import ir, tirx

from tilelang.layout.fragment import substitute
from tilelang.transform.check_cpu_constructs import BLOCK_BARRIER, is_thread_branch
from tilelang.transform.common import Scope, is_thread_extent, mutate_with_scope
from tilelang.utils.ir import collect, seq

_BLOCK_TAGS = ("blockIdx.x", "blockIdx.y", "blockIdx.z")


def _local_buffers(body) -> dict:
    """{buffer: its copy in scope `local`} for the on-chip allocations, and the same for their data
    pointers, so views declared over a tile's data (T.reshape, T.view) follow it."""
    mapping = {}
    for st in collect(body, tirx.AllocBuffer):
        b = st.buffer
        if b.scope() == "global":
            continue
        new = tirx.decl_buffer(b.shape, str(b.dtype), b.name, scope="local", strides=list(b.strides) or None)
        mapping[b], mapping[b.data] = new, new.data
    return mapping


def _in_program_order(body):
    """Thread branches as their then part followed by their else part; block barriers dropped."""
    scope = Scope()

    def on_if(stmt, recurse):
        if not is_thread_branch(scope, stmt):
            return recurse(stmt)
        stmt = recurse(stmt)
        return seq([stmt.then_case] + ([stmt.else_case] if stmt.else_case is not None else []))

    def on_eval(stmt, recurse):
        value = stmt.value
        if isinstance(value, ir.Call) and getattr(value.op, "name", "") == BLOCK_BARRIER:
            return tirx.Evaluate(0)
        return stmt

    return mutate_with_scope(body, scope, {tirx.IfThenElse: on_if, tirx.Evaluate: on_eval})


def _serial_loops(body):
    """Every parallel loop (T.Parallel) serial, every loop's annotations (T.Pipelined's stages) dropped."""

    def on_for(loop):
        if loop.kind != tirx.ForKind.PARALLEL and not loop.annotations:
            return loop
        kind = tirx.ForKind.SERIAL if loop.kind == tirx.ForKind.PARALLEL else loop.kind
        return tirx.For(loop.loop_var, loop.min, loop.extent, kind, loop.body, span=loop.span)

    return tvm_ffi.structural_map(body, [(tirx.For, on_for)], order="post")


def _kernel_as_loop(attr) -> tirx.Stmt:
    """One `T.Kernel` (its chain of thread extents) as a parallel loop over its blocks."""
    blocks, node = {}, attr
    while is_thread_extent(node):
        if node.node.thread_tag in _BLOCK_TAGS:
            blocks[node.node.thread_tag] = (node.node.var, node.value)
        node = node.body
    body = node
    dims = [blocks[t] for t in _BLOCK_TAGS if t in blocks]
    if not dims:
        return body
    if len(dims) == 1:
        var, extent = dims[0]
        return tirx.For(var, tirx.const(0, var.ty.dtype), extent, tirx.ForKind.PARALLEL, body, span=attr.span)
    block = tirx.Var("block", "int32")
    binds, stride = [], None
    for k, (var, extent) in enumerate(dims):  # blockIdx.x fastest, as blocks are numbered on a GPU
        index = block if stride is None else tirx.floordiv(block, stride)
        if k + 1 < len(dims):
            index = tirx.floormod(index, extent)
        binds.append(tirx.Bind(var, index))
        stride = extent if stride is None else stride * extent
    return tirx.For(block, tirx.const(0, "int32"), stride, tirx.ForKind.PARALLEL, seq([*binds, body]), span=attr.span)


def lower_blocks_for_cpu(func: tirx.PrimFunc) -> tirx.PrimFunc:
    body = _serial_loops(_in_program_order(func.body))
    mapping = _local_buffers(body)
    if mapping:
        body = substitute(body, mapping)

    def on_attr(node):  # pre-order: the first thread extent met is a kernel's outermost
        return _kernel_as_loop(node) if is_thread_extent(node) else node

    return func.with_body(tvm_ffi.structural_map(body, [(tirx.AttrStmt, on_attr)], order="pre"))

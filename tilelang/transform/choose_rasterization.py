"""Pass `choose_rasterization`: a GEMM-shaped kernel the user gave no `T.use_swizzle` gets one, so its
blocks launch in panels that share input tiles in L2 (`rasterize_blocks` then remaps the indices).

Blocks launch in the order of their linear id: along a grid row first. In a GEMM each grid row
reuses one row tile of A but walks all of B; taking blocks in panels of 8 grid rows, column by column,
keeps a few row tiles and a few column tiles hot at a time (measured on the H200, a plain 3-stage
GEMM: 0.94x cuBLAS in launch order, 1.02x in panels of 8). The choice is logged at INFO.

A kernel is GEMM-shaped when a loop holds a `T.gemm` and copies from global memory of which one
moves along blockIdx.x but not blockIdx.y and another along blockIdx.y but not blockIdx.x (A's row
tiles and B's column tiles). Other kernels keep launch order: an attention kernel's blocks of one
head already run together, a grid-wide barrier or a spin loop (`while`) may count on the order, and
a grid sized at run time (dynamic M) would compute the remap's divisions by the grid in every index.

Before:  with T.Kernel(gx, gy) as (bx, by): ...            After:  ...; T.use_swizzle(8); ...
A `T.use_swizzle` of the user's (also `enable=False`, which keeps launch order) is left as it is.

Requires: tile ops as parsed (copies and gemms are still T.copy / T.gemm). Guarantees: IR unchanged
but for one `tl.use_swizzle` call at the top of each kernel it chose.
"""

from __future__ import annotations

import logging

from tvm import ir, tirx

from tilelang.op import base
from tilelang.transform.common import is_innermost_thread_extent, is_thread_extent, kernels, replace_attrs
from tilelang.transform.pipelining.checks import load_of
from tilelang.transform.pipelining.wgmma_waits import mma_of
from tilelang.transform.rasterize_blocks import NAME
from tilelang.utils.ir import collect, const_int, extern_name

logger = logging.getLogger("tilelang")
PANEL = 8  # grid rows per panel: the best of 4/8/16 for the GEMMs of benchmark/matmul on the H200


def _moves_along(load, var) -> bool:
    """Whether the copy's source tile starts at an index that uses `var`."""
    return any(v.same_as(var) for start in load.src.starts for v in collect(start, ir.Var))


def _gemm_shaped(kernel, bx, by) -> bool:
    for loop in collect(kernel, tirx.For):
        stmts = collect(loop.body, tirx.Evaluate)
        if not any(mma_of(s) is not None for s in stmts):
            continue
        loads = [load_of(s) for s in stmts if load_of(s) is not None]
        along_x = any(_moves_along(ld, bx) and not _moves_along(ld, by) for ld in loads)
        along_y = any(_moves_along(ld, by) and not _moves_along(ld, bx) for ld in loads)
        if along_x and along_y:
            return True
    return False


def _order_matters(kernel) -> bool:
    """A spin loop or a grid-wide barrier: blocks may wait for blocks launched before them."""
    grid_barrier = any(extern_name(s) == "tl::sync_grid" for s in collect(kernel, tirx.Evaluate))
    return bool(collect(kernel, tirx.While)) or grid_barrier


def choose_rasterization(func: tirx.PrimFunc) -> tirx.PrimFunc:
    swap = {}
    for kernel in kernels(func.body):
        blocks, extents, node = {}, {}, kernel
        while is_thread_extent(node):
            blocks[node.node.thread_tag] = node.node.var
            extents[node.node.thread_tag] = const_int(node.value)
            if is_innermost_thread_extent(node):
                break
            node = node.body
        bx, by = blocks.get("blockIdx.x"), blocks.get("blockIdx.y")
        if bx is None or by is None or not is_innermost_thread_extent(node):
            continue
        if extents["blockIdx.x"] is None or extents["blockIdx.y"] is None:
            continue  # a grid sized at run time: the remap's divisions would run in every index
        if any(base.is_tile_op(c, NAME) for c in collect(kernel, ir.Call)):
            continue  # the user's own choice
        if _order_matters(kernel) or not _gemm_shaped(kernel, bx, by):
            continue
        logger.info(
            "%s: blocks launched in panels of %d grid rows (L2 reuse of A's and B's tiles); "
            "T.use_swizzle(panel_size=...) chooses, T.use_swizzle(0, enable=False) keeps launch order",
            func.attrs["global_symbol"] if func.attrs and "global_symbol" in func.attrs else "kernel",
            PANEL,
        )
        call = tirx.Evaluate(base.make_call(NAME, [tirx.const(PANEL, "int32"), tirx.const(0, "int32")]))
        body = tirx.SeqStmt([call, node.body])
        swap[node] = tirx.AttrStmt(node.node, node.attr_key, node.value, body, span=node.span)
    return replace_attrs(func, swap)

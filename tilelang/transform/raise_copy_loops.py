"""Pass `raise_copy_loops`: a `T.Parallel` loop in a `T.Pipelined` body that only copies a global tile
into a shared tile becomes the `T.copy` it is, so the pipeline planner issues it ahead (cp.async or
TMA) as it does a `T.copy` the user wrote. Public TileLang kernels written at the expert level (a GEMM
with `tilelang.intrinsics` MMA emitters) load their tiles this way; left as loops, the loads ran in
program order with nothing overlapping them.

Before:  for ko in T.Pipelined(K // 32, num_stages=2):
             for i, k in T.Parallel(128, 32):
                 A_s[i, k] = A[by * 128 + i, ko * 32 + k]
After:   for ko in T.Pipelined(K // 32, num_stages=2):
             T.copy(A[by * 128:by * 128 + 128, ko * 32:ko * 32 + 32], A_s[0:128, 0:32])

A loop qualifies when each loop of the nest is a plain `T.Parallel` from 0 (no layout of its own),
its one statement stores into a shared tile at exactly the loop variables, in order, and the value is
a load of the same dtype from a global tensor whose every index is a loop-invariant start, plus at
most one loop variable with coefficient 1, the variables in the same order (no transpose): the
same regions a `T.copy` names. Anything else is left alone.

Requires: tile ops as parsed, before the pipeline planner. Guarantees: only such loops changed.
"""

from __future__ import annotations

import tvm_ffi
from tvm import ir, sym, tirx

from tilelang.op import base
from tilelang.op.copy import NAME as COPY
from tilelang.op.loop_indices import uses
from tilelang.op.loops import split_parallel_nest
from tilelang.transform.pipelining.schedule import stages_of
from tilelang.utils.ir import is_zero, loop_with_body

_SHARED = ("shared", "shared.dyn")


def _source_region(load, loop_vars, extents, analyzer):
    """(starts, extents) of the global tile `load` reads across the loop nest, or None."""
    starts, sizes, order = [], [], []
    for index in load.indices:
        used = [k for k, v in enumerate(loop_vars) if uses(index, [v])]
        if not used:
            starts.append(index)
            sizes.append(tirx.const(1, "int32"))
            continue
        if len(used) > 1:
            return None
        k = used[0]
        start = analyzer.simplify(index - loop_vars[k])
        if uses(start, [loop_vars[k]]):
            return None  # a coefficient other than 1 (a strided read)
        starts.append(start)
        sizes.append(extents[k])
        order.append(k)
    return (starts, sizes) if order == list(range(len(loop_vars))) else None


def _as_copy(loop):
    """`loop` as a `tl.copy` call statement, or None when it is not a plain tile copy."""
    loop_vars, extents, body = split_parallel_nest(loop)
    node = loop
    for _ in loop_vars:  # every loop of the nest: from 0, without annotations (a loop layout)
        if not is_zero(node.min) or node.annotations:
            return None
        node = node.body
    if not isinstance(body, tirx.BufferStore) or not isinstance(body.value, ir.TensorLoad):
        return None
    dst, load = body.buffer, body.value
    if dst.scope() not in _SHARED or load.source.scope() != "global" or str(dst.dtype) != str(load.source.dtype):
        return None
    if len(body.indices) != len(loop_vars) or not all(i.same_as(v) for i, v in zip(body.indices, loop_vars)):
        return None
    analyzer = sym.Analyzer()
    region = _source_region(load, loop_vars, extents, analyzer)
    if region is None:
        return None
    src = base.Region(load.source, *region)
    dst_region = base.Region(dst, [tirx.const(0, "int32") for _ in loop_vars], list(extents))
    zero = tirx.const(0, "int32")
    call = base.make_call(COPY, [src.to_ir(), dst_region.to_ir(), zero, zero, zero])
    return tirx.Evaluate(call, span=loop.span)


def _raise_in(body):
    stmts = list(body.seq) if isinstance(body, tirx.SeqStmt) else [body]
    out = [(_as_copy(s) or s) if isinstance(s, tirx.For) and s.kind == tirx.ForKind.PARALLEL else s for s in stmts]
    if all(a.same_as(b) for a, b in zip(out, stmts)):
        return body
    return tirx.SeqStmt(out) if len(out) > 1 else out[0]


def raise_copy_loops(func: tirx.PrimFunc) -> tirx.PrimFunc:
    def on_for(loop):
        if stages_of(loop) < 1:  # not T.Pipelined, or num_stages=0 (no pipeline asked for)
            return loop
        body = _raise_in(loop.body)
        if body.same_as(loop.body):
            return loop
        return loop_with_body(loop, body)

    body = tvm_ffi.structural_map(func.body, [(tirx.For, on_for)], order="post")
    return func if body.same_as(func.body) else func.with_body(body)

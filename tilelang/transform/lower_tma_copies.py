"""Pass `lower_tma_copies`: on sm_90a, a `T.copy` from global to shared memory that runs once per
kernel (outside any loop or condition) becomes a TMA load waited for on its own mbarrier.

Before:  T.copy(Q[bz, bx * 128:bx * 128 + 128, by, :], Q_shared)
After:   (kernel top) Q_shared_bar = T.alloc_shared((1,), "uint64")   # one per copy ("tma_bars")
         if tx == 0: mbarrier_init(Q_shared_bar, 1); fence_barrier_init()
         __syncthreads()                   # the barrier is ready; earlier reads of Q_shared are done
         if tx == 0: tma_copy(Q[...], Q_shared, Q_shared_bar)
         mbarrier_wait(Q_shared_bar, 0)
Back-to-back copies (K then V) share the steps: every init, one __syncthreads, every load, then
the waits, so their loads are in flight together.

A tile the TMA unit wrote needs no proxy fence before a wgmma reads it (`inject_tma_pipelines` drops it
when every shared operand is such a tile). Copies inside loops are the pipeline's
(`plan_pipelines`) or stay element-wise; copies the TMA unit cannot do (`op/tma.py` says why) stay.

It names `T.copy` and the TMA copy (`op/tma.py`): turning the one into the other is its whole
purpose.

Requires: a target with TMA (`has_tma`: the pass list runs it only there); tile ops as parsed,
before `plan_pipelines` (which reads which tiles only TMA writes).
Guarantees: every rewritten copy is a `tl.tma_copy` issued by thread 0 with its barrier initialized.
"""

from __future__ import annotations

import tvm_ffi
from tvm import tirx

from tilelang.layout.fragment import substitute
from tilelang.op import base, tma
from tilelang.op import copy as copy_op
from tilelang.options import DEFAULT_OPTIONS, CompileOptions
from tilelang.transform.apply_global_layouts import laid_out_global
from tilelang.transform.common import Scope, allocate_at_kernel_top, is_innermost_thread_extent, mutate_with_scope
from tilelang.transform.pipelining import checks
from tilelang.transform.pipelining.consumer_loop import barrier
from tilelang.utils.ir import extern, seq


def lower_tma_copies(func: tirx.PrimFunc, options: CompileOptions = DEFAULT_OPTIONS) -> tirx.PrimFunc:
    if options.disable_tma_lower:
        return func
    target = func.attrs["target"]
    scope = Scope()
    # The kernel's copies share one barrier array, one barrier each: separate allocations could be
    # given the same bytes (their lifetimes do not overlap), and an mbarrier must not be
    # initialized again while threads may still be waiting on it.
    # Until the kernel's copies are counted, they name a stand-in array.
    placeholder = tirx.decl_buffer((1 << 16,), "uint64", "tma_bars", scope="shared")
    tiles = []  # the tiles the current kernel's copies write, in order
    depth = [0]  # loops and conditions around the statement being visited
    groups = []  # (init, issue, wait, tile) of each rewritten copy, in order (`_issue_together`)

    def nested(node, recurse):
        depth[0] += 1
        out = recurse(node)
        depth[0] -= 1
        return out

    def on_eval(stmt, recurse):
        if depth[0] or not base.is_tile_op(stmt.value, copy_op.NAME) or copy_op.Copy(stmt.value).disable_tma:
            return stmt
        src, dst = base.Region.from_ir(stmt.value.args[0]), base.Region.from_ir(stmt.value.args[1])
        tile = tma.tile_of(src, dst)
        tx, threads = scope.threads.get("threadIdx.x", (None, 0))
        if isinstance(tile, str) or tx is None or {"threadIdx.y", "threadIdx.z"} & set(scope.threads):
            return stmt
        if laid_out_global(src.buffer, func):  # a TMA box reads the tensor as stored, not through its layout
            return stmt
        kernel = checks.Kernel(func, target, tx, int(threads), only_x=True, specialized=[], options=options)
        if tma.box_plan(tile, checks.predicted_layout(dst.buffer, kernel)) is None:
            return stmt
        ptr = barrier(placeholder, len(tiles))
        tiles.append(dst.buffer)
        init = seq([extern("tl::mbarrier_init", ptr, 1), extern("tl::fence_barrier_init")])
        groups.append((init, tma.make(src, dst, ptr), extern("tl::mbarrier_wait", ptr, 0), dst.buffer))
        return tirx.AttrStmt(tx, _GROUP, tirx.const(len(groups) - 1, "int32"), tirx.Evaluate(0))

    def on_attr(attr, recurse):
        if not is_innermost_thread_extent(attr):
            return recurse(attr)
        tiles.clear()
        body = _issue_together(recurse(attr), groups)
        if not tiles:
            return body
        name = f"{tiles[0].name}_bar" if len(tiles) == 1 else "tma_bars"
        bars = tirx.decl_buffer((len(tiles),), "uint64", name, scope="shared")
        return allocate_at_kernel_top(substitute(body, {placeholder: bars}), [bars])

    body = mutate_with_scope(
        func.body,
        scope,
        {tirx.Evaluate: on_eval, tirx.For: nested, tirx.IfThenElse: nested, tirx.AttrStmt: on_attr},
    )
    return func.with_body(body)


_GROUP = "tl.tma_copy_once"  # (while the pass runs) one rewritten copy: its init, issue and wait


def _issue_together(body: tirx.Stmt, groups: list) -> tirx.Stmt:
    """Each run of consecutive rewritten copies (K and V tiles loaded one after the other) as one
    group: every barrier initialized, one __syncthreads, every load issued, then the waits. The
    loads are in flight together: one TMA round trip before the first reader instead of one each."""

    def flush(run, out):
        if run:
            tx = run[0].node
            parts = [groups[int(r.value)] for r in run]
            out.append(tirx.IfThenElse(tx == 0, seq([p[0] for p in parts]), None))
            out.append(extern("__syncthreads"))
            out.append(tirx.IfThenElse(tx == 0, seq([p[1] for p in parts]), None))
            out.extend(p[2] for p in parts)
            run.clear()

    def on_seq(node):
        out, run = [], []
        for stmt in node.seq:
            if isinstance(stmt, tirx.AttrStmt) and stmt.attr_key == _GROUP:
                tile = groups[int(stmt.value)][3]
                if any(groups[int(r.value)][3].same_as(tile) for r in run):
                    flush(run, out)  # a tile loaded twice in a row: the second load after the first lands
                run.append(stmt)
            else:
                flush(run, out)
                out.append(stmt)
        flush(run, out)
        return seq(out)

    def on_attr(node):
        if node.attr_key != _GROUP:
            return node
        out = []
        flush([node], out)
        return seq(out)

    body = tvm_ffi.structural_map(body, [(tirx.SeqStmt, on_seq)])
    return tvm_ffi.structural_map(body, [(tirx.AttrStmt, on_attr)])

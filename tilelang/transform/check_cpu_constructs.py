"""Check `check_cpu_constructs`: what a kernel compiled for the CPU cannot mean there.

On the CPU a block of `T.Kernel` runs as one loop iteration on one core, and its tile ops run as
loops over whole tiles (`lower_blocks_for_cpu`, `lower_tile_ops_for_cpu`): the block's threads do
not exist. What gives the same result when a block's work runs in program order is kept:
  * a branch over a range of whole warps (`if tx < 128:`, its else, `T.ws(1)`) holding tile ops and
    element-wise code: the work of those threads, run once, the then part before the else part;
  * `T.sync_threads()` between such steps, outside any branch (program order already orders them).
What needs threads running side by side is an error at the user's line naming the construct and
the target, before any other pass: the thread index in an expression (indexing with
`T.get_thread_binding()`, a branch on single threads), a barrier inside a thread branch (the branches
would wait for each other), mbarriers, named barriers, and GPU instructions (TMA, wgmma, cp.async,
shuffles, `T.ptx_*`).

Requires: the PrimFunc as parsed. Guarantees: nothing changed.
"""

from __future__ import annotations

from tvm import ir, tirx

from tilelang import intrinsics
from tilelang.errors import at_span
from tilelang.op import atomic, base
from tilelang.op.loop_indices import uses
from tilelang.transform.common import Scope, is_thread_extent, mutate_with_scope
from tilelang.transform.lower_tile_ops_for_cpu import LAUNCH_HINTS
from tilelang.utils.ir import collect

# Element add/max/min atomics have a CPU form (lower_tile_ops_for_cpu); every other device call is GPU code.
_GPU_OPS = ("tirx.ptx", "tirx.tvm_warp", "tirx.tvm_thread_allreduce", "tirx.cuda")
BLOCK_BARRIER = "tirx.tvm_storage_sync"  # T.sync_threads()
_REASON = "the CPU target runs each block on one core, without the block's threads"


def _gpu_call(call) -> str | None:
    """What `call` is when it only means something on a GPU, else None."""
    op = getattr(call.op, "name", "")
    if op.startswith(_GPU_OPS):
        return op.removeprefix("tirx.")
    if atomic.is_element_atomic(call):
        return None
    if op == "tirx.call_extern":
        return str(call.args[0].value)
    found = intrinsics.lookup(call)
    return f"tl::{found.name}" if found is not None else None


def is_thread_branch(scope: Scope, stmt) -> bool:
    """Whether `stmt` is an `if` over a range of whole warps (or over every thread), `scope` at it."""
    if not isinstance(stmt, tirx.IfThenElse):
        return False
    return scope.branch_ranges(stmt.condition) is not None or scope.covers_all_threads(stmt.condition)


def _own_exprs(stmt) -> list:
    """The expressions of `stmt` itself, not of the statements nested in it."""
    if isinstance(stmt, tirx.Evaluate):
        return [stmt.value]
    if isinstance(stmt, tirx.BufferStore):
        return [stmt.value, *stmt.indices]
    if isinstance(stmt, tirx.Bind):
        return [stmt.value]
    if isinstance(stmt, (tirx.IfThenElse, tirx.While)):
        return [stmt.condition]
    if isinstance(stmt, tirx.For):
        return [stmt.min, stmt.extent]
    return []


def check_cpu_constructs(func: tirx.PrimFunc) -> tirx.PrimFunc:
    threads = {a.node.var for a in collect(func.body, tirx.AttrStmt) if is_thread_extent(a, "threadIdx")}
    scope = Scope()
    branches = []  # the thread branches being visited (outermost first)

    def check(stmt, recurse):
        branch = is_thread_branch(scope, stmt)
        exprs = [] if branch else _own_exprs(stmt)
        calls = [c for expr in exprs for c in collect(expr, ir.Call)]
        if isinstance(stmt, tirx.IfThenElse) and threads and uses(stmt.condition, threads):
            calls += collect(stmt, ir.Call)  # a branch on one thread: name the GPU work inside (mbarrier init)
        for call in calls:  # (named first: the clearer error)
            if getattr(call.op, "name", "") == BLOCK_BARRIER and branches:
                raise at_span(
                    "T.sync_threads() inside a branch on the thread index: on target 'cpu' the branches run "
                    "one after the other, so a barrier between them cannot be kept",
                    stmt.span,
                    branches[-1].span,
                )
            what = _gpu_call(call)
            if what is not None:
                raise at_span(f"'{what}' is GPU code: not available on target 'cpu' ({_REASON})", stmt.span)
        if threads and any(uses(expr, threads) for expr in exprs):
            raise at_span(
                "this statement reads the thread index (T.get_thread_binding(), a branch on single threads): "
                f"not available on target 'cpu' ({_REASON}); write it with tile ops and T.Parallel, or "
                "branch on whole warps (`if tx < 128:`)",
                stmt.span,
            )
        if isinstance(stmt, tirx.Evaluate) and base.is_tile_op(stmt.value):
            op = base.parse(stmt)
            name = stmt.value.op.name.removeprefix("tl.")
            if op is None and name not in LAUNCH_HINTS:
                raise at_span(f"T.{name} is not available on target 'cpu' (it has no CPU lowering)", stmt.span)
            if op is not None and not op.expands and op.lower_cpu is None:
                raise at_span(f"{op.describe()} is not available on target 'cpu' (it has no CPU lowering)", stmt.span)
        if branch:
            branches.append(stmt)
        try:
            return recurse(stmt)
        finally:
            if branch:
                branches.pop()

    kinds = (tirx.Evaluate, tirx.BufferStore, tirx.Bind, tirx.IfThenElse, tirx.For, tirx.While)
    mutate_with_scope(func.body, scope, {kind: check for kind in kinds})
    return func

"""Helpers shared by the passes: walking kernels with the facts an analyzer needs.

Every pass is a function `PrimFunc -> PrimFunc` in its own module; what they share lives here:
recognising kernels (`thread_extent` attributes), binding loop/thread/let variables in a
`tvm.sym.Analyzer` while descending, and finding the outermost `T.Parallel` loops.
"""

from __future__ import annotations

import functools

import tvm
import tvm_ffi
from tvm import ir, sym, tirx

THREAD_TAGS = ("threadIdx.x", "threadIdx.y", "threadIdx.z")


def is_thread_extent(stmt, prefix: str = "") -> bool:
    return (
        isinstance(stmt, tirx.AttrStmt)
        and stmt.attr_key == "thread_extent"
        and isinstance(stmt.node, tirx.IterVar)
        and stmt.node.thread_tag.startswith(prefix)
    )


def is_innermost_thread_extent(stmt) -> bool:
    """Whether `stmt` is a kernel's last threadIdx extent: its body is the per-thread code."""
    return is_thread_extent(stmt, "threadIdx") and not is_thread_extent(stmt.body, "threadIdx")


def allocate_at_kernel_top(attr, buffers):
    """The innermost thread extent `attr` with `buffers` allocated before its first statement."""
    if not buffers:
        return attr
    body = tirx.SeqStmt([tirx.AllocBuffer(b) for b in buffers] + [attr.body])
    return tirx.AttrStmt(attr.node, attr.attr_key, attr.value, body, span=attr.span)


class Scope:
    """An analyzer that knows the ranges of loop, thread and block variables, and let values."""

    def __init__(self):
        self.analyzer = sym.Analyzer()
        self.threads: dict[str, tuple] = {}  # thread tag -> (var, extent)
        # Loop variable -> its values as a symbolic interval, for bounds the analyzer's constant
        # reasoning misses (`m - 1 - i >= 0` for i in [0, m)): see `provably`.
        self.domains: dict = {}
        # Inside `if tx < n:` (tx the kernel's thread index, n a multiple of 32): the tile ops there
        # run on threads [0, n) only, and their fragments are laid out over those n threads.
        self.thread_limit: int | None = None

    def enter(self, stmt):
        """Record the facts that `stmt` makes true for its body."""
        if isinstance(stmt, tirx.For):
            self.analyzer.bind(stmt.loop_var, ir.Range.from_min_extent(stmt.min, stmt.extent))
            self.domains[stmt.loop_var] = sym.IntervalSet(stmt.min, stmt.min + stmt.extent - 1)
        elif is_thread_extent(stmt):
            iv = stmt.node
            self.analyzer.bind(iv.var, ir.Range.from_min_extent(0, stmt.value))
            self.threads[iv.thread_tag] = (iv.var, stmt.value)
        elif isinstance(stmt, tirx.Bind) and not isinstance(stmt.var.ty, ir.PointerType):
            self.analyzer.bind(stmt.var, stmt.value)  # (handles, e.g. TMA descriptors, have no value range)

    def provably(self, lower, expr, upper) -> bool:
        """Whether `lower <= expr < upper` holds (either bound may be None), given the scope's facts."""
        ana = self.analyzer
        if (lower is None or ana.can_prove(expr >= lower)) and (upper is None or ana.can_prove(expr < upper)):
            return True
        if not self.domains:
            return False
        span = ana.int_set(expr, self.domains)  # symbolic: [m - 1 - (m - 1), m - 1] for m - 1 - i
        return (lower is None or ana.can_prove(span.min_value >= lower)) and (
            upper is None or ana.can_prove(span.max_value < upper)
        )

    def leave(self, stmt, saved):
        """Undo what `enter` recorded that holds only inside `stmt` (the threads of a kernel)."""
        if is_thread_extent(stmt):
            self.threads = saved

    def thread_var(self):
        """(linear thread index expression, number of threads) of the current kernel; inside
        `if tx < n:` the number is n."""
        index, count = tirx.const(0, "int32"), 1
        for tag in reversed(THREAD_TAGS):
            if tag in self.threads:
                var, extent = self.threads[tag]
                index = index * extent + var
                count *= int(extent)
        if self.thread_limit is not None:
            count = min(count, self.thread_limit)
        return index, count

    def _thread_bound(self, cond) -> int | None:
        """n when `cond` is `tx < n` for the kernel's thread index tx and a constant n."""
        if not isinstance(cond, tirx.LT) or not isinstance(cond.b, tirx.IntImm) or not self.threads:
            return None
        return int(cond.b.value) if tvm_ffi.structural_equal(cond.a, self.thread_var()[0]) else None

    def covers_all_threads(self, cond) -> bool:
        """Whether `cond` is `tx < n` with n at least the number of threads here (always true)."""
        n = self._thread_bound(cond)
        return n is not None and n >= self.thread_var()[1]

    def thread_limit_of(self, cond) -> int | None:
        """n when `cond` is `tx < n` for the kernel's thread index tx and n a multiple of 32 below
        the thread count (a warp-aligned prefix of the threads), else None."""
        n = self._thread_bound(cond)
        if n is None or n % 32 or not 0 < n < self.thread_var()[1]:
            return None
        return n


def assume_sizes_nonnegative(analyzer, func) -> None:
    """Tell `analyzer` that the dynamic dimensions of `func`'s tensors (`T.dynamic` symbols) are
    sizes: at least 0 and at most what their dtype holds."""
    for p in func.params:
        if not tirx.is_buffer_var(p):
            continue
        for dim in p.shape:
            if isinstance(dim, ir.Var) and not tirx.is_buffer_var(dim):
                dtype = str(dim.ty.dtype)
                largest = 2 ** (tvm.DataType(dtype).bits - 1) - 1
                analyzer.bind(dim, ir.Range.from_min_extent(tirx.const(0, dtype), tirx.const(largest, dtype)))


def _mutate_thread_branch(scope: Scope, mutator, node):
    """`if tx < n:` with its then-branch mutated as code of threads [0, n) (`Scope.thread_limit`)."""
    saved, scope.thread_limit = scope.thread_limit, scope.thread_limit_of(node.condition)
    try:
        then_case = mutator.mutate(node.then_case)
    finally:
        scope.thread_limit = saved
    else_case = mutator.mutate(node.else_case) if node.else_case is not None else None
    if then_case.same_as(node.then_case) and (else_case is None or else_case.same_as(node.else_case)):
        return node
    return tirx.IfThenElse(node.condition, then_case, else_case, span=node.span)


def mutate_with_scope(body, scope: Scope, callbacks: dict):
    """Mutate `body`; `callbacks[type](node, recurse)` handle chosen node types.

    Every For, thread_extent AttrStmt and Bind updates `scope` before its body is visited; the
    then-branch of `if tx < n` (a warp-aligned prefix of the threads) is visited with
    `scope.thread_limit` n.
    `recurse(node)` applies the default mutation (children visited with the same callbacks).
    """

    errors = []

    def make(kind):
        def handler(node, mutator):
            if errors:
                return node
            try:
                saved = dict(scope.threads)
                scope.enter(node)
                user = callbacks.get(kind)
                recurse = mutator.default_mutate
                if isinstance(node, tirx.IfThenElse) and scope.thread_limit_of(node.condition) is not None:
                    recurse = functools.partial(_mutate_thread_branch, scope, mutator)
                result = user(node, recurse) if user is not None else recurse(node)
                scope.leave(node, saved)
                return result
            except Exception as err:  # noqa: BLE001 (re-raised below, with its own type)
                errors.append(err)
                return node

        return handler

    scoped = (tirx.For, tirx.AttrStmt, tirx.Bind, tirx.IfThenElse)
    kinds = list(scoped) + [k for k in callbacks if k not in scoped]
    result = tvm_ffi.structural_mutate(body, [(k, make(k)) for k in kinds])
    if errors:
        # An exception crossing the FFI boundary loses its type; raise the original here instead.
        raise errors[0]
    return result


def walk(node, callbacks, order: str = "pre") -> None:
    """`tvm_ffi.structural_walk`, but an exception raised by a callback keeps its type."""
    errors = []

    def guard(fn):
        def call(n):
            if errors:
                return None
            try:
                return fn(n)
            except Exception as err:  # noqa: BLE001 (re-raised below)
                errors.append(err)
                return None

        return call

    tvm_ffi.structural_walk(node, [(k, guard(fn)) for k, fn in callbacks], order=order)
    if errors:
        raise errors[0]


from tilelang.utils.ir import collect  # noqa: E402,F401  (re-exported for passes)

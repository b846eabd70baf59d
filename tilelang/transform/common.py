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

from tilelang.layout.fragment import substitute

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


def kernels(body) -> list:
    """The outermost thread-extent statements: the kernels (`T.Kernel`), each whole."""
    found = []

    def on_attr(node):
        if node.attr_key == "thread_extent":
            found.append(node)
            return tvm_ffi.WalkResult.SKIP
        return None

    tvm_ffi.structural_walk(body, [(tirx.AttrStmt, on_attr)], order="pre")
    return found


def replace_attrs(func, swap: dict):
    """`func` with each attribute statement that is a key of `swap` (the very node: a kernel `kernels`
    found, a thread extent inside one) replaced by its value; `func` itself when `swap` is empty."""
    if not swap:
        return func

    def on_attr(attr):
        for old, new in swap.items():
            if attr.same_as(old):
                return new
        return attr

    return func.with_body(tvm_ffi.structural_map(func.body, [(tirx.AttrStmt, on_attr)], order="pre"))


def inline_bindings(stmts) -> list:
    """`stmts` without their `x = value` bindings, each value put in place of its name in the
    statements after it (a value may use names bound before it)."""
    out, mapping = [], {}
    for s in stmts:
        if isinstance(s, tirx.Bind):
            mapping[s.var] = substitute(s.value, mapping)
            continue
        out.append(substitute(s, mapping) if mapping else s)
    return out


class Scope:
    """An analyzer that knows the ranges of loop, thread and block variables, and let values."""

    def __init__(self):
        self.analyzer = sym.Analyzer()
        self.threads: dict[str, tuple] = {}  # thread tag -> (var, extent)
        # Loop variable -> its values as a symbolic interval, for bounds the analyzer's constant
        # reasoning misses (`m - 1 - i >= 0` for i in [0, m)): see `provably`.
        self.domains: dict = {}
        # Inside a thread branch (`if tx < n:`, its else, `if tx >= n:`; tx the kernel's thread
        # index): the absolute range [lo, hi) of threads running it. Tile ops there run on those
        # threads only, their fragments laid out over them with thread index tx - lo.
        self.thread_range: tuple[int, int] | None = None
        # The span of the kernel's thread extent: the user's `with T.Kernel(..., threads=n)` line,
        # where an error about the number of threads points.
        self.kernel_span = None

    def enter(self, stmt):
        """Record the facts that `stmt` makes true for its body."""
        if isinstance(stmt, tirx.For):
            self.analyzer.bind(stmt.loop_var, ir.Range.from_min_extent(stmt.min, stmt.extent))
            self.domains[stmt.loop_var] = sym.IntervalSet(stmt.min, stmt.min + stmt.extent - 1)
        elif is_thread_extent(stmt):
            iv = stmt.node
            self.analyzer.bind(iv.var, ir.Range.from_min_extent(0, stmt.value))
            self.threads[iv.thread_tag] = (iv.var, stmt.value)
            if iv.thread_tag.startswith("threadIdx"):
                self.kernel_span = stmt.span
        elif isinstance(stmt, tirx.Bind) and not isinstance(stmt.var.ty, ir.PointerType):
            # (Handles, e.g. TMA descriptors, have no value range.) A binding the pipelines copied into a
            # prologue and the loop holds a different value in each: the latest one holds here.
            self.analyzer.bind(stmt.var, stmt.value, allow_override=True)

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

    def block_thread(self):
        """(linear thread index expression, number of threads) of the whole kernel."""
        index, count = tirx.const(0, "int32"), 1
        for tag in reversed(THREAD_TAGS):
            if tag in self.threads:
                var, extent = self.threads[tag]
                index = index * extent + var
                count *= int(extent)
        return index, count

    def thread_var(self):
        """(thread index expression, number of threads) here: the kernel's, or inside a thread
        branch over threads [lo, hi), tx - lo and hi - lo."""
        index, count = self.block_thread()
        if self.thread_range is None:
            return index, count
        lo, hi = self.thread_range
        return (index - lo if lo else index), hi - lo

    def thread_offset(self) -> int:
        """lo of the thread branch here (0 outside one)."""
        return self.thread_range[0] if self.thread_range is not None else 0

    def _threads_here(self):
        """(the kernel's thread index, lo, hi): the threads [lo, hi) running the code here."""
        index, count = self.block_thread()
        lo, hi = self.thread_range or (0, count)
        return index, lo, hi

    def branch_ranges(self, cond):
        """The thread ranges of `if cond:` and of its else, when `cond` splits the threads here
        (see `branch_ranges`), else None."""
        return branch_ranges(cond, *self._threads_here()) if self.threads else None

    def covers_all_threads(self, cond) -> bool:
        """Whether `cond` is `tx < n` with n at least the last thread here, or `tx >= n` with n at
        most the first (true for every thread)."""
        if not self.threads:
            return False
        index, lo, hi = self._threads_here()
        bound = _thread_bound(cond, index)
        return bound is not None and (bound[1] >= hi if bound[0] == "<" else bound[1] <= lo)


def _thread_bound(cond, index):
    """("<", n) for `tx < n`, (">=", n) for `tx >= n` or `n <= tx` (tx: `index`, n constant)."""
    if isinstance(cond, tirx.LT) and isinstance(cond.b, tirx.IntImm) and tvm_ffi.structural_equal(cond.a, index):
        return "<", int(cond.b.value)
    if isinstance(cond, tirx.GE) and isinstance(cond.b, tirx.IntImm) and tvm_ffi.structural_equal(cond.a, index):
        return ">=", int(cond.b.value)
    if isinstance(cond, tirx.LE) and isinstance(cond.a, tirx.IntImm) and tvm_ffi.structural_equal(cond.b, index):
        return ">=", int(cond.a.value)
    return None


def branch_ranges(cond, index, lo: int, hi: int):
    """For threads [lo, hi) with thread index `index`: ((lo_then, hi_then), (lo_else, hi_else))
    when `cond` is `tx < n`, `tx >= n` (else the other part) or `a <= tx and tx < b` (its else
    None unless [a, b) starts or ends [lo, hi)), every range warp-aligned, non-empty and inside
    [lo, hi); else None."""
    if isinstance(cond, tirx.And):
        parts = [_thread_bound(c, index) for c in (cond.a, cond.b)]
        if None in parts or {p[0] for p in parts} != {"<", ">="}:
            return None
        a = max(next(n for op, n in parts if op == ">="), lo)
        b = min(next(n for op, n in parts if op == "<"), hi)
        # The else is one range when [a, b) starts or ends the threads here (an `elif`).
        other = (b, hi) if a == lo and b < hi else (lo, a) if b == hi and a > lo else None
        ranges = ((a, b), other)
    else:
        bound = _thread_bound(cond, index)
        if bound is None:
            return None
        n = bound[1]
        if not lo < n < hi:
            return None
        ranges = ((lo, n), (n, hi)) if bound[0] == "<" else ((n, hi), (lo, n))
    for r in ranges:
        if r is not None and (r[0] % 32 or r[1] % 32 or r[0] >= r[1]):
            return None
    return ranges


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


def _mutate_thread_branch(scope: Scope, ranges, mutator, node):
    """A thread branch (`ranges`: its sides' threads) with each side mutated as code of its
    threads (`Scope.thread_range`)."""
    saved = scope.thread_range
    cases = []
    for case, rng in ((node.then_case, ranges[0]), (node.else_case, ranges[1])):
        scope.thread_range = rng if rng is not None else saved
        try:
            cases.append(mutator.mutate(case) if case is not None else None)
        finally:
            scope.thread_range = saved
    then_case, else_case = cases
    if then_case.same_as(node.then_case) and (else_case is None or else_case.same_as(node.else_case)):
        return node
    return tirx.IfThenElse(node.condition, then_case, else_case, span=node.span)


def mutate_with_scope(body, scope: Scope, callbacks: dict):
    """Mutate `body`; `callbacks[type](node, recurse)` handle chosen node types.

    Every For, thread_extent AttrStmt and Bind updates `scope` before its body is visited; each side
    of a thread branch (`if tx < n:` / else, `if tx >= n:`, `if a <= tx < b:`, warp-aligned) is
    visited with `scope.thread_range` its threads.
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
                ranges = scope.branch_ranges(node.condition) if isinstance(node, tirx.IfThenElse) else None
                if ranges is not None:
                    recurse = functools.partial(_mutate_thread_branch, scope, ranges, mutator)
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

"""`Fragment`: where each element of a block-level register tile lives, as (thread, register index).

A fragment layout maps a logical index e = (i, j, ...) of a tile to the thread that holds it and to
its position in that thread's registers. The same object describes how a `T.Parallel` loop nest is
spread over the threads (a *loop layout*: iteration e runs on thread `thread(e)` as the thread's
`index(e)`-th iteration).

Replication: an element may be held by several threads (the result of a row reduction lives in
every thread that held part of the row). The holders of e are `base(e) + sum_k d_k * stride_k` for
every choice of digits `d_k < count_k`: `groups = [(stride_k, count_k), ...]` are digit ranges of
the thread id (for a warp-shuffle reduction, e.g. [(1, 4)] = the 4 lanes of a quad). `replicate`
is the product of the counts, and `thread(e, rep)` enumerates the holders.

Pure algebra on index expressions: composition is substitution, inversion goes through TVM's
iter-map arithmetic, and questions over a whole constant-shape tile are answered numerically
(`layout.evaluate`).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

import numpy as np
import tvm_ffi
from tvm import ir, sym, tirx
from tvm.tirx import IndexMap

from tilelang.layout.evaluate import evaluate, grid
from tilelang.utils.ir import i32 as _c


def placeholder_vars(n: int, prefix: str = "i"):
    """`n` fresh int32 Vars named prefix0, prefix1, ..."""
    return [tirx.Var(f"{prefix}{k}", "int32") for k in range(n)]


def substitute(expr, mapping: dict):
    """`expr` with each Var key of `mapping` replaced by its value."""
    if not mapping:
        return expr

    def on_var(v):
        for k, val in mapping.items():
            if v.same_as(k):
                return val
        return v

    return tvm_ffi.structural_map(expr, [(ir.Var, on_var)])


def clear_groups(thread, groups):
    """`thread` with the digits of every replication group set to 0 (the group's base thread)."""
    for stride, count in groups:
        thread = thread - tirx.floormod(tirx.floordiv(thread, _c(stride)), _c(count)) * _c(stride)
    return thread


def compress_groups(thread, groups):
    """`thread` with the digits of every replication group removed (the base threads numbered
    densely), so the map element -> (base thread, index) can be inverted as a bijection."""
    for stride, count in sorted(groups, reverse=True):
        thread = tirx.floordiv(thread, _c(stride * count)) * _c(stride) + tirx.floormod(thread, _c(stride))
    return thread


def spread(rep, groups):
    """The offset of the `rep`-th holder from the base thread: sum_k digit_k(rep) * stride_k."""
    offset, place = _c(0), 1
    for stride, count in groups:
        offset = offset + tirx.floormod(tirx.floordiv(rep, _c(place)), _c(count)) * _c(stride)
        place *= count
    return offset


@dataclass
class Fragment:
    """Logical index -> (thread, register index), over `num_threads` threads.

    Attributes:
        shape: the logical shape (ints).
        vars: one placeholder Var per logical dimension.
        base: the (first) thread holding element `vars`.
        index: the register index of element `vars` (the same in every holder).
        num_threads: the threads the layout spans.
        groups: replication digit ranges [(stride, count)]; empty when each element has one holder.
        vector_size: elements contiguous both in registers and along the last dimension.
    """

    shape: tuple
    vars: list
    base: object
    index: object
    num_threads: int
    groups: list = field(default_factory=list)
    vector_size: int = 1
    _local_size: int | None = field(default=None, repr=False)

    # ---- basic properties -------------------------------------------------------------------
    @property
    def replicate(self) -> int:
        return math.prod(c for _, c in self.groups) if self.groups else 1

    def map(self, indices, rep=None):
        """(thread, register index) of the element at `indices` (its `rep`-th holder)."""
        mapping = dict(zip(self.vars, indices))
        thread = substitute(self.base, mapping)
        if self.groups and rep is not None:
            thread = thread + spread(rep, self.groups)
        return thread, substitute(self.index, mapping)

    def tables(self):
        """(base thread, register index) of every element, as flat arrays in row-major order."""
        points = dict(zip(self.vars, grid(self.shape)))
        return evaluate(self.base, points).reshape(-1), evaluate(self.index, points).reshape(-1)

    @property
    def local_size(self) -> int:
        """Registers each thread holds."""
        if self._local_size is None:
            self._local_size = int(self.tables()[1].max()) + 1
        return self._local_size

    def holds(self, threads, element_indices):
        """Element-wise: does thread `threads[k]` hold element `element_indices[.][k]`? (numpy arrays)"""
        base = evaluate(self.base, dict(zip(self.vars, element_indices)))
        t = tirx.Var("t", "int32")
        cleared = evaluate(clear_groups(t, self.groups), {t: threads})
        return cleared == base

    def holder_threads(self, element_indices):
        """All holders of each element: array [replicate, n] (numpy)."""
        base = evaluate(self.base, dict(zip(self.vars, element_indices)))
        if element_indices:  # a constant base (one thread holds everything) evaluates to a scalar
            base = np.broadcast_to(base, np.shape(element_indices[0]))
        reps = np.arange(self.replicate, dtype=np.int64)
        r = tirx.Var("r", "int32")
        offsets = evaluate(spread(r, self.groups), {r: reps}) if self.groups else np.zeros(1, np.int64)
        return base[None, :] + offsets[:, None]

    # ---- algebra ----------------------------------------------------------------------------
    def inverse(self):
        """Logical indices as a function of (thread, register index).

        Returns `apply(thread, index) -> (list of logical index exprs, valid)`; `valid` is false
        for (thread, index) pairs that hold no element (the padding of a tile whose size is not a
        multiple of the threads). With replication, every holder maps back to the element.
        """
        groups = self.groups
        # Simplified over the tile's bounds first: the iterator detection behind IndexMap's inverse
        # does not see through digits that are constant on the tile (e.g. `i % 16 // 16` for i < 64).
        ana = sym.Analyzer()
        for v, n in zip(self.vars, self.shape):
            ana.bind(v, ir.Range(0, n))
        base = ana.simplify(compress_groups(self.base, groups) if groups else self.base)
        imap = IndexMap(list(self.vars), [base, ana.simplify(self.index)], None)
        inv, padding = imap.non_surjective_inverse(list(self.shape))
        # The inverse covers only the threads the tile reaches; threads past them hold nothing.
        used_threads = int(imap.map_shape(list(self.shape))[0])

        def apply(t, r):
            tc = compress_groups(t, groups)
            mapping = dict(zip(inv.initial_indices, [tc, r]))
            valid = tirx.Not(substitute(padding, mapping))
            if used_threads < self.num_threads // max(self.replicate, 1):
                valid = tirx.And(valid, tc < _c(used_threads))
            valid = sym.Analyzer().simplify(valid)
            return [substitute(e, mapping) for e in inv.final_indices], valid

        return apply

    def with_shape_vars(self, new_vars):
        """The same layout written over other placeholder vars (e.g. a loop's own variables)."""
        mapping = dict(zip(self.vars, new_vars))
        return Fragment(
            tuple(self.shape),
            list(new_vars),
            substitute(self.base, mapping),
            substitute(self.index, mapping),
            self.num_threads,
            list(self.groups),
            self.vector_size,
        )

    def is_equivalent(self, other: Fragment) -> bool:
        """Same shape, threads, holders and register index for every element (the holders' digit
        ranges may be written differently: [(1, 64), (64, 2)] and [(1, 128)] are the same)."""
        if tuple(self.shape) != tuple(other.shape) or self.num_threads != other.num_threads:
            return False
        if self.replicate != other.replicate:
            return False
        a_base, a_index = self.tables()
        b_base, b_index = other.tables()
        if not (np.array_equal(a_base, b_base) and np.array_equal(a_index, b_index)):
            return False
        if sorted(self.groups) == sorted(other.groups):
            return True
        points = grid(self.shape)
        return bool(
            np.array_equal(np.sort(self.holder_threads(points), axis=0), np.sort(other.holder_threads(points), axis=0))
        )

    def is_injective(self) -> bool:
        """Whether no two elements share a (holder, register) pair."""
        base, index = self.tables()
        key = base.astype(np.int64) * (int(index.max()) + 1) + index  # one number per (holder, register)
        if key.min() < 0:
            return int(np.unique(key).size) == key.size
        hit = np.zeros(int(key.max()) + 1, dtype=bool)  # (a bitmap: np.unique sorts, far slower)
        hit[key] = True
        return int(np.count_nonzero(hit)) == key.size

    def is_fully_replicated(self) -> bool:
        """Whether every thread holds every element (a value read outside loops, `if mask[k]:`)."""
        return self.replicate == self.num_threads and bool((self.tables()[0] == 0).all())

    def __str__(self) -> str:
        args = ", ".join(v.name for v in self.vars)
        rep = f", replicated over {self.groups}" if self.groups else ""
        return (
            f"Fragment({list(self.shape)}: ({args}) -> thread {self.base}, index {self.index}; "
            f"{self.num_threads} threads{rep})"
        )


def partition(shape, num_threads: int, vector_size: int = 1) -> Fragment:
    """The plain spread of a tile over threads: row-major order, `vector_size` consecutive elements
    per thread, then the next thread; a thread's chunks are `num_threads * vector_size` apart.

    This is the least-register layout of a tile with no other constraint (each thread holds
    ceil(size / num_threads) elements) and gives coalesced, vectorized global accesses.
    """
    vars_ = placeholder_vars(len(shape))
    flat = _c(0)
    for v, n in zip(vars_, shape):
        flat = flat * _c(n) + v
    # Thread and register both from the same chunk index: IndexMap's inverse then sees one fused
    # iterator split in two (`flat // (threads * vector)` beside `chunk % threads` it cannot match
    # when the row is not a power of two, e.g. 176 columns).
    chunk = tirx.floordiv(flat, _c(vector_size))
    thread = tirx.floormod(chunk, _c(num_threads))
    index = tirx.floordiv(chunk, _c(num_threads)) * _c(vector_size) + tirx.floormod(flat, _c(vector_size))
    ana = sym.Analyzer()
    for v, n in zip(vars_, shape):
        ana.bind(v, ir.Range(0, n))
    return Fragment(
        tuple(shape), vars_, ana.simplify(thread), ana.simplify(index), num_threads, vector_size=vector_size
    )


def fully_replicated(shape, num_threads: int) -> Fragment:
    """Every thread holds the whole tile, row-major in its registers: the layout of a fragment read
    outside loops and tile ops (`if mask[k]:`, `x = scale[0]`), where every thread reads it."""
    vars_ = placeholder_vars(len(shape), "j")
    flat = _c(0)
    for v, n in zip(vars_, shape):
        flat = flat * _c(n) + v
    return Fragment(tuple(shape), vars_, _c(0), sym.Analyzer().simplify(flat), num_threads, [(1, num_threads)])


def with_held_dims(frag: Fragment, shape, spread_dims) -> Fragment:
    """A layout of a tile of `shape` from `frag`, the layout of its dimensions `spread_dims` (in order;
    none: `frag` is the layout of a [1] tile): each holder of an element of `frag` also holds every
    element that differs from it in the other dimensions (the held ones), in further registers,
    held-major. The layout of `lse[k, i]` touched in a loop over i with k from an enclosing loop:
    the thread running i holds lse[:, i]."""
    vars_ = placeholder_vars(len(shape), "j")
    spread_vars = [vars_[d] for d in spread_dims] or [_c(0)]
    mapping = dict(zip(frag.vars, spread_vars))
    flat = _c(0)
    for d, n in enumerate(shape):
        if d not in spread_dims:
            flat = flat * _c(n) + vars_[d]
    index = flat * _c(frag.local_size) + substitute(frag.index, mapping)
    ana = sym.Analyzer()
    for v, n in zip(vars_, shape):
        ana.bind(v, ir.Range(0, n))
    vec = frag.vector_size if len(shape) - 1 in spread_dims else 1
    return Fragment(
        tuple(shape),
        vars_,
        ana.simplify(substitute(frag.base, mapping)),
        ana.simplify(index),
        frag.num_threads,
        list(frag.groups),
        vec,
    )


class IrregularLayout(Exception):
    """A layout whose holders of a reduced row do not form digit ranges of the thread id."""


def _digit_groups(offsets: np.ndarray):
    """Decompose a set of thread offsets {0, ...} into digit ranges [(stride, count)], or raise."""
    values = set(int(x) for x in offsets)
    groups, covered = [], {0}
    while covered != values:
        stride = min(values - covered)
        count = 1
        while all((count * stride + c) in values for c in covered):
            count += 1
        if count == 1:
            raise IrregularLayout(f"holders at offsets {sorted(values)} are not digit ranges of the thread id")
        covered = {c + d * stride for c in covered for d in range(count)}
        groups.append((stride, count))
    return groups


def reduced(src: Fragment, dim: int) -> Fragment:
    """The layout of the result of reducing `src` along `dim`: element e is held by every thread
    that held part of the reduced row of e, at one register slot per row. A replicated source
    (an operand every warp along N holds) gives each of its copies the whole result: the row's
    threads' digit ranges (`reduced_groups`), then the source's own.

    Raises IrregularLayout when those threads do not form the same digit ranges for every row.
    """
    ndim = len(src.shape)
    keep = [d for d in range(ndim) if d != dim]
    out_shape = tuple(src.shape[d] for d in keep) or (1,)
    rows = _row_threads(src, dim)
    out_vars = placeholder_vars(len(out_shape), "k")
    point = []
    it = iter(out_vars)
    for d in range(ndim):
        point.append(_c(0) if d == dim else next(it))
    if not keep:
        point = [_c(0) if d == dim else None for d in range(ndim)]
    first_thread, first_index = src.map(point)
    out = replicated(out_shape, out_vars, first_thread, first_index, rows, src.num_threads)
    if src.groups:
        out = Fragment(out.shape, out.vars, out.base, out.index, out.num_threads, out.groups + list(src.groups))
        if not is_invertible(out):
            raise IrregularLayout("the source's copies and the threads of a row do not combine into digit ranges")
    return out


def _row_threads(src: Fragment, dim: int) -> np.ndarray:
    """[out elements, reduced]: the (first) holder of each element of each row along `dim`."""
    points = grid(src.shape)
    threads = np.broadcast_to(evaluate(src.base, dict(zip(src.vars, points))), points[0].shape).reshape(src.shape)
    return np.moveaxis(threads, dim, -1).reshape(-1, src.shape[dim])


def reduced_groups(src: Fragment, dim: int) -> list:
    """The digit ranges of the thread id over which a reduction of `src` along `dim` combines the
    parts of a row (each copy of a replicated source on its own): [(stride, count)].

    Raises IrregularLayout when the rows' threads are not such ranges."""
    rows = _row_threads(src, dim)
    return _digit_groups(rows[0] - rows[0].min())


def replicated(out_shape, out_vars, first_thread, first_index, holders: np.ndarray, num_threads: int) -> Fragment:
    """The layout whose element k (row-major over `out_shape`) is held by the threads `holders[k]`
    (a row of thread ids, repeats allowed), at one register slot per element.

    `first_thread` and `first_index` are expressions in `out_vars`: a holder of each element and a
    register index to number the slots from (the slot is compacted to a dense range when it can
    be, else one slot per element). The holders of every element must be its lowest holder plus
    the same digit ranges of the thread id (`groups`).

    Raises IrregularLayout when they are not.
    """
    lows = holders.min(axis=1)
    offsets = holders - lows[:, None]
    shape_of_group = set(offsets[0].tolist())
    if any(set(row.tolist()) != shape_of_group for row in offsets):
        raise IrregularLayout("rows are held by differently shaped groups of threads")
    groups = _digit_groups(offsets[0])
    base = sym.Analyzer().simplify(clear_groups(first_thread, groups))
    got = evaluate(base, dict(zip(out_vars, grid(out_shape)))).reshape(-1)
    if not np.array_equal(got, lows):
        raise IrregularLayout("the lowest holder of a row is not the row's first holder with digits cleared")
    # One register slot per row: the first element's register, compacted to a dense range.
    first = evaluate(first_index, dict(zip(out_vars, grid(out_shape)))).reshape(-1) * np.ones_like(lows)
    candidate = Fragment(out_shape, out_vars, base, compact_index(first_index, first), num_threads, groups)
    if not candidate.is_injective() or not is_invertible(candidate):  # fall back to one slot per element
        flat = _c(0)
        for v, n in zip(out_vars, out_shape):
            flat = flat * _c(n) + v
        candidate = Fragment(out_shape, out_vars, base, flat, num_threads, groups)
    return candidate


def compact_index(index, values: np.ndarray):
    """`index` renumbered onto 0..n-1 when its values form digit ranges (e.g. registers {0, 2, 64,
    66} of a row's first element -> {0, 1, 2, 3}); else divided by their common stride."""
    try:
        digits = _digit_groups(np.unique(values))
    except IrregularLayout:
        digits = None
    if digits is not None and values.min() == 0:
        dense, scale = _c(0), 1
        for stride, count in digits:
            dense = dense + tirx.floormod(tirx.floordiv(index, _c(stride)), _c(count)) * _c(scale)
            scale *= count
        return sym.Analyzer().simplify(dense)
    step = int(np.gcd.reduce(values)) if values.any() else 1
    return sym.Analyzer().simplify(tirx.floordiv(index, _c(step))) if step > 1 else index


def is_invertible(frag: Fragment) -> bool:
    """Whether TVM's iter-map arithmetic inverts the layout (`Fragment.inverse`), as lowering needs."""
    try:
        frag.inverse()
        return True
    except Exception:  # noqa: BLE001 (TVM reports a non-affine map with a generic error)
        return False


def partition_rows(shape, num_threads: int, vector_size: int = 1) -> Fragment | None:
    """A spread in which each row (all dimensions but the last) lives on one aligned group of
    threads, `vector_size` consecutive elements per thread: the layout that makes a row reduction
    a clean warp-shuffle butterfly. None when the last dimension has no such split.
    """
    rows, cols = math.prod(shape[:-1]), shape[-1]
    if cols % vector_size:
        return None
    chunks = cols // vector_size
    per_row = 1
    while per_row * 2 <= num_threads and chunks % (per_row * 2) == 0 and num_threads % (per_row * 2) == 0:
        per_row *= 2
    rows_per_round = num_threads // per_row
    vars_ = placeholder_vars(len(shape))
    row = _c(0)
    for v, n in zip(vars_[:-1], shape[:-1]):
        row = row * _c(n) + v
    col = vars_[-1]
    chunk = tirx.floordiv(col, _c(vector_size))
    thread = tirx.floormod(row, _c(rows_per_round)) * _c(per_row) + tirx.floormod(chunk, _c(per_row))
    per_thread = chunks // per_row * vector_size
    index = (
        tirx.floordiv(row, _c(rows_per_round)) * _c(per_thread)
        + tirx.floordiv(chunk, _c(per_row)) * _c(vector_size)
        + tirx.floormod(col, _c(vector_size))
    )
    ana = sym.Analyzer()
    for v, n in zip(vars_, shape):
        ana.bind(v, ir.Range(0, n))
    del rows
    return Fragment(
        tuple(shape), vars_, ana.simplify(thread), ana.simplify(index), num_threads, vector_size=vector_size
    )


def to_ir(frag: Fragment):
    """The fragment as an IR value (an Array), to carry it in annotations between passes."""
    imap = IndexMap(list(frag.vars), [frag.base, frag.index], None)
    groups = [[int(s), int(c)] for s, c in frag.groups]
    return tvm_ffi.convert([imap, list(frag.shape), frag.num_threads, groups, frag.vector_size])


def from_ir(value) -> Fragment:
    """Inverse of `to_ir`."""
    imap, shape, num_threads, groups, vector_size = value
    base, index = imap.final_indices
    return Fragment(
        tuple(int(s) for s in shape),
        list(imap.initial_indices),
        base,
        index,
        int(num_threads),
        [(int(s), int(c)) for s, c in groups],
        int(vector_size),
    )

"""`Fragment`: where each element of a block-level register tile lives, as (thread, register index).

A fragment layout maps a logical index (i, j, ...) of a tile to the thread that holds it and to the
position in that thread's registers. The same object describes how a `T.Parallel` loop nest is spread
over the threads (a *loop layout*: iteration (i, j) runs on thread `thread(i, j)` as its
`index(i, j)`-th iteration). Replication (one element held by several threads) comes with
`replicate > 1`: the thread map then also depends on a replica variable.

Pure algebra on index expressions: composition is substitution, inversion goes through TVM's
iter-map arithmetic (`IndexMap.non_surjective_inverse`).
"""

from __future__ import annotations

from dataclasses import dataclass, field

import tvm_ffi
from tvm import ir, sym, tirx
from tvm.tirx import IndexMap


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


@dataclass
class Fragment:
    """Logical index -> (thread, register index), over `num_threads` threads.

    Attributes:
        shape: the logical shape (ints).
        vars: one placeholder Var per logical dimension, used by `thread` and `index`.
        thread: the thread id as an expression of `vars` (and of `rep_var` when replicated).
        index: the register index as an expression of `vars`.
        num_threads: the threads the layout spans.
        replicate: how many threads hold each element.
        vector_size: elements that are contiguous both in registers and along the last logical
            dimension (a hint for vectorized accesses).
    """

    shape: tuple
    vars: list
    thread: object
    index: object
    num_threads: int
    replicate: int = 1
    rep_var: object = None
    vector_size: int = 1
    _local_size: int | None = field(default=None, repr=False)

    def map(self, indices, rep=None):
        """(thread, register index) of the element at `indices`."""
        mapping = dict(zip(self.vars, indices))
        if self.rep_var is not None:
            mapping[self.rep_var] = rep if rep is not None else tirx.const(0, "int32")
        return substitute(self.thread, mapping), substitute(self.index, mapping)

    @property
    def local_size(self) -> int:
        """Registers each thread holds."""
        if self._local_size is None:
            ana = sym.Analyzer()
            for v, n in zip(self.vars, self.shape):
                ana.bind(v, ir.Range(0, n))
            self._local_size = int(ana.const_int_bound(self.index).max_value) + 1
        return self._local_size

    def inverse(self):
        """(vars_of, predicate): logical indices as a function of (thread, register index).

        Returns a function `(thread, index) -> (list of logical index exprs, valid)`; `valid` is
        false for (thread, index) pairs that hold no element (the padding of a tile whose size is
        not a multiple of the threads).
        """
        if self.replicate != 1:
            raise NotImplementedError("inverse of a replicated fragment")
        vars_, thread, index = self.vars, self.thread, self.index
        imap = IndexMap(vars_, [thread, index], None)
        inv, padding = imap.non_surjective_inverse(list(self.shape))

        def apply(t, r):
            mapping = dict(zip(inv.initial_indices, [t, r]))
            valid = sym.Analyzer().simplify(tirx.Not(substitute(padding, mapping)))
            return [substitute(e, mapping) for e in inv.final_indices], valid

        return apply

    def with_shape_vars(self, new_vars):
        """The same layout written over other placeholder vars (e.g. a loop's own variables)."""
        mapping = dict(zip(self.vars, new_vars))
        return Fragment(tuple(self.shape), list(new_vars), substitute(self.thread, mapping),
                        substitute(self.index, mapping), self.num_threads, self.replicate, self.rep_var,
                        self.vector_size)

    def is_equivalent(self, other: "Fragment") -> bool:
        """Same shape, threads and (thread, index) for every element."""
        if tuple(self.shape) != tuple(other.shape) or self.num_threads != other.num_threads:
            return False
        if self.replicate != other.replicate:
            return False
        o = other.with_shape_vars(self.vars)
        ana = sym.Analyzer()
        for v, n in zip(self.vars, self.shape):
            ana.bind(v, ir.Range(0, n))
        return bool(ana.can_prove_equal(self.thread, o.thread)) and bool(ana.can_prove_equal(self.index, o.index))

    def __str__(self) -> str:
        args = ", ".join(v.name for v in self.vars)
        return f"Fragment({list(self.shape)}: ({args}) -> thread {self.thread}, index {self.index}; " \
               f"{self.num_threads} threads)"


def partition(shape, num_threads: int, vector_size: int = 1) -> Fragment:
    """The plain spread of a tile over threads: row-major order, `vector_size` consecutive elements
    per thread, then the next thread; a thread's chunks are `num_threads * vector_size` apart.

    This is the least-register layout of a tile with no other constraint (each thread holds
    ceil(size / num_threads) elements) and gives coalesced, vectorized global accesses.
    """
    vars_ = placeholder_vars(len(shape))
    flat = tirx.const(0, "int32")
    for v, n in zip(vars_, shape):
        flat = flat * n + v
    per_round = num_threads * vector_size
    thread = tirx.floormod(tirx.floordiv(flat, vector_size), num_threads)
    index = tirx.floordiv(flat, per_round) * vector_size + tirx.floormod(flat, vector_size)
    ana = sym.Analyzer()
    for v, n in zip(vars_, shape):
        ana.bind(v, ir.Range(0, n))
    return Fragment(tuple(shape), vars_, ana.simplify(thread), ana.simplify(index), num_threads,
                    vector_size=vector_size)


def to_ir(frag: Fragment):
    """The fragment as an IR value (an Array), to carry it in annotations between passes."""
    import tvm_ffi

    imap = IndexMap(list(frag.vars) + ([frag.rep_var] if frag.rep_var is not None else []),
                    [frag.thread, frag.index], None)
    return tvm_ffi.convert([imap, list(frag.shape), frag.num_threads, frag.replicate, frag.vector_size])


def from_ir(value) -> Fragment:
    """Inverse of `to_ir`."""
    imap, shape, num_threads, replicate, vector_size = value
    vars_ = list(imap.initial_indices)
    rep_var = vars_.pop() if int(replicate) > 1 else None
    thread, index = imap.final_indices
    return Fragment(tuple(int(s) for s in shape), vars_, thread, index, int(num_threads), int(replicate), rep_var,
                    int(vector_size))

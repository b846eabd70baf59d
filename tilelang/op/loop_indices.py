"""How a `T.Parallel` nest indexes a fragment: each index split into the part that the nest's
variables give and the part from outside the nest (an enclosing or inner serial loop's variable, a
constant), and the values the outside part takes. Layout inference (`op/parallel.py`) checks a loop
against a fragment over every such value: `lse[k, i]` in a loop over i, with k from a loop around
it, touches lse[:, i] over the runs of that loop.

`Packing` covers indices that read digits of the nest's variables (`B_local[i, j // 2]`, a byte
holding two 4-bit values read by two iterations): which digits they leave out, and the iterations
that touch each element.
"""

from __future__ import annotations

import numpy as np
import tvm_ffi
from tvm import ir, sym, tirx
from tvm.tirx import IndexMap

from tilelang.layout import fragment as fl
from tilelang.layout.evaluate import NotEvaluable, evaluate, grid


class Split:
    """A fragment's indices in a T.Parallel nest, each split as `outer + inner`: `inner` a function of
    the nest's variables alone, `outer` free of them (an enclosing or inner serial loop's variable,
    a constant). `offsets[d]` lists the values outer[d] takes with the element inside the
    fragment; the nest touches element `outer + inner(point)` for every combination of them.

    `lse[k, i]` in a loop over i, k from an enclosing loop over 4: outer (k, 0), inner (0, i),
    offsets ([0, 1, 2, 3], [0]). Raises NotEvaluable when an index does not split that way
    (`(k * 128 + i) % 256`) or its inner part reads memory.
    """

    def __init__(self, node, indices, shape):
        ana = node.analyzer
        zero = {v: tirx.const(0, str(v.ty.dtype)) for v in node.vars}
        env = dict(zip(node.vars, grid(node.shape)))
        npoints = int(np.prod(node.shape))
        self._vars, self.loop_shape = node.vars, node.shape
        self.indices, self.outer, self.inner, self.values, self.offsets = list(indices), [], [], [], []
        for idx, n in zip(indices, shape):
            outer = ana.simplify(fl.substitute(idx, zero)) if uses(idx, node.vars) else idx
            inner = ana.simplify(idx - outer) if uses(idx, node.vars) else tirx.const(0, "int32")
            others = _free_vars(inner, node.vars)
            if others:
                raise NotEvaluable(f"index {idx} whose {others[0]} does not separate from the loop's variables")
            values = np.broadcast_to(evaluate(inner, env), (npoints,))
            self.outer.append(outer)
            self.inner.append(inner)
            self.values.append(values)
            self.offsets.append(_offsets(outer, int(n) - int(values.max()) - 1, -int(values.min()), ana))

    @property
    def varies(self) -> bool:
        """Whether the nest touches different elements from one run to the next (outer variables)."""
        return any(len(o) > 1 for o in self.offsets)

    @property
    def combinations(self) -> int:
        return int(np.prod([len(o) for o in self.offsets]))

    def elements(self):
        """The touched elements' indices, per dimension: arrays over (point, offset combination),
        point-major, `combinations` consecutive entries per point."""
        combos = [c.reshape(-1) for c in np.meshgrid(*self.offsets, indexing="ij")]
        return [(v[:, None] + c[None, :]).reshape(-1) for v, c in zip(self.values, combos)]

    def representative(self):
        """The indices with each outer part at its first offset: expressions of the nest's variables."""
        return [
            idx if isinstance(o, tirx.IntImm) else inner + tirx.const(int(offs[0]), str(inner.ty.dtype))
            for idx, o, inner, offs in zip(self.indices, self.outer, self.inner, self.offsets)
        ]

    def loop_dims(self):
        """For each dimension: the position of the nest variable that alone indexes it (`frag[.., i, ..]`),
        -1 for a constant or outer-only index, None for anything else."""
        out = []
        for idx in self.indices:
            if not uses(idx, self._vars):
                out.append(-1)
            elif isinstance(idx, ir.Var):
                out.append(next(k for k, v in enumerate(self._vars) if idx.same_as(v)))
            else:
                out.append(None)
        return out


def outer_variables(indices, node) -> list:
    """Names of the variables other than the nest's in `indices` (from loops around it)."""
    names = []
    for idx in indices:
        names += [n for n in _free_vars(idx, node.vars) if n not in names]
    return names


def uses(expr, variables) -> bool:
    """Whether `expr` uses any of `variables`."""
    found = []

    def on_var(v):
        if any(v.same_as(u) for u in variables):
            found.append(v)

    tvm_ffi.structural_walk(expr, [(ir.Var, on_var)])
    return bool(found)


def _free_vars(expr, variables) -> list:
    """Names of the variables of `expr` other than `variables` (buffers aside)."""
    found = []

    def on_var(v):
        if not any(v.same_as(u) for u in variables) and not tirx.is_buffer_var(v):
            found.append(v.name)

    tvm_ffi.structural_walk(expr, [(ir.Var, on_var)])
    return found


def _offsets(outer, high: int, low: int, analyzer) -> np.ndarray:
    """The values of `outer` in [low, high] (those that keep the element in bounds) that the
    analyzer allows (its bounds and stride); the whole range when it knows nothing."""
    if isinstance(outer, tirx.IntImm):
        return np.array([int(outer.value)], dtype=np.int64)
    if high < low:
        return np.array([max(low, 0)], dtype=np.int64)  # out of bounds however it is read: checked elsewhere
    bound = analyzer.const_int_bound(outer)
    lo, hi = max(low, int(bound.min_value)), min(high, int(bound.max_value))
    mod = analyzer.modular_set(outer)
    values = np.arange(lo, hi + 1, dtype=np.int64)
    coeff, base = int(mod.coeff), int(mod.base)
    values = values[values == base] if coeff == 0 else values[(values - base) % coeff == 0]
    return values if values.size else np.arange(low, high + 1, dtype=np.int64)


class Packing:
    """A fragment's indices that are digits of the nest's variables (`[i, j // 2]` in a loop over (i, j)):
    the indices with the digits they leave out (`rest`, here j % 2, of `rest_extent` values) are a
    bijection of the nest's iterations, so element e is touched by the `rest_extent` iterations
    `iteration(e, r)`. As the public TileLang does, a fragment read this way is laid out where those
    iterations run, and a loop following such a fragment runs them on its holders.

    Raises NotEvaluable when the indices are not digits of the nest's variables (outer variables,
    `(i * 128 + j) // 2`, an index past the fragment's shape or not covering it), or leave one of
    them out entirely.
    """

    def __init__(self, node, indices, shape):
        self.vars, self.loop_shape, self.shape = list(node.vars), tuple(node.shape), tuple(int(n) for n in shape)
        dom = {v: ir.Range(0, n) for v, n in zip(self.vars, self.loop_shape)}
        used = {k: [] for k in range(len(self.vars))}
        for idx in indices:
            if _free_vars(idx, self.vars):
                raise NotEvaluable(f"index {idx} uses variables from outside the loop")
            for split in sym.normalize_to_iter_sum(idx, dom).args:
                k = next((k for k, v in enumerate(self.vars) if split.source.source.same_as(v)), None)
                if k is None:
                    raise NotEvaluable(f"index {idx} fuses loop variables")
                used[k].append((int(split.lower_factor), int(split.extent)))
        unused = [v.name for k, v in enumerate(self.vars) if not used[k]]
        if unused:  # (a value read along a row, `m[i]` in a loop over (i, j): `loop_layouts_following`)
            raise NotEvaluable(f"indices {list(indices)} that leave loop variable {unused[0]} out")
        self.rest, self.rest_extent = _left_out_digits(self.vars, self.loop_shape, used)
        imap = IndexMap(self.vars, list(indices) + [self.rest], None)
        try:
            inverse = imap.inverse(list(self.loop_shape))
        except Exception as err:  # noqa: BLE001 (TVM reports a map it cannot invert with a generic error)
            raise NotEvaluable(f"indices {list(indices)} that do not invert: {err}") from None
        self._inverse = inverse
        # Checked over every element: the inverse lands in the loop and the indices cover the fragment.
        if int(np.prod(self.shape)) * self.rest_extent != int(np.prod(self.loop_shape)):
            raise NotEvaluable(f"indices {list(indices)} that do not cover the fragment's shape {list(self.shape)}")
        points = grid(self.shape + (self.rest_extent,))
        env = dict(zip(inverse.initial_indices, points))
        back = [np.broadcast_to(evaluate(e, env), points[0].shape) for e in inverse.final_indices]
        at_back = dict(zip(self.vars, back))
        forward = [np.broadcast_to(evaluate(e, at_back), points[0].shape) for e in imap.final_indices]
        if any((b < 0).any() or (b >= n).any() for b, n in zip(back, self.loop_shape)) or not all(
            np.array_equal(f, p) for f, p in zip(forward, points)
        ):
            raise NotEvaluable(f"indices {list(indices)} that do not cover the fragment's shape {list(self.shape)}")
        self._points = back

    def iteration(self, element, r):
        """The loop point (expressions) of the r-th iteration touching `element` (expressions)."""
        mapping = dict(zip(self._inverse.initial_indices, list(element) + [r]))
        return [fl.substitute(e, mapping) for e in self._inverse.final_indices]

    def points(self):
        """The loop points of every (element, r), arrays over the fragment's shape + (rest_extent,)."""
        return self._points


def _left_out_digits(variables, extents, used):
    """(the digits of `variables` that no split in `used` reads, flattened: the least significant one
    is the last variable's lowest; how many values it takes). `used[k]`: (lower factor, extent) of
    each digit of variable k the indices read."""
    pieces = []
    for k, (v, n) in enumerate(zip(variables, extents)):
        mine, factor = [], 1
        for lower, extent in sorted(used[k]):
            if lower < factor or lower % factor:
                raise NotEvaluable(f"indices that read overlapping digits of {v.name}")
            if lower > factor:
                mine.append((lower // factor, factor))
            factor = lower * extent
        if n % factor:
            raise NotEvaluable(f"indices that read digits of {v.name} past its extent")
        if factor < n:
            mine.append((n // factor, factor))
        pieces += [(v, extent, lower) for extent, lower in reversed(mine)]
    rest, total = tirx.const(0, "int32"), 1
    for v, extent, lower in pieces:
        rest = rest * extent + tirx.floormod(tirx.floordiv(v, lower), extent)
        total *= extent
    ana = sym.Analyzer()
    for v, n in zip(variables, extents):
        ana.bind(v, ir.Range(0, n))
    return ana.simplify(rest), total

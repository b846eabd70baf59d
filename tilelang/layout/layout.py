"""`Layout`: logical index -> physical index of a buffer in memory (shared-memory swizzles, padding).

A layout maps each logical index (i, j, ...) of a tile to a position in a flat physical buffer of
`physical_size` elements. Swizzles permute 16-byte chunks inside each row group so that threads of a
warp reading a column of chunks hit different banks; they are the same permutations as CuTe's
Swizzle<B, M, S> on the linear element offset (B bits of chunk index XORed with B bits of row).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
import tvm_ffi
from tvm import sym, tirx

from tilelang.layout.evaluate import evaluate, grid
from tilelang.layout.fragment import placeholder_vars, substitute  # noqa: F401  (placeholder_vars re-exported)
from tilelang.utils.ir import i32 as _c


@dataclass
class Layout:
    """Logical index (`vars`, over `shape`) -> flat physical offset `forward`."""

    shape: tuple
    vars: list
    forward: object
    physical_size: int
    name: str = "layout"

    def map(self, indices):
        """The physical offset of the element at `indices`."""
        return substitute(self.forward, dict(zip(self.vars, indices)))

    def is_bijective(self) -> bool:
        offsets = evaluate(self.forward, dict(zip(self.vars, grid(self.shape)))).reshape(-1)
        if offsets.min() < 0 or offsets.max() >= self.physical_size:
            return False
        hit = np.zeros(self.physical_size, dtype=bool)  # (a bitmap: np.unique sorts, ~10x slower)
        hit[offsets] = True
        return int(np.count_nonzero(hit)) == offsets.size

    def compose(self, inner: Layout) -> Layout:
        """The layout `x -> self(inner(x))`: `inner` maps this layout's logical space (flattened,
        row-major) from its own logical shape, e.g. a reshape or permutation applied first."""
        if inner.physical_size != math.prod(self.shape):
            raise ValueError(
                f"cannot compose: inner layout reaches {inner.physical_size} elements, "
                f"this layout has {math.prod(self.shape)}"
            )
        coords, rem = [], inner.forward
        for n in reversed(self.shape):
            coords.append(tirx.floormod(rem, _c(n)))
            rem = tirx.floordiv(rem, _c(n))
        coords.reverse()
        forward = sym.Analyzer().simplify(self.map(coords))
        return Layout(tuple(inner.shape), list(inner.vars), forward, self.physical_size, f"{self.name}*{inner.name}")

    def inverse(self) -> Layout:
        """The inverse map, physical offset -> row-major logical offset (a bijective layout only),
        through TVM's IndexMap inverse."""
        from tvm.tirx import IndexMap

        flat = _c(0)
        for v, n in zip(self.vars, self.shape):
            flat = flat * _c(n) + v
        imap = IndexMap(list(self.vars), [self.forward], None).inverse(list(self.shape))
        (src,) = imap.initial_indices
        logical = sym.Analyzer().simplify(substitute(flat, dict(zip(self.vars, imap.final_indices))))
        return Layout((self.physical_size,), [src], logical, math.prod(self.shape), f"inverse({self.name})")

    def inverse_table(self) -> np.ndarray:
        """For each physical offset, the row-major logical offset stored there (-1 if none)."""
        offsets = evaluate(self.forward, dict(zip(self.vars, grid(self.shape)))).reshape(-1)
        table = np.full(self.physical_size, -1, dtype=np.int64)
        table[offsets] = np.arange(offsets.size)
        return table

    def contiguous_run(self) -> int:
        """The largest power of two n dividing the row length such that every n consecutive
        elements of a row starting at a multiple of n stay consecutive in memory (a swizzle's 16-byte
        chunk, a whole row of a linear layout)."""
        flat = evaluate(self.forward, dict(zip(self.vars, grid(self.shape)))).reshape(-1, int(self.shape[-1]))
        n = int(self.shape[-1]) & -int(self.shape[-1])  # the largest power of two dividing the row
        while n > 1:
            runs = flat.reshape(flat.shape[0], -1, n)
            if np.array_equal(runs - runs[:, :, :1], np.broadcast_to(np.arange(n), runs.shape)):
                return n
            n //= 2
        return 1

    def __str__(self) -> str:
        return f"Layout({self.name}, {list(self.shape)} -> {self.physical_size} elements: {self.forward})"


def linear(shape) -> Layout:
    """Row-major, no permutation."""
    vars_ = placeholder_vars(len(shape))
    flat = _c(0)
    for v, n in zip(vars_, shape):
        flat = flat * _c(n) + v
    return Layout(tuple(shape), vars_, flat, math.prod(shape), "linear")


def swizzle(shape, element_bits: int, bits: int) -> Layout:
    """CuTe-style Swizzle<bits, M, S> on the row-major offset, M = log2(16-byte chunk in elements).

    bits = 3, 2, 1: full-bank (128-byte), half-bank (64-byte) and quarter-bank (32-byte) swizzles.
    The XOR keeps each 16-byte chunk contiguous, so vectorized accesses of up to 16 bytes stay one
    access. The chunk index is XORed with the index of the 128-byte line, or, when rows are a
    multiple of 128 bytes, with the row index: then any 8 consecutive rows of one chunk column (an
    ldmatrix read) fall in 8 different bank groups, however wide the row.
    """
    chunk = 128 // element_bits  # elements per 16-byte chunk
    line = shape[-1] if shape[-1] % (chunk * 8) == 0 else chunk * 8
    vars_ = placeholder_vars(len(shape))
    off = _c(0)
    for v, n in zip(vars_, shape):
        off = off * _c(n) + v
    span = 1 << bits
    col = tirx.floormod(tirx.floordiv(off, _c(chunk)), _c(span))
    row = tirx.floormod(tirx.floordiv(off, _c(line)), _c(span))
    swizzled = tirx.bitwise_xor(col, row)
    forward = sym.Analyzer().simplify(off - col * _c(chunk)) + swizzled * _c(chunk)
    names = {3: "full_bank_swizzle", 2: "half_bank_swizzle", 1: "quarter_bank_swizzle"}
    return Layout(tuple(shape), vars_, forward, math.prod(shape), names[bits])


def gmma_panels(shape, element_bits: int, bits: int) -> Layout:
    """The shared-memory layout wgmma reads a tile in: CuTe's canonical GMMA layouts.

    The last dimension (the contiguous one) is cut into panels of `P`
    elements (128, 64 or 32 bytes for bits 3, 2, 1); each panel holds all rows of the tile, one
    row per P elements, with `swizzle(.., bits)` applied inside the panel; panels follow each other,
    and leading dimensions (pipeline stages) stack whole tiles. Inside a panel this is exactly the
    hardware's 128/64/32-byte swizzle when the panel starts on a 1024/512/256-byte boundary.
    """
    *lead, rows, cols = (int(n) for n in shape)
    panel = (128 // element_bits) << bits
    if cols % panel:
        raise ValueError(f"gmma_panels: {cols} columns are not a multiple of the {panel}-element panel")
    inner = swizzle((rows, panel), element_bits, bits)
    vars_ = placeholder_vars(len(shape))
    *lv, r, c = vars_
    tile = _c(0)
    for v, n in zip(lv, lead):
        tile = tile * _c(n) + v
    local = inner.map([r, tirx.floormod(c, _c(panel))])
    forward = tile * _c(rows * cols) + tirx.floordiv(c, _c(panel)) * _c(rows * panel) + local
    names = {3: "gmma_128B", 2: "gmma_64B", 1: "gmma_32B"}
    return Layout(tuple(int(n) for n in shape), vars_, forward, math.prod(shape), names[bits])


def make_full_bank_swizzled_layout(buffer) -> Layout:
    return swizzle(_shape(buffer), _bits(buffer), 3)


def make_half_bank_swizzled_layout(buffer) -> Layout:
    return swizzle(_shape(buffer), _bits(buffer), 2)


def make_quarter_bank_swizzled_layout(buffer) -> Layout:
    return swizzle(_shape(buffer), _bits(buffer), 1)


def make_linear_layout(buffer) -> Layout:
    return linear(_shape(buffer))


def make_swizzled_layout(buffer, k_major: bool = True, allow_pad: bool = True) -> Layout:
    """The widest bank swizzle the buffer's rows allow (128, 64 or 32 bytes), else row-major.

    Example: T.annotate_layout({S_shared: tilelang.layout.make_swizzled_layout(S_shared)})
    """
    shape, element_bits = _shape(buffer), _bits(buffer)
    row_bytes = shape[-1] * element_bits // 8
    rows_needed = 8  # the swizzle pattern spans 8 rows of 16-byte chunks
    total_rows = math.prod(shape) * element_bits // 8 // 128
    for bits, width in ((3, 128), (2, 64), (1, 32)):
        if row_bytes % width == 0 and math.prod(shape) * element_bits // 8 >= width * rows_needed and total_rows >= 0:
            return swizzle(shape, element_bits, bits)
    return linear(shape)


def _shape(buffer):
    return tuple(int(s) for s in buffer.shape)


def _bits(buffer) -> int:
    from tvm import DataType

    return DataType(str(buffer.dtype)).bits


def shared_layout_to_ir(layout: Layout):
    """The layout as IR (an IndexMap, its shape, its physical size): how passes pass it on."""
    from tvm.tirx import IndexMap

    return tvm_ffi.convert(
        [IndexMap(list(layout.vars), [layout.forward], None), list(layout.shape), layout.physical_size]
    )


def shared_layout_from_ir(value) -> Layout:
    imap, shape, size = value
    return Layout(tuple(int(s) for s in shape), list(imap.initial_indices), imap.final_indices[0], int(size))

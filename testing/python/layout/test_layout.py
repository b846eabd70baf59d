"""Shared-memory layouts: swizzles are permutations that spread a column of 16-byte chunks over banks."""

import numpy as np
import pytest
import tvm

from tilelang.layout import layout as sl
from tilelang.layout.evaluate import evaluate


@pytest.mark.parametrize(
    "shape,bits,swizzle_bits",
    [((64, 64), 16, 3), ((32, 32), 32, 3), ((64, 32), 16, 2), ((32, 16), 16, 1), ((128, 128), 8, 3)],
)
def test_swizzle_is_a_permutation(shape, bits, swizzle_bits):
    assert sl.swizzle(shape, bits, swizzle_bits).is_bijective()


@pytest.mark.parametrize("shape,bits", [((64, 64), 3), ((32, 128), 3), ((32, 256), 3), ((128, 32), 2)])
def test_swizzle_spreads_any_8_rows_of_a_chunk_column_over_all_banks(shape, bits):
    """What an ldmatrix reads (8 rows of one 16-byte chunk) is conflict-free, whatever the row width
    (rows of 64, 128, 256 and 512 bytes of fp16)."""
    lay = sl.swizzle(shape, 16, bits)
    for r0 in range(0, shape[0], 8):
        rows = np.arange(r0, r0 + 8)
        for chunk in range(shape[1] // 8):
            offsets = evaluate(lay.forward, {lay.vars[0]: rows, lay.vars[1]: np.full(8, chunk * 8)})
            banks = (offsets * 2 // 16) % 8  # 16-byte bank group of each row's chunk
            assert sorted(banks.tolist()) == list(range(8)), (r0, chunk, banks)


def test_swizzle_keeps_chunks_contiguous():
    lay = sl.swizzle((16, 64), 16, 3)
    for col in range(0, 64, 8):
        offsets = evaluate(lay.forward, {lay.vars[0]: np.full(8, 5), lay.vars[1]: np.arange(col, col + 8)})
        assert np.array_equal(np.diff(offsets), np.ones(7))


class _Buf:
    def __init__(self, shape, dtype):
        self.shape, self.dtype = shape, tvm.DataType(dtype)


@pytest.mark.parametrize(
    "shape,dtype,name",
    [
        ((64, 64), "float16", "full_bank_swizzle"),
        ((64, 32), "float16", "half_bank_swizzle"),
        ((64, 16), "float16", "quarter_bank_swizzle"),
        ((64, 4), "float16", "linear"),
    ],
)
def test_make_swizzled_layout_picks_the_widest_swizzle(shape, dtype, name):
    assert sl.make_swizzled_layout(_Buf(shape, dtype)).name == name


def test_compose_a_transpose_with_a_row_major_layout():
    rows, cols = 4, 6
    row_major = sl.linear((rows, cols))
    vars_ = sl.placeholder_vars(2)
    transpose = sl.Layout((cols, rows), vars_, vars_[1] * cols + vars_[0], rows * cols, "transpose")
    composed = row_major.compose(transpose)
    j, i = np.indices((cols, rows)).reshape(2, -1)
    got = evaluate(composed.forward, {composed.vars[0]: j, composed.vars[1]: i})
    assert np.array_equal(got, i * cols + j)


def test_inverse_of_a_permutation_round_trips():
    lay = sl.Layout((8, 4), sl.placeholder_vars(2), None, 32, "perm")
    i, j = lay.vars
    lay.forward = j * 8 + i  # column-major storage of an 8 x 4 tile
    inv = lay.inverse()
    phys = np.arange(32)
    logical = evaluate(inv.forward, {inv.vars[0]: phys})
    back = evaluate(lay.forward, {i: logical // 4, j: logical % 4})
    assert np.array_equal(back, phys)

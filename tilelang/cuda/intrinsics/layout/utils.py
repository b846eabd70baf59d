"""The public TileLang's helpers over the mma.sync layouts (`tilelang.cuda.intrinsics.layout.utils`):
the ldmatrix row a lane addresses, the accumulator map, and an operand type's atom sizes. The maps
themselves are `mma_layout.py`'s.
"""

from __future__ import annotations

from tilelang.cuda.intrinsics.layout.mma_layout import (
    elements_per_register,
    ldmatrix_row,
    mma_store_32x8_to_shared_16x16_layout,
)
from tilelang.cuda.intrinsics.layout.swizzle import get_swizzle_layout, make_mma_swizzle_layout  # noqa: F401
from tilelang.dtypes import bits as dtype_bits


def get_ldmatrix_offset(matrix, row_idx, col_idx, stride, dtype="float16", transposed: bool = False):
    """(row, column) in the operand tile of the address lane `row_idx` gives to ldmatrix for
    `matrix` ("A" or "B"), plus `col_idx` columns (0: the start of the row). `stride` (the tile's
    row length) is accepted for the public signature; the result is in tile coordinates.

    Errors: UserError for an 8- or 32-bit operand with k as its rows (ldmatrix moves 16-bit words).

    Example: row, col = get_ldmatrix_offset("A", lane, 0, 32, T.float16)
    """
    del stride
    row, col = ldmatrix_row(matrix, row_idx, dtype, transposed)
    return row, col + col_idx


def mma_store_index_map(thread_id, local_id):
    """(row, column) in a 16 x 16 result tile of accumulator `local_id` (0..7) of lane `thread_id`."""
    return mma_store_32x8_to_shared_16x16_layout(thread_id, local_id)


def get_mma_micro_size(dtype):
    """(m, n, k) of the tile one warp multiplies per step with operands of `dtype`: 16 x 16 of the
    result (two m16n8 atoms), k the atom's K (16 for 16-bit types, 32 for 8-bit, 8 for tf32).

    Example: micro_size_x, micro_size_y, micro_size_k = get_mma_micro_size(T.int8)   # (16, 16, 32)
    """
    return 16, 16, 8 * elements_per_register(dtype_bits(dtype))

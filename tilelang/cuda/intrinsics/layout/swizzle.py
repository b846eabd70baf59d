"""The shared-memory swizzle of tiles that ldmatrix reads: `get_swizzle_layout` (the index map) and
`make_mma_swizzle_layout` (a `T.Layout` of a shared buffer), as the public TileLang spells them.

ldmatrix reads eight 16-byte rows at once; stored plainly, rows of 64 or 128 bytes put those eight
chunks in the same few banks. The swizzle keeps each 16-byte chunk whole (ldmatrix and vector
copies still see contiguous chunks) and moves it within its group of `swizzle_bytes / 16` chunks
to chunk XOR (row bits), so the eight rows an ldmatrix reads land in different banks:

    128-byte groups (8 chunks), row r:  chunk c -> c ^ (r % 8)
    64-byte groups  (4 chunks), row r:  chunk c -> c ^ (r % 8 // 2)
    32-byte groups  (2 chunks), row r:  chunk c -> c ^ (r % 8 // 4)
"""

from __future__ import annotations

from tilelang.dtypes import bits as dtype_bits
from tilelang.errors import UserError


def get_swizzle_layout(row_idx, col_idx, row_size, dtype, swizzle_bytes=None):
    """(group, row, column) where element (row_idx, col_idx) of a tile with rows of `row_size`
    elements of `dtype` is stored: the row's chunks are cut in groups of `swizzle_bytes` (default:
    the row's bytes, at most 128), `group` is the element's group and `column` its swizzled place
    within the group. Works on ints and TIR expressions.

    Errors: UserError if the row is not a whole number of 32-byte groups, or of `swizzle_bytes`.

    Example:
        T.Layout((128, 32), lambda i, j: list(get_swizzle_layout(i, j, 32, T.float16)))
    """
    bits = dtype_bits(dtype)
    row_bytes = int(row_size) * bits // 8
    if row_bytes % 32 != 0:
        raise UserError(f"get_swizzle_layout: a row of {row_size} {dtype} is {row_bytes} bytes, not a multiple of 32")
    group_bytes = int(swizzle_bytes) if swizzle_bytes is not None else min(128, row_bytes)
    if group_bytes not in (32, 64, 128) or row_bytes % group_bytes != 0:
        raise UserError(
            f"get_swizzle_layout: swizzle_bytes must be 32, 64 or 128 and divide the row's {row_bytes} bytes, "
            f"got {swizzle_bytes}"
        )
    per_chunk = 128 // bits  # elements in 16 bytes
    chunks = group_bytes // 16  # chunks in a group
    chunk = col_idx // per_chunk
    moved = (chunk % chunks) ^ ((row_idx % 8) // (8 // chunks))
    return chunk // chunks, row_idx, moved * per_chunk + col_idx % per_chunk


def make_mma_swizzle_layout(shared_buf, is_smooth: bool = False):
    """A `T.Layout` for a shared buffer that ldmatrix reads: its last two dimensions swizzled by
    `get_swizzle_layout` when a row is a whole number of 64-byte groups, else (or with `is_smooth`)
    the buffer as it is.

    Example:
        T.annotate_layout({A_shared: make_mma_swizzle_layout(A_shared)})
    """
    from tilelang.language.layouts import Layout

    shape = [int(s) for s in shared_buf.shape]
    if is_smooth or shape[-1] * dtype_bits(shared_buf.dtype) % 512 != 0:
        return Layout(shape, lambda *idx: list(idx))

    def swizzled(*idx):
        return [*idx[:-2], *get_swizzle_layout(idx[-2], idx[-1], shape[-1], shared_buf.dtype)]

    return Layout(shape, swizzled)

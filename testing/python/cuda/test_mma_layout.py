"""tilelang.cuda.intrinsics' index facts on the CPU: the mma.sync register maps, the ldmatrix rows,
the swizzle of the shared tiles, the atom sizes, and the 2:4 sparse metadata facts."""

import numpy as np
import pytest
from tvm import tirx

import tilelang.language as T
from tilelang.cuda.intrinsics import (
    get_ldmatrix_offset,
    get_mma_micro_size,
    get_swizzle_layout,
    make_mma_swizzle_layout,
    mma_store_index_map,
)
from tilelang.cuda.intrinsics.layout import mma_layout
from tilelang.cuda.intrinsics.sparse_layout import GROUP_CONFIG, get_e_factor, get_e_replicate_factor
from tilelang.errors import UserError
from tilelang.layout.evaluate import evaluate, grid


@pytest.mark.parametrize("bits", [8, 16, 32])
@pytest.mark.parametrize("operand", ["a", "b"])
def test_operand_maps_are_inverse_bijections(bits, operand):
    k = 8 * 32 // bits
    to_lane = getattr(mma_layout, f"operand_{operand}_thread_local")
    to_element = getattr(mma_layout, f"operand_{operand}_element")
    seen = set()
    for i in range(16):
        for j in range(k):
            lane, local = to_lane(i, j, bits)
            assert 0 <= lane < 32 and 0 <= local < k // 2
            assert to_element(lane, local, bits) == (i, j)
            seen.add((lane, local))
    assert len(seen) == 16 * k


def test_fp16_a_fragment_is_the_ptx_table():
    # PTX ISA, m16n8k16 .f16 A: a0, a1 at row groupID, columns 2 * threadID_in_group (+1); a2, a3
    # 8 rows down; a4..a7 8 columns right. Lane 6: group 1, position 2.
    assert [mma_layout.operand_a_element(6, i, 16) for i in range(8)] == [
        (1, 4),
        (1, 5),
        (9, 4),
        (9, 5),
        (1, 12),
        (1, 13),
        (9, 12),
        (9, 13),
    ]
    assert mma_layout.shared_16x16_to_mma_32x8_layout_sr_a(9, 13) == (6, 7)


def test_accumulator_map_covers_a_16x16_tile_once():
    cells = {mma_store_index_map(lane, local) for lane in range(32) for local in range(8)}
    assert cells == {(i, j) for i in range(16) for j in range(16)}
    assert mma_store_index_map(5, 3) == (9, 3)  # group 1, position 1; c3: row + 8, column 2t + 1


def _ldmatrix_lane_words(matrix, dtype, transposed, bits):
    """What ldmatrix.x4 hands each lane (operand-tile coordinates of its elements, register order),
    from the rows `get_ldmatrix_offset` addresses: lane 8r + j gives row j of matrix r."""
    per_row = 128 // bits  # elements in 16 bytes
    out = {}
    for lane in range(32):
        elems = []
        for r in range(4):
            g, t = lane // 4, lane % 4
            trans = (matrix == "A" and transposed) or (matrix == "B" and not transposed)
            for e in range(32 // bits):
                if trans:  # the lane gets column g of rows 2t, 2t + 1 of matrix r
                    row0, col0 = get_ldmatrix_offset(matrix, 8 * r + 2 * t + e, 0, 0, dtype, transposed)
                    elems.append((row0, col0 + g))
                else:  # row g of matrix r, its elements t * P ..
                    row0, col0 = get_ldmatrix_offset(matrix, 8 * r + g, 0, 0, dtype, transposed)
                    assert col0 % per_row == 0
                    elems.append((row0, col0 + t * (32 // bits) + e))
        out[lane] = elems
    return out


@pytest.mark.parametrize(
    "dtype,bits,transposed",
    [(T.float16, 16, False), (T.float16, 16, True), (T.int8, 8, False), (T.float32, 32, False)],
)
def test_ldmatrix_rows_fill_the_a_fragment(dtype, bits, transposed):
    words = _ldmatrix_lane_words("A", dtype, transposed, bits)
    for lane, elems in words.items():
        for local, (r, c) in enumerate(elems):
            m, k = (c, r) if transposed else (r, c)  # the stored tile is k x m when transposed
            assert mma_layout.operand_a_element(lane, local, bits) == (m, k)


@pytest.mark.parametrize(
    "dtype,bits,transposed",
    [(T.float16, 16, True), (T.float16, 16, False), (T.int8, 8, True), (T.float32, 32, True)],
)
def test_ldmatrix_rows_fill_two_b_atoms(dtype, bits, transposed):
    words = _ldmatrix_lane_words("B", dtype, transposed, bits)
    for lane, elems in words.items():
        for local, (r, c) in enumerate(elems):
            n, k = (r, c) if transposed else (c, r)  # the stored tile is n x k when transposed
            assert mma_layout.operand_b_element(lane, local, bits) == (n, k)


def test_ldmatrix_cannot_load_8_bit_operands_with_k_as_rows():
    # raised at the call: the traceback shows the user's line
    with pytest.raises(UserError, match="ldmatrix cannot load a 8-bit A with k as its rows"):
        get_ldmatrix_offset("A", 0, 0, 64, T.int8, transposed=True)
    # raised at the call: the traceback shows the user's line
    with pytest.raises(UserError, match="ldmatrix cannot load a 8-bit B"):
        get_ldmatrix_offset("B", 0, 0, 64, T.int8, transposed=False)


def test_micro_sizes_are_the_atoms():
    assert get_mma_micro_size(T.float16) == (16, 16, 16)
    assert get_mma_micro_size(T.int8) == (16, 16, 32)
    assert get_mma_micro_size(T.float32) == (16, 16, 8)


@pytest.mark.parametrize(
    "cols,dtype,group", [(64, T.float16, 8), (32, T.float16, 4), (64, T.int8, 4), (16, T.float32, 4)]
)
def test_swizzle_moves_whole_16_byte_chunks_within_their_group(cols, dtype, group):
    per_chunk = 128 // T.dtype(dtype).bits
    for i in range(16):
        row = [get_swizzle_layout(i, j, cols, dtype) for j in range(cols)]
        assert all(r == i for _, r, _ in row)
        assert sorted(t * cols + c for t, _, c in row) == list(range(cols))  # a permutation of the row
        for j in range(0, cols, per_chunk):  # a chunk stays contiguous, in its group
            t, _, c = row[j]
            assert [row[j + e][2] for e in range(per_chunk)] == list(range(c, c + per_chunk))
            assert c // per_chunk == ((j // per_chunk) % group) ^ (i % 8 // (8 // group))


def test_swizzle_errors():
    # raised at the call: the traceback shows the user's line
    with pytest.raises(UserError, match="a row of 8 float16 is 16 bytes"):
        get_swizzle_layout(0, 0, 8, T.float16)
    # raised at the call: the traceback shows the user's line
    with pytest.raises(UserError, match="swizzle_bytes must be 32, 64 or 128"):
        get_swizzle_layout(0, 0, 32, T.float16, swizzle_bytes=128)


def test_make_mma_swizzle_layout():
    a = tirx.decl_buffer((128, 32), "float16", "A_s", scope="shared.dyn")
    swizzled = make_mma_swizzle_layout(a)
    assert swizzled.is_bijective() and swizzled.physical_size == 128 * 32
    where = evaluate(swizzled.forward, dict(zip(swizzled.vars, grid((128, 32))))).reshape(128, 32)
    # Row 3 of a tile of 64-byte rows: chunk c goes to c ^ (3 // 2) = c ^ 1.
    assert list(where[3, ::8]) == [3 * 32 + 8, 3 * 32, 3 * 32 + 24, 3 * 32 + 16]
    for b in (tirx.decl_buffer((16, 16), "float16", "B_s", scope="shared.dyn"), a):  # 32-byte rows; is_smooth
        plain = make_mma_swizzle_layout(b, is_smooth=b is a)
        flat = evaluate(plain.forward, dict(zip(plain.vars, grid(b.shape))))
        assert np.array_equal(flat.reshape(-1), np.arange(flat.size))


def test_sparse_metadata_facts():
    assert GROUP_CONFIG[T.float16] == (2, 4) and GROUP_CONFIG[T.float] == (1, 2)
    assert get_e_factor(T.float16, T.int16) == 16  # four 4-bit groups of 4 elements
    assert get_e_factor(T.int8, T.int32) == 32
    assert get_e_factor(T.float32, T.int16) == 8
    assert get_e_replicate_factor(T.bfloat16) == 2 and get_e_replicate_factor(T.int8) == 1
    # raised at the call: the traceback shows the user's line
    with pytest.raises(UserError, match="no structured sparsity for float64"):
        get_e_factor(T.float64, T.int16)

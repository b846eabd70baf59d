"""Where each element of an mma.sync operand lives in a warp: the register layouts of the PTX ISA
("Matrix Fragments for mma.m16n8k*"), and the rows ldmatrix reads for them.

Pure index arithmetic on ints or TIR expressions, no IR walking. The macros of
`tilelang.cuda.intrinsics.macro.mma_macro_generator` read operands and write results through these
maps; the swizzle of the shared tiles they read is `tilelang.cuda.intrinsics.layout.swizzle`.

Notation: in a warp, lane l is in group g = l // 4 and has position t = l % 4 in it. A 32-bit
register holds P = 32 / bits elements, so an atom's K is 8 * P (16 for fp16, 32 for int8, 8 for tf32):

    A (16 x K, row-major):  4 registers; register r holds row g + 8 * (r % 2), columns
                            (r // 2) * 4P + t * P + [0, P)
    B (K x 8, seen as 8 rows of K: "n x k"): 2 registers; register r holds row g, columns
                            r * 4P + t * P + [0, P)
    C (16 x 8):             4 accumulators; c[i] at row g + 8 * (i // 2), column 2t + i % 2

The emitter puts two 8-column B atoms (and their C atoms) side by side for a 16-wide tile; the
functions below that take a 16-row B tile count its rows 8..15 as the second atom's.
"""

from __future__ import annotations

from tilelang.cuda.intrinsics.layout.swizzle import get_swizzle_layout, make_mma_swizzle_layout  # noqa: F401
from tilelang.dtypes import bits as dtype_bits
from tilelang.errors import UserError


def elements_per_register(bits: int) -> int:
    if bits not in (8, 16, 32):
        raise UserError(f"mma.sync operands are 8-, 16- or 32-bit elements, got {bits}-bit ones")
    return 32 // bits


# ---- operand element -> (lane, register element) ---------------------------------------------------


def operand_a_thread_local(i, j, bits: int):
    """(lane, local index) of element (row i, column j) of a 16 x K A tile of `bits`-bit elements."""
    p = elements_per_register(bits)
    register = 2 * (j // (4 * p)) + i // 8
    return 4 * (i % 8) + (j % (4 * p)) // p, register * p + j % p


def operand_b_thread_local(i, j, bits: int):
    """(lane, local index) of element (n i, k j) of a 16 x K B tile (two 8-column atoms, n-major)."""
    p = elements_per_register(bits)
    register = 2 * (i // 8) + j // (4 * p)
    return 4 * (i % 8) + (j % (4 * p)) // p, register * p + j % p


# The public TileLang's names of these maps: `sr` is (spatial, reduction) order, the operand not transposed.
def shared_16x8_to_mma_32x4_layout_sr_a(i, j):
    return operand_a_thread_local(i, j, 32)


def shared_16x8_to_mma_32x4_layout_sr_b(i, j):
    return operand_b_thread_local(i, j, 32)


def shared_16x16_to_mma_32x8_layout_sr_a(i, j):
    return operand_a_thread_local(i, j, 16)


def shared_16x16_to_mma_32x8_layout_sr_b(i, j):
    return operand_b_thread_local(i, j, 16)


def shared_16x32_to_mma_32x16_layout_sr_a(i, j):
    return operand_a_thread_local(i, j, 8)


def shared_16x32_to_mma_32x16_layout_sr_b(i, j):
    return operand_b_thread_local(i, j, 8)


# ---- (lane, register element) -> operand element ---------------------------------------------------


def operand_a_element(lane, local, bits: int):
    """(row, column) in the 16 x K A tile of register element `local` of `lane` (the inverse of
    `operand_a_thread_local`)."""
    p = elements_per_register(bits)
    register = local // p
    return lane // 4 + 8 * (register % 2), (register // 2) * 4 * p + (lane % 4) * p + local % p


def operand_b_element(lane, local, bits: int):
    """(n, k) in the 16 x K B tile (two 8-column atoms) of register element `local` of `lane`."""
    p = elements_per_register(bits)
    register = local // p
    return lane // 4 + 8 * (register // 2), (register % 2) * 4 * p + (lane % 4) * p + local % p


def mma_store_32x8_to_shared_16x16_layout(lane, local):
    """(row, column) in a 16 x 16 result tile (two 8-column C atoms) of accumulator `local` (0..7) of `lane`."""
    return 8 * ((local % 4) // 2) + lane // 4, 8 * (local // 4) + 2 * (lane % 4) + local % 2


# ---- the rows ldmatrix reads ---------------------------------------------------------------------


def ldmatrix_row(matrix: str, lane, dtype, transposed: bool):
    """(row, column) of the operand tile in shared memory whose address `lane` gives to an
    ldmatrix.x4 that fills the registers of `matrix` ("A" or "B") in the order above.

    The tile is the operand as stored: A is m x k (k x m when `transposed`), B is n x k when
    `transposed` (the mma's "col" B) and k x n otherwise. ldmatrix moves 16-bit words, so 8-bit
    operands need the k-contiguous form (A not transposed, B transposed); the transposed load
    (`.trans`) is for the 16-bit k x m A and k x n B.

    Errors: UserError for an 8- or 32-bit operand that is not k-contiguous.
    """
    bits = dtype_bits(dtype)
    half_k = 4 * elements_per_register(bits)  # the columns of one 8x8 matrix of 16-bit words
    k_contiguous = transposed if matrix == "B" else not transposed
    if not k_contiguous and bits != 16:
        raise UserError(f"ldmatrix cannot load a {bits}-bit {matrix} with k as its rows; store it k-contiguous")
    m, r = lane // 8, lane % 8  # matrix m of the four, its row r
    if matrix == "A":  # registers: (rows 0-7, k low), (rows 8-15, k low), (rows 0-7, k high), (rows 8-15, k high)
        return (8 * (m // 2) + r, 8 * (m % 2)) if transposed else (8 * (m % 2) + r, (m // 2) * half_k)
    if matrix == "B":  # registers: atom 0 (k low, k high), then atom 1
        return (8 * (m // 2) + r, (m % 2) * half_k) if transposed else (8 * (m % 2) + r, 8 * (m // 2))
    raise UserError(f"matrix must be 'A' or 'B', got {matrix!r}")

"""Facts of 2:4 (and tf32's 1:2) structured sparsity for sparse tensor-core GEMMs (mma.sp): how many
elements a group keeps, and how the metadata that says which ones indexes the dense operand.

A sparse A keeps `kept` nonzeros of every group of `group` consecutive elements along K; the
metadata gives each group's kept positions in 4 bits (two 2-bit indices for 2:4; one 4-bit code for
1:2). Pure Python: the sparse compressor of a kernel and its mma.sp statements read the same table.
"""

from __future__ import annotations

from tilelang.dtypes import bits as dtype_bits
from tilelang.dtypes import dtype
from tilelang.errors import UserError

# Operand type -> (kept, group): 32-bit (tf32) operands are 1:2 sparse, 8- and 16-bit ones 2:4.
GROUP_CONFIG: dict = {
    dtype("float32"): (1, 2),
    dtype("float16"): (2, 4),
    dtype("bfloat16"): (2, 4),
    dtype("int8"): (2, 4),
    dtype("uint8"): (2, 4),
    dtype("float8_e4m3"): (2, 4),
    dtype("float8_e5m2"): (2, 4),
}

_METADATA_BITS_PER_GROUP = 4


def get_e_factor(a_dtype, meta_dtype) -> int:
    """Dense elements of A (along K) that one metadata element of `meta_dtype` describes: its
    4-bit groups times the elements per group (16 for float16 A with int16 metadata).

    Errors: UserError for an A type without structured sparsity.

    Example: meta = T.alloc_local([elem_per_thread // get_e_factor(T.float16, T.int16)], T.int16)
    """
    return (dtype_bits(meta_dtype) // _METADATA_BITS_PER_GROUP) * _group(a_dtype)[1]


def get_e_replicate_factor(a_dtype) -> int:
    """Consecutive threads of a warp that hold the same metadata value in mma.sp: 2 for 16- and
    32-bit operands (a thread pair shares a row's metadata), 1 for 8-bit ones."""
    _group(a_dtype)
    return 1 if dtype_bits(a_dtype) <= 8 else 2


def _group(a_dtype):
    config = GROUP_CONFIG.get(dtype(a_dtype))
    if config is None:
        known = ", ".join(str(d) for d in GROUP_CONFIG)
        raise UserError(f"no structured sparsity for {a_dtype}; sparse operands are one of {known}")
    return config

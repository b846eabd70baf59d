"""`tilelang.language.dtypes`: TileLang's module path for the dtype objects, for code that imports
them from there (`from tilelang.language.dtypes import dtype`). They live in `tilelang/dtypes.py`.
"""

from __future__ import annotations

import torch

from tilelang.dtypes import *  # noqa: F401,F403
from tilelang.dtypes import DTYPES, dtype

# torch dtype -> dtype name, for the torch dtypes that have a tilelang dtype (TileLang's table).
_TORCH_DTYPE_TO_STR = {
    getattr(torch, name): str(dtype(getattr(torch, name)))
    for name in (
        "bool",
        "int8",
        "int16",
        "int32",
        "int64",
        "uint8",
        "uint16",
        "uint32",
        "uint64",
        "float16",
        "bfloat16",
        "float32",
        "float64",
        "float8_e4m3fn",
        "float8_e4m3fnuz",
        "float8_e5m2",
        "float8_e5m2fnuz",
        "float8_e8m0fnu",
        "float4_e2m1fn_x2",
    )
    if hasattr(torch, name)
}


def get_tvm_dtype(value) -> dtype:
    """`value` (any dtype spelling) as a dtype object; TileLang's name for `T.dtype(value)`."""
    return dtype(value)


__all__ = ["dtype", "get_tvm_dtype", *DTYPES]

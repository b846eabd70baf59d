"""`tilelang.language.dtypes`: TileLang's module path for the dtype objects, for code that imports
them from there (`from tilelang.language.dtypes import dtype`). They live in `tilelang/dtypes.py`.
"""

from __future__ import annotations

import torch

from tilelang.dtypes import *  # noqa: F401,F403
from tilelang.dtypes import _FROM_TORCH, _TORCH_NAMES, DTYPES, dtype

# torch dtype -> dtype name, for the torch dtypes that have a tilelang dtype (TileLang's table).
_TORCH_ATTRS = {ours: theirs for theirs, ours in _FROM_TORCH.items()}  # our name -> torch's, where they differ
_TORCH_DTYPE_TO_STR = {
    getattr(torch, _TORCH_ATTRS.get(name, name)): str(dtype(getattr(torch, _TORCH_ATTRS.get(name, name))))
    for name in sorted(_TORCH_NAMES)
    if hasattr(torch, _TORCH_ATTRS.get(name, name))
}


def get_tvm_dtype(value) -> dtype:
    """`value` (any dtype spelling) as a dtype object; TileLang's name for `T.dtype(value)`."""
    return dtype(value)


__all__ = ["dtype", "get_tvm_dtype", *DTYPES]

"""Random inputs for a kernel's parameters: `TensorSupplyType` and `supply_tensor`.

The profiler and the autotuner draw inputs from a kernel's parameter list alone (name, shape,
dtype), so a kernel can be checked and timed without the user writing any set-up code:

    x = supply_tensor(Param("A", (128, 64), "float16"), TensorSupplyType.Randn, device="cuda")

What each kind draws, per dtype family:

    kind      floating point (fp8: drawn in float32, then cast)   integers              bool
    Integer   whole numbers in [-2, 2]                              [-2, 2] ([0, 2] unsigned) random
    Uniform   U(-1, 1)                                              as Integer            random
    Normal    N(0, 1)                                               as Integer            random
    Randn     N(0, 1)                                               as Integer            random
    Zero      0                                                     0                     False
    One       1                                                     1                     True
    Auto      N(0, 1)                                               as Integer            random

Integer tensors never get continuous draws: a value in (-1, 1) cast to an integer is almost always
0, and an all-zero input hides most bugs. Small whole numbers also keep integer sums exact.
Normal and Randn draw the same distribution; both names exist because public TileLang has both.
"""

from __future__ import annotations

import enum


class TensorSupplyType(enum.Enum):
    """How the profiler fills a kernel's inputs (see the module docstring for the exact draws)."""

    Integer = 1
    Uniform = 2
    Normal = 3
    Randn = 4
    Zero = 5
    One = 6
    Auto = 7


_FLOATS = {"float16", "bfloat16", "float32", "float64", "float8_e4m3fn", "float8_e5m2"}
_UNSIGNED = {"uint8", "uint16", "uint32", "uint64"}
_SIGNED = {"int8", "int16", "int32", "int64"}


def supply_tensor(param, supply_type: TensorSupplyType, device="cuda"):
    """A fresh tensor for `param` (anything with `name`, `shape` and a dtype string `dtype`).

    Raises:
        ValueError: if a dimension of the parameter is not a fixed integer (a dynamic dimension
            has no size to draw; pass the inputs yourself), or its dtype has no torch counterpart.
    """
    import torch

    shape = tuple(param.shape)
    if not all(isinstance(d, int) for d in shape):
        raise ValueError(
            f"parameter '{param.name}' has shape {list(shape)}, which is not fixed; "
            "pass the input tensors yourself (input_tensors=...)"
        )
    dtype = param.dtype
    torch_dtype = getattr(torch, dtype, None)
    if not isinstance(torch_dtype, torch.dtype):
        raise ValueError(f"parameter '{param.name}' has dtype {dtype}, which torch cannot hold")
    kind = TensorSupplyType(supply_type)

    if kind is TensorSupplyType.Zero:
        return torch.zeros(shape, device=device).to(torch_dtype)
    if kind is TensorSupplyType.One:
        return torch.ones(shape, device=device).to(torch_dtype)
    if dtype == "bool":
        return torch.randint(0, 2, shape, device=device).to(torch.bool)
    if dtype in _UNSIGNED:
        # Drawn as int64: torch has no randint for the wider unsigned types.
        return torch.randint(0, 3, shape, device=device).to(torch_dtype)
    if dtype in _SIGNED or kind is TensorSupplyType.Integer:
        return torch.randint(-2, 3, shape, device=device).to(torch_dtype)
    if dtype not in _FLOATS:
        raise ValueError(f"parameter '{param.name}' has dtype {dtype}; the profiler cannot draw inputs for it")
    # Floating point: drawn in float32 (float64 keeps its precision) and cast, since torch cannot
    # sample float8 directly.
    base = torch.float64 if dtype == "float64" else torch.float32
    if kind is TensorSupplyType.Uniform:
        values = torch.empty(shape, device=device, dtype=base).uniform_(-1.0, 1.0)
    else:  # Normal, Randn, Auto
        values = torch.randn(shape, device=device, dtype=base)
    return values.to(torch_dtype)

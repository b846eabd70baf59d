"""Random inputs for a kernel's parameters: `TensorSupplyType` and `supply_tensor`.

The profiler and the autotuner draw inputs from a kernel's parameter list alone (name, shape,
dtype), so a kernel can be checked and timed without the user writing any set-up code:

    x = supply_tensor(Param("A", (128, 64), "float16"), TensorSupplyType.Randn, device="cuda")

What each kind draws, per dtype family. The floating-point draws are public TileLang's, so the
tolerances written for its examples hold here (including Normal's mean of -1, which it has):

    kind     float16, bfloat16, float32  float64         float8             int / uint       bool
    Auto     U(-1, 1)                    whole [-2, 2]   whole [-128, 128]  [-2, 2] / [0, 2] random
    Integer  whole [-2, 2]               whole [-2, 2]   whole [-128, 128]  [-2, 2] / [0, 2] random
    Uniform  U(-1, 1)                    U(-1, 1)        U(-1, 1)           [-2, 2] / [0, 2] random
    Normal   N(-1, 1)                    N(-1, 1)        N(-1, 1)           [-2, 2] / [0, 2] random
    Randn    N(0, 1)                     N(0, 1)         N(0, 1)            [-2, 2] / [0, 2] random
    Zero     0                           0               0                  0                False
    One      1                           1               1                  1                True

Integer tensors never get continuous draws: a value in (-1, 1) cast to an integer is almost always
0, and an all-zero input hides most bugs. Small whole numbers also keep integer sums exact.
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
_FLOAT8 = {"float8_e4m3fn", "float8_e5m2"}
_UNSIGNED = {"uint8", "uint16", "uint32", "uint64"}
_SIGNED = {"int8", "int16", "int32", "int64"}


def supply_tensor(param, supply_type: TensorSupplyType, device="cuda", sizes: dict | None = None):
    """A fresh tensor for `param` (anything with a `shape` and a `dtype`, and a `name` for errors).

    Args:
        sizes: values of the dynamic dimensions ({"m": 2048}); a dimension that is a symbol or an
            expression of symbols ("m * 2") takes its size from them.

    Raises:
        ValueError: if a dimension of the parameter is not fixed and `sizes` does not give it (a
            dynamic dimension has no size to draw), or its dtype has no torch counterpart.
    """
    import torch

    from tilelang.dtypes import canonical

    name = getattr(param, "name", "?")
    kind = getattr(param, "kind", "tensor")
    if kind != "tensor":  # `n: T.int32` / `p: T.ptr(...)`: a value only the caller knows
        raise ValueError(
            f"parameter '{name}' is a {kind} ({param.dtype}), not a tensor: the profiler cannot choose its "
            f"value; pass the arguments yourself (profiler.do_bench(input_tensors=[...]), or time kernel(...) "
            f"with tilelang.profiler.do_bench)"
        )
    shape = _fixed_shape(param, sizes)
    try:
        dtype = canonical(param.dtype)
    except TypeError:
        dtype = str(param.dtype)
    torch_dtype = getattr(torch, dtype, None)
    if not isinstance(torch_dtype, torch.dtype):
        raise ValueError(f"parameter '{name}' has dtype {dtype}, which torch cannot hold")
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
    if dtype in _SIGNED:
        return torch.randint(-2, 3, shape, device=device).to(torch_dtype)
    if dtype not in _FLOATS:
        raise ValueError(f"parameter '{name}' has dtype {dtype}; the profiler cannot draw inputs for it")
    if kind in (TensorSupplyType.Auto, TensorSupplyType.Integer):
        if dtype in _FLOAT8:  # the int8 range, rounded to float8: public TileLang's draw
            return torch.randint(-128, 128, shape, device=device).to(torch_dtype)
        if kind is TensorSupplyType.Integer or dtype == "float64":
            return torch.randint(-2, 3, shape, device=device).to(torch_dtype)
    # Drawn in float32 (float64 keeps its precision) and cast: torch cannot sample float8 directly.
    base = torch.float64 if dtype == "float64" else torch.float32
    values = torch.empty(shape, device=device, dtype=base)
    if kind in (TensorSupplyType.Auto, TensorSupplyType.Uniform):
        values.uniform_(-1.0, 1.0)
    elif kind is TensorSupplyType.Normal:
        values.normal_(-1.0, 1.0)  # mean -1: public TileLang's Normal, which its tolerances assume
    else:  # Randn
        values.normal_(0.0, 1.0)
    return values.to(torch_dtype)


def _fixed_shape(param, sizes: dict | None) -> tuple:
    """The parameter's shape, its symbols sized from `sizes` (by the parameter's `concrete_shape`)."""
    name, shape = getattr(param, "name", "?"), tuple(param.shape)
    if all(isinstance(d, int) for d in shape):
        return shape
    if sizes and hasattr(param, "concrete_shape"):
        try:
            return tuple(param.concrete_shape(sizes))
        except KeyError as missing:
            raise ValueError(
                f"parameter '{name}' has shape {list(shape)}; the sizes given ({sizes}) do not say "
                f"what {missing.args[0]} is"
            ) from None
    raise ValueError(
        f"parameter '{name}' has shape {list(shape)}, which is not fixed; pass the input tensors "
        "yourself (input_tensors=...), or the sizes of its dynamic dimensions "
        "(dynamic_symbolic_constraints={...})"
    )

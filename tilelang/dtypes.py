"""Data types of the T.* language: names, objects and their conversions.

A dtype can be given as a string ("float16", "float" for float32), as a `T.float16`-style object, as a
`tvm.DataType` or as a `torch.dtype`; everything inside the compiler uses the canonical string.
"""

from __future__ import annotations

from tvm.script import tirx as _tirx

# Public names, as TileLang spells them. Each is TVM's dtype constructor, so `T.float16(1.5)` still
# builds a constant, and `T.alloc_shared(shape, T.float16)` reads it as a dtype.
float16 = _tirx.float16
bfloat16 = _tirx.bfloat16
float32 = _tirx.float32
float64 = _tirx.float64
int8 = _tirx.int8
int16 = _tirx.int16
int32 = _tirx.int32
int64 = _tirx.int64
uint8 = _tirx.uint8
uint16 = _tirx.uint16
uint32 = _tirx.uint32
uint64 = _tirx.uint64
float8_e4m3fn = _tirx.float8_e4m3fn
float8_e5m2 = _tirx.float8_e5m2
boolean = _tirx.boolean

_ALIASES = {
    "float": "float32",
    "half": "float16",
    "double": "float64",
    "int": "int32",
    "bool": "bool",
    "float8_e4m3": "float8_e4m3fn",
    "e4m3_float8": "float8_e4m3fn",
    "e5m2_float8": "float8_e5m2",
}

_TORCH_NAMES = {
    "float16": "float16",
    "bfloat16": "bfloat16",
    "float32": "float32",
    "float64": "float64",
    "int8": "int8",
    "int16": "int16",
    "int32": "int32",
    "int64": "int64",
    "uint8": "uint8",
    "uint16": "uint16",
    "uint32": "uint32",
    "uint64": "uint64",
    "bool": "bool",
    "float8_e4m3fn": "float8_e4m3fn",
    "float8_e5m2": "float8_e5m2",
}


def canonical(dtype) -> str:
    """Return the canonical dtype string for any accepted dtype spelling.

    Raises:
        TypeError: if `dtype` is not a dtype in any accepted form.
    """
    if isinstance(dtype, str):
        return _ALIASES.get(dtype, dtype)
    name = getattr(dtype, "_dtype_str", None)
    if isinstance(name, str):  # TVM's DtypeConstructor, e.g. T.float16
        return _ALIASES.get(name, name)
    if dtype is boolean:
        return "bool"
    mod = type(dtype).__module__
    if mod.startswith("torch"):
        text = str(dtype).removeprefix("torch.")
        if text in _TORCH_NAMES:
            return _TORCH_NAMES[text]
    if type(dtype).__name__ == "DataType":
        return _ALIASES.get(str(dtype), str(dtype))
    raise TypeError(f"expected a dtype such as 'float16' or T.float16, got {dtype!r}")


def to_torch(dtype: str):
    """The torch dtype of a canonical dtype string."""
    import torch

    return getattr(torch, canonical(dtype))


def bits(dtype: str) -> int:
    """Width of one element in bits."""
    import tvm

    return tvm.DataType(canonical(dtype)).bits

"""Scalar expression helpers whose dtype argument accepts every dtype spelling (`"float"`, `T.float16`).

TVM's own versions take only dtype strings; TileLang kernels also pass dtype objects.
"""

from __future__ import annotations

from tvm import tirx
from tvm.script import tirx as _script

from tilelang.dtypes import canonical


def Cast(dtype, value):
    """`value` converted to `dtype`. Example: T.Cast("float32", A_shared[i, j])"""
    return tirx.Cast(canonical(dtype), value)


def cast(value, dtype):
    """`value` converted to `dtype` (argument order of TVM's `cast`)."""
    return tirx.Cast(canonical(dtype), value)


def infinity(dtype):
    """Positive infinity of a float dtype. Example: T.fill(m, -T.infinity("float32"))"""
    return _script.infinity(canonical(dtype))


def max_value(dtype):
    """The largest finite value of `dtype`."""
    return _script.max_value(canonical(dtype))


def min_value(dtype):
    """The smallest finite value of `dtype`."""
    return _script.min_value(canonical(dtype))


def reinterpret(value, dtype):
    """The bits of `value` read as `dtype` (same total width). TileLang's argument order; TVM's
    `T.reinterpret(dtype, value)` is accepted too (TileLang still takes it, with a deprecation).

    Example: bits = T.reinterpret(x, T.uint32)   # x a float32
    """
    if _is_dtype(value) and not _is_dtype(dtype):
        value, dtype = dtype, value
    return tirx.reinterpret(canonical(dtype), value)


def _is_dtype(x) -> bool:
    return isinstance(x, str) or hasattr(x, "_dtype_str") or type(x).__module__.startswith("torch")

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

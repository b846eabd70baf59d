"""Arithmetic and comparisons of fp8 values in float32, right before the CUDA code generator.

cuda_fp8.h gives `__nv_fp8_e4m3` / `__nv_fp8_e5m2` conversions but no operators, and TVM prints an
fp8 operation as the C operator: `a + b` matches nothing, and `a != b` is ambiguous (each side
converts to float, half and bfloat16 alike), so a kernel that compares an fp8 element with 0 (a 2:4
sparsity compressor) or scales one did not compile. Each such operation now computes on the values
converted to float32, which is exact, and an arithmetic result is rounded back to its fp8 type
(once per operation, as fp8 arithmetic would round):

    a != T.float8_e4m3fn(0)  ->  T.Cast("float32", a) != T.Cast("float32", T.float8_e4m3fn(0))
    a * b                    ->  T.Cast("float8_e4m3fn", T.Cast("float32", a) * T.Cast("float32", b))

Vectors keep their lanes (float32xN); `vectors.spell` then spells their fp8 casts.
"""

from __future__ import annotations

import tvm_ffi
from tvm import DataType, ir, tirx

FP8 = ("float8_e4m3fn", "float8_e5m2")
_ARITHMETIC = (tirx.Add, tirx.Sub, tirx.Mul, tirx.Div, tirx.Min, tirx.Max)
_COMPARISONS = (tirx.EQ, tirx.NE, tirx.LT, tirx.LE, tirx.GT, tirx.GE)


def _fp8(expr) -> DataType | None:
    dtype = DataType(str(expr.ty.dtype))
    return dtype if str(dtype.with_lanes(1)) in FP8 else None


def _as_float32(expr, lanes: int):
    return tirx.Cast(str(DataType("float32").with_lanes(lanes)), expr)


def _in_float32(node):
    dtype = _fp8(node.a)
    if dtype is None:
        return node
    op = type(node)(_as_float32(node.a, dtype.lanes), _as_float32(node.b, dtype.lanes))
    return op if isinstance(node, _COMPARISONS) else tirx.Cast(str(dtype), op)


def compute_in_float32(mod: ir.IRModule) -> ir.IRModule:
    """The device module with each fp8 operation computed in float32 (see the module doc)."""
    kinds = _ARITHMETIC + _COMPARISONS
    funcs = {gv: tvm_ffi.structural_map(f, [(kinds, _in_float32)]) for gv, f in mod.functions.items()}
    return ir.IRModule(funcs, attrs=mod.attrs)

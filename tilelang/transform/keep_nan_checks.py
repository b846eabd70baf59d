"""Pass `keep_nan_checks`: `x != x` and `x == x` on floating-point values become `T.isnan(x)` and
`not T.isnan(x)`, before any simplification.

`x != x` is the usual way to test for NaN (true only for NaN), but TVM's simplifier folds it to
`False` (and `x == x` to `True`) whatever the type, so a kernel testing its input for NaN that way
would silently get the wrong answer on NaN. Both spellings keep their IEEE meaning here.

Before:  Y[i] = T.if_then_else(X[i] != X[i], 1, 0)
After:   Y[i] = T.if_then_else(T.isnan(X[i]), 1, 0)     (16-bit floats through float32)

(TVM spells isnan of a float32 as `x != x` itself; it is the simplifier's rewrite of the user's
comparison, before anything else, that loses it.)

Runs first in both pipelines (GPU and CPU). Requires nothing; guarantees no float comparison of an
expression with itself is left.
"""

from __future__ import annotations

import tvm
import tvm_ffi
from tvm import tirx


def _is_float(expr) -> bool:
    return tvm.DataType(str(expr.ty.dtype)).type_code in (tvm.DataTypeCode.FLOAT, tvm.DataTypeCode.BFLOAT)


def keep_nan_checks(func: tirx.PrimFunc) -> tirx.PrimFunc:
    def on_cmp(node):
        if not _is_float(node.a) or not tvm_ffi.structural_equal(node.a, node.b):
            return node
        value = node.a
        if tvm.DataType(str(value.ty.dtype)).bits < 32:  # (TVM's isnan takes 32- and 64-bit floats)
            value = tirx.Cast("float32", value)
        nan = tirx.isnan(value)
        return nan if isinstance(node, tirx.NE) else tirx.Not(nan)

    body = tvm_ffi.structural_map(func.body, [((tirx.NE, tirx.EQ), on_cmp)], order="post")
    return func if body.same_as(func.body) else func.with_body(body)

"""Numeric evaluation of index expressions over whole tiles at once (numpy).

Layout questions with constant shapes (is this map one-to-one? which threads share a row? does a
loop run each iteration on a thread that holds the element?) are answered exactly by evaluating the
index expressions at every point of the tile. An expression is translated once into a numpy
function; a 128 x 256 tile evaluates in well under a millisecond.
"""

from __future__ import annotations

import numpy as np
from tvm import ir, tirx

_BINARY = {
    tirx.Add: "({a} + {b})",
    tirx.Sub: "({a} - {b})",
    tirx.Mul: "({a} * {b})",
    tirx.FloorDiv: "({a} // {b})",
    tirx.FloorMod: "({a} % {b})",
    tirx.Min: "np.minimum({a}, {b})",
    tirx.Max: "np.maximum({a}, {b})",
    tirx.LT: "({a} < {b})",
    tirx.LE: "({a} <= {b})",
    tirx.GT: "({a} > {b})",
    tirx.GE: "({a} >= {b})",
    tirx.EQ: "({a} == {b})",
    tirx.NE: "({a} != {b})",
    tirx.And: "np.logical_and({a}, {b})",
    tirx.BitwiseXor: "({a} ^ {b})",
    tirx.BitwiseAnd: "({a} & {b})",
    tirx.BitwiseOr: "({a} | {b})",
    tirx.Or: "np.logical_or({a}, {b})",
}


class NotEvaluable(Exception):
    """The expression uses something other than integer index arithmetic."""


def _source(expr, names: dict) -> str:
    if isinstance(expr, ir.Var):
        for var, name in names.items():
            if var.same_as(expr):
                return name
        raise NotEvaluable(f"free variable {expr.name}")
    if isinstance(expr, (tirx.IntImm,)):
        return repr(int(expr.value))
    if isinstance(expr, int):
        return repr(expr)
    kind = type(expr)
    if kind in _BINARY:
        return _BINARY[kind].format(a=_source(expr.a, names), b=_source(expr.b, names))
    if isinstance(expr, tirx.Not):
        return f"np.logical_not({_source(expr.a, names)})"
    if isinstance(expr, tirx.Select):
        return (
            f"np.where({_source(expr.condition, names)}, {_source(expr.true_value, names)}, "
            f"{_source(expr.false_value, names)})"
        )
    if isinstance(expr, tirx.Cast):
        return _source(expr.value, names)
    raise NotEvaluable(f"cannot evaluate {type(expr).__name__}: {expr}")


def compile_expr(expr, variables):
    """A numpy function of `variables` (in order) computing `expr` element-wise."""
    names = {v: f"v{k}" for k, v in enumerate(variables)}
    src = _source(expr, names)
    fn = eval(f"lambda {', '.join(names.values()) or '_unused=None'}: {src}", {"np": np})  # noqa: S307
    return fn


def evaluate(expr, bindings: dict):
    """`expr` evaluated with each Var key of `bindings` set to an integer array (broadcast together)."""
    variables = list(bindings)
    fn = compile_expr(expr, variables)
    arrays = [np.asarray(bindings[v], dtype=np.int64) for v in variables]
    out = fn(*arrays) if arrays else fn()
    shape = np.broadcast_shapes(*[a.shape for a in arrays]) if arrays else ()
    return np.broadcast_to(np.asarray(out, dtype=np.int64), shape)


def grid(shape):
    """Index arrays of every point of `shape` (like np.indices, flattened per dimension)."""
    return [a.reshape(-1) for a in np.indices(tuple(int(s) for s in shape), dtype=np.int64)]

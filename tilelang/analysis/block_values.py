"""Reading a lowered kernel for the barrier-protocol interpreter (`tilelang.analysis.barrier_protocol`):
the device calls it makes, and the integer values of its expressions for one block and one warp
(loop counters, stage indices, barrier parities, shared-memory offsets).

A device call is read as (name, template parameters, arguments), `tl::wgmma_ss<64, 64, 16, ...>(a,
b, ...)` as ("tl::wgmma_ss", (64, 64, 16, ...), [a, b, ...]), whether the IR holds it as one of
`tilelang.intrinsics` (template parameters as integer arguments) or as a plain extern call.

An environment `env` binds the thread and block indices, loop variables and `Bind`s met so far
(TIR variables to int32 constants), the block's `rank` in its cluster, and integer registers (local
buffer elements such as a stage counter, keyed by `register(...)`). A value that depends on data (a
float compare, a global load) cannot be computed: `value` raises ProtocolError.
"""

from __future__ import annotations

import zlib

from tvm import ir, tirx

from tilelang.analysis.block_state import ProtocolError
from tilelang.intrinsics import call_name, device_call  # noqa: F401  (read here and by the interpreter)

_BINARY = {
    "Add": lambda a, b: a + b,
    "Sub": lambda a, b: a - b,
    "Mul": lambda a, b: a * b,
    "FloorDiv": lambda a, b: a // b,
    "FloorMod": lambda a, b: a % b,
    "Div": lambda a, b: int(a / b),
    "Mod": lambda a, b: a - b * int(a / b),
    "Min": min,
    "Max": max,
    "EQ": lambda a, b: int(a == b),
    "NE": lambda a, b: int(a != b),
    "LT": lambda a, b: int(a < b),
    "LE": lambda a, b: int(a <= b),
    "GT": lambda a, b: int(a > b),
    "GE": lambda a, b: int(a >= b),
    "And": lambda a, b: int(bool(a) and bool(b)),
    "Or": lambda a, b: int(bool(a) or bool(b)),
    "BitwiseAnd": lambda a, b: a & b,
    "BitwiseOr": lambda a, b: a | b,
    "BitwiseXor": lambda a, b: a ^ b,
    "RShift": lambda a, b: a >> b,
    "LShift": lambda a, b: a << b,
}


def value(expr, env) -> int:
    """The integer value of an index expression, its variables bound in `env`."""
    kind = type(expr).__name__
    if isinstance(expr, tirx.IntImm):
        return int(expr.value)
    if isinstance(expr, ir.Var):
        for k, v in env.items():
            if isinstance(k, ir.Var) and k.same_as(expr):
                return int(v.value)
        raise ProtocolError(f"'{expr.name}' is not known for one block")
    if kind in _BINARY:
        return _BINARY[kind](value(expr.a, env), value(expr.b, env))
    if kind == "Not":
        return int(not value(expr.a, env))
    if kind == "Cast":
        return value(expr.value, env)
    if kind == "Select":
        return value(expr.true_value if value(expr.condition, env) else expr.false_value, env)
    if isinstance(expr, tirx.Ramp):  # vectors (shared-memory indices): their first lane
        return value(expr.base, env)
    if isinstance(expr, tirx.Broadcast):
        return value(expr.value, env)
    if isinstance(expr, ir.Call) and call_name(expr) == "tl::cluster_rank":
        return env["rank"]
    if isinstance(expr, ir.Call) and getattr(expr.op, "name", "") == "prim.if_then_else":
        return value(expr.args[1] if value(expr.args[0], env) else expr.args[2], env)
    if isinstance(expr, ir.TensorLoad) and register(expr.source, expr.indices, env) in env:
        return env[register(expr.source, expr.indices, env)]
    if isinstance(expr, ir.TensorLoad) and expr.source.scope() == "global" and str(expr.dtype) == "bool":
        return _mask_bit(expr, env)
    raise ProtocolError(f"cannot evaluate {expr} for one block")


def _mask_bit(load, env) -> int:
    """A boolean read from a global tensor (a block-sparse mask): a bit drawn from the element's
    index and the run's seed (`env["seed"]`), the same for every warp, so each run checks the
    protocol under one random mask."""
    key = f"{load.source.name}{[value(i, env) for i in load.indices]}{env.get('seed', 0)}"
    return zlib.crc32(key.encode()) & 1


def register(buffer, indices, env):
    """The env key of an integer register (a local buffer element, such as a stage counter)."""
    return ("register", buffer.name, tuple(value(i, env) for i in indices))


def is_shared(buffer) -> bool:
    return str(buffer.scope()).startswith("shared")


def lanes(index) -> int:
    return int(index.ty.dtype.lanes)


def shared_at(ptr_or_load, env):
    """(buffer, first byte) of a shared-memory element (`buf[i]` or `address_of(buf[i])`), or None
    (a vector index counts from its first lane)."""
    load = ptr_or_load.args[0] if isinstance(ptr_or_load, ir.Call) else ptr_or_load
    if not isinstance(load, ir.TensorLoad) or not is_shared(load.source):
        return None
    return load.source, value(load.indices[-1], env) * load.source.dtype.bits // 8


def barrier_key(ptr, env):
    """(buffer name, index) of an `address_of(buf[i])` barrier pointer."""
    load = ptr.args[0]
    return load.source.name, value(load.indices[0], env)

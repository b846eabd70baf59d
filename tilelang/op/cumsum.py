"""`T.cumsum(src, dst=None, dim=0, reverse=False)`: inclusive prefix sum of a shared tile along `dim`.

Lowering: the lines along `dim` are spread over the threads; each thread scans its lines serially
(a tile's lines are independent, so no synchronization is needed inside the scan).
"""

from __future__ import annotations

import math

from tvm import tirx

from tilelang.language.diagnostics import UserError
from tilelang.op import base
from tilelang.utils.ir import seq

NAME = "cumsum"


def cumsum(src, dst=None, dim: int = 0, reverse: bool = False):
    """dst[..., k, ...] = sum of src[..., 0..k, ...] along `dim` (from the end when `reverse`).

    Errors: UserError unless src and dst are shared tiles of one shape.

    Example: T.cumsum(S_shared, dim=1)
    """
    s = base.to_region(src, "T.cumsum source")
    d = base.to_region(dst if dst is not None else src, "T.cumsum destination")
    for r in (s, d):
        if r is None or r.buffer.scope() not in ("shared.dyn", "shared"):
            raise UserError("T.cumsum works on shared tiles; copy a fragment to a shared tile first")
    shape = [int(x) for x in s.buffer.shape]
    if shape != [int(x) for x in d.buffer.shape]:
        raise UserError(f"T.cumsum: '{s.name}' has shape {shape} but '{d.name}' has shape "
                        f"{[int(x) for x in d.buffer.shape]}")
    if not -len(shape) <= dim < len(shape):
        raise UserError(f"T.cumsum: dim {dim} is out of range for the {len(shape)}-d tile '{s.name}'")
    return base.make_call(NAME, [s.to_ir(), d.to_ir(), tirx.const(dim % len(shape), "int32"),
                                 tirx.const(int(bool(reverse)), "int32")])


def lower(call, ctx, span=None) -> tirx.Stmt:
    src = base.Region.from_ir(call.args[0]).buffer
    dst = base.Region.from_ir(call.args[1]).buffer
    dim, reverse = int(call.args[2].value), bool(int(call.args[3].value))
    shape = [int(x) for x in src.shape]
    other = [n for k, n in enumerate(shape) if k != dim]
    lines = math.prod(other)
    o, k = tirx.Var("o", "int32"), tirx.Var("k", "int32")
    line = o * ctx.num_threads + ctx.thread
    coords, rem = [], line
    for n in reversed(other):
        coords.append(tirx.floormod(rem, n))
        rem = tirx.floordiv(rem, n)
    coords.reverse()
    pos = (shape[dim] - 1 - k) if reverse else k
    idx = list(coords)
    idx.insert(dim, pos)
    dtype = str(dst.dtype)
    running = tirx.decl_buffer((1,), dtype, "running", scope="local")
    value = tirx.BufferLoad(src, idx)
    if str(src.dtype) != dtype:
        value = tirx.Cast(dtype, value)
    body = seq([
        tirx.AllocBuffer(running),
        tirx.BufferStore(running, tirx.const(0, dtype), [0]),
        tirx.For(k, 0, shape[dim], tirx.ForKind.SERIAL, seq([
            tirx.BufferStore(running, tirx.BufferLoad(running, [0]) + value, [0]),
            tirx.BufferStore(dst, tirx.BufferLoad(running, [0]), idx),
        ])),
    ])
    if lines % ctx.num_threads:
        body = tirx.IfThenElse(line < lines, body, None)
    rounds = (lines + ctx.num_threads - 1) // ctx.num_threads
    return tirx.For(o, 0, rounds, tirx.ForKind.SERIAL, body)

"""Pass `pack_fp4_tensors`: tensors and tiles of 4-bit floats (`T.float4_e2m1fn`) become bytes.

TVM 0.27's code generator has no working form of 4-bit buffers (it reads them two to a byte but
stores a whole byte per value, and stops on vector element loads of them). Here:

  * a tile (shared, local, fragment registers) of fp4 holds one value per byte, its 4-bit code
    in the low nibble (`tl::fp4_e2m1_from_float` rounds to it, `tl::fp4_e2m1_to_float` reads it);
  * a global tensor of fp4 of logical shape (..., N) is stored as torch's float4_e2m1fn_x2 stores
    it: (..., N / 2) bytes, element 2k in the low nibble of byte k, 2k + 1 in the high one. The
    kernel's parameter becomes those bytes (the launcher passes the torch tensor's uint8 view). A store
    writes whole bytes: it must sit in a loop over pairs of consecutive values (a vectorized copy
    of an even number of columns, as `T.copy(tile, tensor[...])` lowers to), which becomes a loop
    over the bytes, each written once with both of its values.

    for v in T.vectorized(8):                          for v in T.unroll(4):
        Q[r, c + v] = Y_s[r2, c2 + v]          ->          Q[r, c // 2 + v] =
                                                               Y_s[r2, c2 + 2 v] | Y_s[r2, c2 + 2 v + 1] << 4

Loops that convert values (calls per lane) or unpack bytes run unrolled, not as vectors.

Runs after lower_tile_ops (tiles are per-thread buffers, loops have their vector widths), before
TVM's passes. Requires: fp4 values are only stored, copied and converted (`T.Cast`). Guarantees: no
buffer of float4_e2m1fn remains; an fp4 parameter is a uint8 tensor of the halved shape.
"""

from __future__ import annotations

import tvm_ffi
from tvm import ir, sym, tirx

from tilelang.errors import UserError, at_span
from tilelang.layout.fragment import substitute
from tilelang.transform.common import collect
from tilelang.utils.ir import const_int, first_use_span, touches

FP4 = "float4_e2m1fn"
TO_CODE = "tl::fp4_e2m1_from_float"
TO_FLOAT = "tl::fp4_e2m1_to_float"


def _is_fp4(x) -> bool:
    return str(x) == FP4


def _u8(value: int):
    return tirx.const(value, "uint8")


class _Rewriter:
    def __init__(self, tiles: dict, tensors: dict):
        self.tiles = tiles  # fp4 tile -> uint8 tile of codes (same shape and scope)
        self.tensors = tensors  # fp4 global tensor -> the uint8 tensor of its bytes

    def code(self, expr, span=None):
        """The 4-bit code (uint8) of an fp4-typed expression."""
        if isinstance(expr, ir.TensorLoad) and expr.source in self.tiles:
            return tirx.BufferLoad(self.tiles[expr.source], list(expr.indices))
        if isinstance(expr, ir.TensorLoad) and expr.source in self.tensors:
            *rest, last = list(expr.indices)
            byte = tirx.BufferLoad(self.tensors[expr.source], [*rest, tirx.floordiv(last, 2)])
            shift = tirx.Cast("uint8", tirx.floormod(last, 2) * 4)
            return tirx.bitwise_and(tirx.shift_right(byte, shift), _u8(15))
        if isinstance(expr, tirx.Cast):
            if _is_fp4(expr.value.ty.dtype):
                return self.code(expr.value, span)
            return tirx.call_extern("uint8", TO_CODE, self.value(tirx.Cast("float32", expr.value)))
        raise at_span(
            f"a float4_e2m1fn value computed as {expr}: fp4 values can be stored, copied and converted "
            f"(T.Cast) only; compute in float32 and convert the result",
            span,
        )

    def value(self, expr, span=None):
        """`expr` with every fp4 value it reads converted (`Cast(float32, fp4)`)."""

        def on_cast(cast):
            if _is_fp4(cast.value.ty.dtype) and not _is_fp4(cast.ty.dtype):
                as_float = tirx.call_extern("float32", TO_FLOAT, self.code(cast.value, span))
                return as_float if str(cast.ty.dtype) == "float32" else tirx.Cast(str(cast.ty.dtype), as_float)
            return cast

        return tvm_ffi.structural_map(expr, [(tirx.Cast, on_cast)], order="pre")

    def store(self, st):
        if st.buffer in self.tiles:
            return tirx.BufferStore(self.tiles[st.buffer], self.code(st.value, st.span), list(st.indices), span=st.span)
        if st.buffer in self.tensors:
            raise at_span(
                f"a store into float4_e2m1fn tensor '{st.buffer.name}' writes one 4-bit value, half a byte: "
                f"write pairs of consecutive values (T.copy a tile with an even number of columns to it)",
                st.span,
            )
        return tirx.BufferStore(st.buffer, self.value(st.value, st.span), list(st.indices), span=st.span)

    def pair_loop(self, loop):
        """`for v: tensor[..., base + v] = value` as a loop writing each byte once, or None."""
        body, guard = loop.body, None
        if isinstance(body, tirx.IfThenElse) and body.else_case is None:
            guard, body = body.condition, body.then_case
        if not isinstance(body, tirx.BufferStore) or body.buffer not in self.tensors:
            return None
        v, extent = loop.loop_var, const_int(loop.extent)
        *rest, last = list(body.indices)
        base = substitute(last, {v: tirx.const(0, str(v.ty.dtype))})
        ana = sym.Analyzer()
        moves = ana.simplify(last - base)
        mod = ana.modular_set(base)
        if (
            extent is None
            or extent % 2
            or const_int(loop.min) != 0
            or not (isinstance(moves, ir.Var) and moves.same_as(v))
            or int(mod.coeff) % 2
            or int(mod.base) % 2
            or any(_uses(i, v) for i in rest)
            or (guard is not None and _uses(guard, v))
        ):
            return None
        pair = tirx.Var("v", str(v.ty.dtype))
        low = self.code(substitute(body.value, {v: pair * 2}), body.span)
        high = self.code(substitute(body.value, {v: pair * 2 + 1}), body.span)
        byte = tirx.bitwise_or(low, tirx.shift_left(high, _u8(4)))
        stmt = tirx.BufferStore(self.tensors[body.buffer], byte, [*rest, tirx.floordiv(base, 2) + pair], span=body.span)
        if guard is not None:
            stmt = tirx.IfThenElse(guard, stmt, None)
        half = tirx.const(extent // 2, str(v.ty.dtype))
        return tirx.For(pair, tirx.const(0, str(v.ty.dtype)), half, tirx.ForKind.UNROLLED, stmt, span=loop.span)


def _uses(expr, var) -> bool:
    return any(x.same_as(var) for x in collect(expr, ir.Var))


def _converts(stmt) -> bool:
    """Whether `stmt` calls a conversion or reads packed bytes: no vector form for those."""
    names = {getattr(c.op, "name", "") for c in collect(stmt, ir.Call)}
    externs = [c for c in collect(stmt, ir.Call) if c.args and isinstance(c.args[0], ir.StringImm)]
    return any(c.args[0].value in (TO_CODE, TO_FLOAT) for c in externs) or "tirx.shift_right" in names


def _packed_shape(buffer, body):
    *rest, last = list(buffer.shape)
    n = const_int(last)
    if n is None or n % 2:
        raise at_span(
            f"float4_e2m1fn tensor '{buffer.name}' has last dimension {last}: fp4 tensors are stored two values "
            f"per byte (torch's float4_e2m1fn_x2), so it must be a constant even size",
            first_use_span(body, buffer),  # (a parameter: its declaration has no line of its own)
        )
    return [*rest, tirx.const(n // 2, str(last.ty.dtype))]


def _packed_param(buffer, body):
    """The parameter an fp4 tensor becomes: its bytes, of the halved shape. (The host code generator
    has no C type for float4_e2m1fnx2: the launcher passes torch's float4_e2m1fn_x2 tensor as a
    uint8 view, `jit/params.py`.)"""
    return tirx.decl_buffer(_packed_shape(buffer, body), "uint8", buffer.name, scope="global")


def pack_fp4_tensors(func: tirx.PrimFunc) -> tirx.PrimFunc:
    params = [p for p in func.params if isinstance(p, tirx.Buffer) and _is_fp4(p.dtype)]
    allocs = [a.buffer for a in collect(func.body, tirx.AllocBuffer) if _is_fp4(a.buffer.dtype)]
    decls = [d.buffer for d in collect(func.body, tirx.DeclBuffer) if _is_fp4(d.buffer.dtype)]
    if not params and not allocs and not decls:
        return func
    for d in decls:
        raise at_span(
            f"'{d.name}' views memory as float4_e2m1fn values; view it as uint8 bytes instead",
            first_use_span(func.body, d),
        )
    tiles = {b: tirx.decl_buffer(list(b.shape), "uint8", b.name, scope=b.scope()) for b in allocs}
    new_params = {p: _packed_param(p, func.body) for p in params}
    rw = _Rewriter(tiles, new_params)

    def on_for(loop):
        paired = rw.pair_loop(loop)
        if paired is not None:
            return paired
        body = on_stmts(loop.body)
        kind = loop.kind
        if kind == tirx.ForKind.VECTORIZED and _converts(body):
            kind = tirx.ForKind.UNROLLED
        return tirx.For(
            loop.loop_var, loop.min, loop.extent, kind, body, loop.thread_binding, loop.annotations, span=loop.span
        )

    def on_stmts(stmt):
        rules = [(tirx.For, on_for), (tirx.BufferStore, rw.store), (tirx.AllocBuffer, on_alloc)]
        rules += [(tirx.IfThenElse, on_if), (tirx.Evaluate, on_eval), (tirx.Bind, on_bind)]
        return tvm_ffi.structural_map(stmt, rules, order="pre")

    def on_alloc(stmt):
        return tirx.AllocBuffer(tiles[stmt.buffer]) if stmt.buffer in tiles else stmt

    def on_if(stmt):
        then = on_stmts(stmt.then_case)
        other = on_stmts(stmt.else_case) if stmt.else_case is not None else None
        return tirx.IfThenElse(rw.value(stmt.condition), then, other, span=stmt.span)

    def on_eval(stmt):
        return tirx.Evaluate(rw.value(stmt.value), span=stmt.span)

    def on_bind(stmt):
        return tirx.Bind(stmt.var, rw.value(stmt.value), span=stmt.span)

    body = on_stmts(func.body)
    left = [b for b in list(tiles) + list(new_params) if touches(body, b)]
    if left:
        raise UserError(
            f"float4_e2m1fn buffer '{left[0].name}' is used other than by loads and stores (a pointer to it, "
            f"a tile op): tilelang stores fp4 tiles one value per byte, which such a use would not see"
        )
    out_params = [new_params.get(p, p) for p in func.params]
    return tirx.PrimFunc(out_params, body, func.ret_type, func.attrs, span=func.span)

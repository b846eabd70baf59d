"""Atomics: `T.atomic_add`, `T.atomic_max`, `T.atomic_min` on one element or a tile, `T.atomic_or` on one
integer element, `T.atomic_addx2` and `T.atomic_addx4` on 2 or 4 consecutive elements, `T.atomic_load`
and `T.atomic_store`.

Element form: `T.atomic_add(C[i, j], v)` is one call to `tl::atomic_add` (src/tl_templates/cuda/
atomic.h), an expression: with `return_prev=True` it is the value the element held before. A
`memory_order` ("relaxed", "consume", "acquire", "release", "acq_rel", "seq_cst"; TileLang's names)
becomes the template's argument: `tl::atomic_add<3>(&C[i, j], v)` (release; the templates are
intrinsics, `tl.device.atomic_*`, spelled by codegen/templates.py).

Tile form: `T.atomic_add(C[by * 64, bx * 64], C_local)` adds a whole tile (the extent of a start
element comes from the other side, as for `T.copy`; a scalar value is added to every element). It
expands like a copy, to a `T.Parallel` loop of element atomics that layout inference spreads over
the threads; elements past a global tensor's edge are skipped.

`use_tma=True` (sm_90a): the tile, in shared memory, is added to global memory by the bulk-copy
unit (`cp.reduce.async.bulk ... .add`), one row per issuing thread, instead of by element atomics.

Element types: float16, bfloat16, float32, float64, int32, uint32, int64 and uint64 (CUDA has no
8-bit atomics; float max/min go through integer atomics, half max/min through a 16-bit
compare-and-swap loop).
"""

from __future__ import annotations

from tvm import ir, sym, tirx
from tvm.script.ir_builder import IRBuilder
from tvm.script.ir_builder import tirx as _tb

from tilelang import intrinsics
from tilelang.dtypes import bits as dtype_bits
from tilelang.errors import UserError, at_span
from tilelang.intrinsics import Intrinsic
from tilelang.op import base
from tilelang.op.loops import build_parallel_nest
from tilelang.utils.ir import const_int, extern, is_one, is_zero, seq
from tilelang.utils.target import arch_of, compute_capability

NAME = "atomic_add"
__all__ = [
    "atomic_add",
    "atomic_max",
    "atomic_min",
    "atomic_or",
    "atomic_addx2",
    "atomic_addx4",
    "atomic_load",
    "atomic_store",
]
ELEMENT = "tl::atomic_add"  # the plain element add (legalize_safe_memory_access guards its target)

# TileLang's memory-order ids (atomic.h's kRelaxed ... kSeqCst).
MEMORY_ORDERS = {"relaxed": 0, "consume": 1, "acquire": 2, "release": 3, "acq_rel": 4, "seq_cst": 5}
_LOAD_ORDERS = ("relaxed", "consume", "acquire", "seq_cst")
_STORE_ORDERS = ("relaxed", "release", "seq_cst")
ELEMENT_DTYPES = ("float16", "bfloat16", "float32", "float64", "int32", "uint32", "int64", "uint64")
VECTOR_DTYPES = ("float16", "bfloat16", "float32")


# ---- checks shared by every form ------------------------------------------------------------------


def _order_id(what: str, memory_order, allowed=tuple(MEMORY_ORDERS)) -> int:
    if memory_order is None:
        return 0
    if memory_order not in allowed:
        raise UserError(f"{what}: memory_order must be one of {list(allowed)}, got {memory_order!r}")
    return MEMORY_ORDERS[memory_order]


def _check_memory(what: str, buffer, role: str = "destination") -> None:
    if buffer.scope() in ("local", "local.fragment", "local.var"):
        raise UserError(
            f"{what}: the {role} '{buffer.name}' is in {buffer.scope()} memory, which only its own thread "
            f"sees; atomics are for global or shared memory"
        )


def _check_dtype(what: str, buffer, allowed=ELEMENT_DTYPES) -> None:
    dtype = str(buffer.dtype)
    if dtype not in allowed:
        raise UserError(
            f"{what}: '{buffer.name}' holds {dtype}; CUDA atomics on any target (sm_80, sm_89, sm_90a) "
            f"take {', '.join(allowed)} elements"
        )


def _as_value(value, dtype: str):
    """`value` as an expression of `dtype` (Python numbers become constants)."""
    if isinstance(value, (bool, int, float)):
        return tirx.const(value, dtype)
    if not ir.is_prim_expr(value):
        raise UserError(f"expected a value (a number or an expression), got {value!r}")
    return value if str(value.ty.dtype) == dtype else tirx.Cast(dtype, value)


def _templated(name: str, params: str, flags: str = "") -> Intrinsic:
    return Intrinsic(name, tuple(params.split()), frozenset(flags.split()))


# The device templates (atomic.h) as intrinsics (tilelang/intrinsics.py): `order` is a memory
# order's id; `shared` says the destination of a vector add is in shared memory.
_ORDERED = {
    name: _templated(name, "order")
    for kind in ("add", "max", "min")
    for name in (f"atomic_{kind}", f"atomic_{kind}_ret")
}
ATOMIC_OR = _templated("atomic_or", "order")
ATOMIC_LOAD = _templated("atomic_load", "order")
ATOMIC_STORE = _templated("atomic_store", "order")
_VECTOR = {
    name: _templated(name, "shared", "shared")
    for lanes in (2, 4)
    for name in (f"atomic_addx{lanes}", f"atomic_addx{lanes}_ret")
}


def element_call(kind: str, dst_load, value, order: int = 0, return_prev: bool = False) -> ir.Call:
    """The element atomic `tl::atomic_<kind>[_ret]<order>(&dst, value)` as a call expression (the
    relaxed add that returns nothing: a plain `tl::atomic_add(&dst, value)`)."""
    dtype = str(dst_load.source.dtype)
    args = [tirx.address_of(dst_load), _as_value(value, dtype)]
    if kind == "add" and not order and not return_prev:
        return tirx.call_extern("void", ELEMENT, *args)
    intrinsic = _ORDERED[f"atomic_{kind}" + ("_ret" if return_prev else "")]
    return intrinsic.call({"order": order}, *args, dtype=dtype if return_prev else "void")


def element_atomic_add_call(dst_load, value):
    """`*&dst += value`, atomically (relaxed), as a call expression."""
    return element_call("add", dst_load, value)


def element_atomic_add(dst_load, value) -> tirx.Stmt:
    """The statement form of `element_atomic_add_call`, used inside loops."""
    return tirx.Evaluate(element_atomic_add_call(dst_load, value))


def is_element_atomic(call) -> bool:
    """Whether `call` is an element atomic that writes through the address among its arguments
    (`element_target`): a plain add, or an add/max/min with an order or returning the old value."""
    return _is_plain_add(call) or intrinsics.lookup(call) in _ORDERED.values()


def _is_plain_add(call) -> bool:
    """The relaxed element add that returns nothing: `tl::atomic_add(&dst, value)` (`element_call`)."""
    return (
        isinstance(call, ir.Call)
        and getattr(call.op, "name", "") == "tirx.call_extern"
        and str(call.args[0].value) == ELEMENT
    )


def element_target(call):
    """(the element an element atomic writes, as a load; the value it combines in)."""
    if _is_plain_add(call):
        address, value = call.args[1], call.args[2]
    else:
        address, value = intrinsics.lookup(call).args(call)
    return address.args[0], value


def vectorizable_add(call):
    """The element a plain element add (`T.atomic_add(C[i, j], v)`, relaxed, no old value) adds to
    when consecutive ones may go as one `T.atomic_addx2/x4` (a float16, bfloat16 or float32 element
    of global memory), as a load; else None. A T.Parallel loop of such adds along contiguous
    elements (a split-K GEMM's accumulator added to C) then issues a pair or quad per atomic."""
    if not _is_plain_add(call):
        return None
    target = element_target(call)[0]
    if target.source.scope() != "global" or str(target.source.dtype) not in VECTOR_DTYPES:
        return None
    return target


def vector_add_call(first, values) -> ir.Call:
    """`T.atomic_addx{len(values)}`: `values` added to the consecutive elements from `first` (a load of
    global memory, aligned to the whole vector)."""
    name = f"atomic_addx{len(values)}"
    return _VECTOR[name].call({"shared": False}, tirx.address_of(first), *values)


def addressed_element(call) -> tuple | None:
    """(the element an atomic call works on through its address argument, as a load; how many
    consecutive elements of its last dimension) for every atomic of this module (element and vector
    adds, max/min, or, load and store, with or without the old value); None for other calls.
    `legalize_safe_memory_access` guards the element's bounds."""
    if not isinstance(call, ir.Call):
        return None
    if is_element_atomic(call):
        return element_target(call)[0], 1
    found = intrinsics.lookup(call)
    if found in _VECTOR.values():
        return found.args(call)[0].args[0], 2 if found.name.startswith("atomic_addx2") else 4
    if found in (ATOMIC_OR, ATOMIC_LOAD, ATOMIC_STORE):
        return found.args(call)[0].args[0], 1
    return None


# ---- T.atomic_add / T.atomic_max / T.atomic_min ----------------------------------------------------


def _is_tile_arg(x) -> bool:
    return base.is_buffer(x) or isinstance(x, ir.TensorRegion)


def _atomic(kind: str, dst, value, memory_order, return_prev, use_tma=False):
    what = f"T.atomic_{kind}"
    order = _order_id(what, memory_order)
    if isinstance(dst, ir.TensorLoad) and not _is_tile_arg(value):
        _check_memory(what, dst.source)
        _check_dtype(what, dst.source)
        if use_tma:
            raise UserError(f"{what}: use_tma=True adds a shared tile to a global one; give tiles, not one element")
        return element_call(kind, dst, value, order, return_prev)  # the parser makes the statement
    if return_prev:
        raise UserError(
            f"{what}: return_prev=True returns the old value of one element; a tile has no single old "
            f"value (index one element, e.g. T.atomic_{kind}(C[i, j], v, return_prev=True))"
        )
    if _is_tile_arg(value) or isinstance(value, ir.TensorLoad):
        src, dst_region = base.to_region_pair(value, dst, what)
    else:  # a scalar added to every element of the tile
        dst_region = base.to_region(dst, f"{what} destination")
        if dst_region is None:
            raise UserError(f"{what}: expected a buffer, a slice or an element as the destination, got {dst!r}")
        src = None
        value = _as_value(value, str(dst_region.buffer.dtype))
    _check_memory(what, dst_region.buffer)
    _check_dtype(what, dst_region.buffer)
    if src is not None:
        s_tile, d_tile = src.nonunit_extents(), dst_region.nonunit_extents()
        if len(s_tile) != len(d_tile) or not all(base.same_extent(a, b) for a, b in zip(s_tile, d_tile)):
            raise UserError(
                f"{what}: the value {src.describe()} and the destination {dst_region.describe()} are "
                f"tiles of different shapes"
            )
    if use_tma:
        _check_bulk(src, dst_region, memory_order)
    args = [src.to_ir() if src is not None else value, dst_region.to_ir()]
    if order or use_tma:
        args += [tirx.const(order, "int32"), tirx.const(int(bool(use_tma)), "int32")]
    return base.make_call(f"atomic_{kind}", args)


def atomic_add(dst, value, memory_order=None, return_prev=False, use_tma=False):
    """Atomically add `value` to `dst`: one element, or a tile as in T.copy.

    Args:
        dst: an element (`C[i, j]`), or a tile (a buffer, a slice, or a start element whose extent
            comes from `value`) in global or shared memory.
        value: a number or expression (added to every element of a tile), or a tile of the same shape.
        memory_order: "relaxed" (the default), "consume", "acquire", "release", "acq_rel" or "seq_cst".
        return_prev: for one element, the call is the value `dst` held before the add.
        use_tma: (sm_90a) add a shared tile to a global tile with the bulk-copy unit
            (`cp.reduce.async.bulk`); rows must be whole multiples of 16 bytes.

    Errors: UserError if the shapes differ, `dst` is in registers, the dtype has no atomic add
    (8-bit types), or use_tma is given something other than a shared tile into a global one.

    Example:
        T.atomic_add(Out[by * 64, bx * 64], acc)                   # tile
        pos = T.atomic_add(Count[0], 1, return_prev=True)          # one element, its old value
        T.atomic_add(dQ[bz, k * 64:(k + 1) * 64, h, :], dq_shared, use_tma=True)
    """
    return _atomic("add", dst, value, memory_order, return_prev, use_tma)


def atomic_max(dst, value, memory_order=None, return_prev=False):
    """Atomically set `dst` to the maximum of itself and `value` (one element, or a tile).

    Floats: -0.0 counts below +0.0; NaN is not ordered. Arguments as for T.atomic_add.

    Example:
        T.atomic_max(Amax[0], T.abs(x[i]))
        old = T.atomic_max(Best[row], score, return_prev=True)
    """
    return _atomic("max", dst, value, memory_order, return_prev)


def atomic_min(dst, value, memory_order=None, return_prev=False):
    """Atomically set `dst` to the minimum of itself and `value` (one element, or a tile).

    Arguments as for T.atomic_add / T.atomic_max.

    Example: T.atomic_min(First[0], i)
    """
    return _atomic("min", dst, value, memory_order, return_prev)


def atomic_or(dst, value, memory_order=None):
    """Atomically set `dst` (one int32/uint32/int64/uint64 element) to `dst | value`.

    Example: T.atomic_or(Mask[word], 1 << bit)
    """
    what = "T.atomic_or"
    if not isinstance(dst, ir.TensorLoad):
        raise UserError(f"{what}: the destination is one element (e.g. Mask[i]), got {dst!r}")
    _check_memory(what, dst.source)
    _check_dtype(what, dst.source, ("int32", "uint32", "int64", "uint64"))
    value = _as_value(value, str(dst.source.dtype))
    return ATOMIC_OR.call({"order": _order_id(what, memory_order)}, tirx.address_of(dst), value)


# ---- T.atomic_addx2 / T.atomic_addx4 --------------------------------------------------------------


def _start_element(x, what: str, role: str):
    """(buffer, start indices) of an element, a buffer (its first element) or a slice (its start)."""
    if base.is_buffer(x):
        return x, [tirx.const(0, "int32") for _ in x.shape]
    if isinstance(x, ir.TensorRegion):
        return x.source, [r.min for r in x.region]
    if isinstance(x, ir.TensorLoad):
        return x.source, list(x.indices)
    raise UserError(f"{what}: the {role} must be an element, a buffer or a slice of one, got {x!r}")


def _vector_add(lanes: int, dst, value, return_prev: bool):
    what = f"T.atomic_addx{lanes}"
    dbuf, didx = _start_element(dst, what, "destination")
    vbuf, vidx = _start_element(value, what, "value")
    _check_memory(what, dbuf)
    _check_dtype(what, dbuf, VECTOR_DTYPES)
    dtype = str(dbuf.dtype)
    last = const_int(didx[-1])
    if last is not None and last % lanes:
        raise UserError(
            f"{what}: the {lanes} elements of '{dbuf.name}' must start at a multiple of {lanes} along the "
            f"last dimension (one aligned {lanes * dtype_bits(dtype) // 8}-byte atomic), got index {last}"
        )
    if return_prev and lanes == 4 and dtype != "float32":
        raise UserError(
            f"{what}: return_prev=True is for float32 quads (a float4); {dtype} quads are added as two "
            f"pairs with no single old value: use T.atomic_addx2 twice"
        )
    if vbuf.scope() in ("shared", "shared.dyn", "local") and str(vbuf.dtype) == dtype:
        ramp = list(vidx[:-1]) + [tirx.Ramp(vidx[-1], 1, lanes)]
        values = [tirx.BufferLoad(vbuf, ramp)]  # one vector load
    else:  # a fragment's registers (remapped one by one), global elements (guarded one by one), conversions
        values = [
            _as_value(tirx.BufferLoad(vbuf, list(vidx[:-1]) + [vidx[-1] + k if k else vidx[-1]]), dtype)
            for k in range(lanes)
        ]
    template = {"shared": dbuf.scope().startswith("shared")}  # vector float atomics: global memory only
    address = tirx.address_of(tirx.BufferLoad(dbuf, didx))
    if not return_prev:
        return _VECTOR[f"atomic_addx{lanes}"].call(template, address, *values)
    # The old values go through a local array: TVM prints a vector-typed call lane by lane.
    prev = IRBuilder.name("atomic_prev", _tb.alloc_buffer((lanes,), dtype, scope="local"))
    zero = tirx.const(0, "int32")
    _tb.evaluate(_VECTOR[f"atomic_addx{lanes}_ret"].call(template, address, *values, tirx.address_of(prev[zero])))
    return tirx.BufferLoad(prev, [tirx.Ramp(zero, 1, lanes)])


def atomic_addx2(dst, value, return_prev=False):
    """Atomically add 2 consecutive elements of `value` to 2 consecutive elements of `dst`.

    `dst` and `value` are elements (or buffers/slices, from their first element); float16 and
    bfloat16 pairs are one 32-bit atomic, float32 pairs one 64-bit atomic on sm_90 (global memory),
    else two. `dst` must start at an even index of its last dimension. With return_prev=True the
    call is the pair held before (float16x2, bfloat16x2 or float32x2).

    Example: T.atomic_addx2(dQ[b, i, h, j * 2], dq_shared[i, j * 2])
    """
    return _vector_add(2, dst, value, return_prev)


def atomic_addx4(dst, value, return_prev=False):
    """Atomically add 4 consecutive elements of `value` to 4 consecutive elements of `dst`.

    float32 quads are one 128-bit atomic on sm_90 in global memory, else four; float16 and
    bfloat16 quads two pairs. `dst` must start at a multiple of 4 of its last dimension. With
    return_prev=True (float32 only) the call is the float32x4 held before.

    Example: T.atomic_addx4(dKV[b, idx, g, d * 4], acc_shared[i, d * 4])
    """
    return _vector_add(4, dst, value, return_prev)


# ---- T.atomic_load / T.atomic_store ---------------------------------------------------------------


def _scalar_element(x, what: str):
    buf, idx = _start_element(x, what, "argument")
    _check_memory(what, buf, "element")
    if dtype_bits(str(buf.dtype)) not in (16, 32, 64):
        raise UserError(f"{what}: '{buf.name}' holds {buf.dtype}; atomic loads and stores move 2, 4 or 8-byte elements")
    return tirx.BufferLoad(buf, idx)


def atomic_load(src, memory_order="seq_cst"):
    """The value of one element, read atomically with `memory_order` ("relaxed", "consume",
    "acquire" or "seq_cst", the default).

    Example:
        while T.atomic_load(Flag[0], memory_order="acquire") == 0:
            pass
    """
    element = _scalar_element(src, "T.atomic_load")
    order = _order_id("T.atomic_load", memory_order, _LOAD_ORDERS)
    return ATOMIC_LOAD.call({"order": order}, tirx.address_of(element), dtype=str(element.source.dtype))


def atomic_store(dst, src, memory_order="seq_cst"):
    """Write `src` to one element atomically with `memory_order` ("relaxed", "release" or
    "seq_cst", the default).

    Example: T.atomic_store(Flag[0], 1, memory_order="release")
    """
    element = _scalar_element(dst, "T.atomic_store")
    order = _order_id("T.atomic_store", memory_order, _STORE_ORDERS)
    value = _as_value(src, str(element.source.dtype))
    return ATOMIC_STORE.call({"order": order}, tirx.address_of(element), value)


# ---- the tile op -----------------------------------------------------------------------------------


@base.register
class AtomicAdd(base.TileOp):
    """A parsed tile `tl.atomic_add(value, destination[, memory order, use_tma])`; the value is a
    region or a scalar expression."""

    name = NAME
    kind = "add"

    def __init__(self, call, span=None):
        super().__init__(call, span)
        value = call.args[0]
        self.src = base.Region.from_ir(value) if isinstance(value, ir.TensorRegion) else None
        self.value = None if self.src is not None else value
        self.dst = base.Region.from_ir(call.args[1])
        self.order = int(call.args[2].value) if len(call.args) > 2 else 0
        self.use_tma = len(call.args) > 3 and bool(int(call.args[3].value))

    @property
    def expands(self) -> bool:  # noqa: D102 (the bulk form lowers itself, after layout inference)
        return not self.use_tma

    def describe(self) -> str:
        return f"T.atomic_{self.kind}({self.dst.name}, {self.src.name if self.src else self.value})"

    def expand(self, analyzer=None) -> tirx.Stmt:
        """The tile form as a parallel loop of element atomics."""
        s, d = self.src, self.dst
        src_dims = [k for k, e in enumerate(s.extents) if not is_one(e)] if s is not None else []
        # The plain add's target is guarded by legalize_safe_memory_access; the others guard here.
        guarded = self.kind != "add" or self.order != 0

        def body(dst_idx, loop_vars):
            if s is None:
                value = self.value
            else:
                src_idx = list(s.starts)
                for ks, v in zip(src_dims, loop_vars):
                    src_idx[ks] = v if is_zero(s.starts[ks]) else s.starts[ks] + v
                value = tirx.BufferLoad(s.buffer, src_idx)
            stmt = tirx.Evaluate(element_call(self.kind, tirx.BufferLoad(d.buffer, dst_idx), value, self.order))
            cond = _in_bounds(d, dst_idx, analyzer) if guarded else None
            return tirx.IfThenElse(cond, stmt, None) if cond is not None else stmt

        return build_parallel_nest(d, body, span=self.span)

    def lower(self, ctx) -> tirx.Stmt:
        return _lower_bulk(self, ctx)


@base.register
class AtomicMax(AtomicAdd):
    """A parsed tile `tl.atomic_max(value, destination[, memory order])`."""

    name = "atomic_max"
    kind = "max"


@base.register
class AtomicMin(AtomicAdd):
    """A parsed tile `tl.atomic_min(value, destination[, memory order])`."""

    name = "atomic_min"
    kind = "min"


def _in_bounds(region: base.Region, indices, analyzer):
    """`indices` inside a global buffer, for the dimensions where the region may pass its edge
    (None when it provably does not)."""
    if region.buffer.scope() != "global":
        return None
    ana = analyzer if analyzer is not None else sym.Analyzer()
    conds = []
    for idx, start, extent, n in zip(indices, region.starts, region.extents, region.buffer.shape):
        if ana.can_prove(start + extent <= n):
            continue
        conds.append(idx < n)
    if not conds:
        return None
    cond = conds[0]
    for c in conds[1:]:
        cond = tirx.And(cond, c)
    return cond


# ---- use_tma: bulk adds of shared rows -------------------------------------------------------------

# Element types cp.reduce.async.bulk adds (atomic.h's atomic_bulk_add).
_BULK_DTYPES = ("float16", "bfloat16", "float32", "float64", "int32", "uint32", "int64", "uint64")


def _check_bulk(src, dst, memory_order) -> None:
    """What use_tma=True needs that is known while tracing."""
    what = "T.atomic_add(use_tma=True)"
    if src is None or src.buffer.scope() != "shared.dyn":
        where = "a scalar" if src is None else f"'{src.name}' in {src.buffer.scope()} memory"
        raise UserError(
            f"{what}: the value must be a tile allocated with T.alloc_shared (the bulk-copy unit reads "
            f"dynamic shared memory), got {where}; copy it into a shared tile first"
        )
    if dst.buffer.scope() != "global":
        raise UserError(
            f"{what}: the destination '{dst.name}' must be a global tensor, not {dst.buffer.scope()} memory"
        )
    if str(src.buffer.dtype) != str(dst.buffer.dtype):
        raise UserError(
            f"{what}: the bulk add does not convert: the shared tile '{src.name}' holds {src.buffer.dtype} "
            f"and '{dst.name}' {dst.buffer.dtype}"
        )
    if str(dst.buffer.dtype) not in _BULK_DTYPES:
        raise UserError(f"{what}: no bulk add of {dst.buffer.dtype} elements; drop use_tma")
    if memory_order not in (None, "relaxed"):
        raise UserError(
            f"{what}: bulk adds are relaxed; memory_order={memory_order!r} needs element atomics (drop use_tma)"
        )


def _row_major_offset(buffer, indices):
    offset = tirx.const(0, "int32")
    for idx, n in zip(indices, buffer.shape):
        offset = offset * n + idx
    return offset


def _lower_bulk(op: AtomicAdd, ctx) -> tirx.Stmt:
    """One `tl::atomic_bulk_add` per row of the tile (the destination's last dimension, contiguous
    in both), rows spread over the threads; each issuing thread then waits until its adds have read
    shared memory. Before them, every thread fences its shared writes for the async proxy; the
    barrier between the writes and the adds is the one thread_sync puts before any shared read."""
    what = "T.atomic_add(use_tma=True)"
    if ctx.target is None or compute_capability(ctx.target) < 90:
        target = arch_of(ctx.target) if ctx.target is not None else "this target"
        raise at_span(
            f"{what}: the bulk add (cp.reduce.async.bulk) needs sm_90a; {target} has none. Drop use_tma "
            f"(element atomics) for this target",
            op.span,
        )
    src, dst = op.src, op.dst
    if ctx.shared_layout(src.buffer) is not None:
        raise at_span(
            f"{what}: the shared tile '{src.name}' has a swizzled layout (another op reads it so), so its rows "
            f"are not contiguous; add from a tile used only by copies",
            op.span,
        )
    ana = ctx.analyzer
    elem = dtype_bits(str(dst.buffer.dtype)) // 8
    d_dims = [k for k, e in enumerate(dst.extents) if not is_one(e)]
    s_dims = [k for k, e in enumerate(src.extents) if not is_one(e)]
    last_d, last_s = len(dst.extents) - 1, len(src.extents) - 1
    row = const_int(dst.extents[last_d])
    if not d_dims or d_dims[-1] != last_d or not s_dims or s_dims[-1] != last_s or row is None or row * elem % 16:
        raise at_span(
            f"{what}: each row of the tile (its extent along the last dimension of '{dst.name}' and of "
            f"'{src.name}') must be contiguous and a multiple of 16 bytes; {dst.describe()} is not",
            op.span,
        )
    counts = [const_int(dst.extents[k]) for k in d_dims[:-1]]
    if any(c is None for c in counts):
        raise at_span(f"{what}: the tile {dst.describe()} needs a constant shape", op.span)
    if not ana.can_prove(dst.starts[last_d] + dst.extents[last_d] <= dst.buffer.shape[last_d]):
        raise at_span(
            f"{what}: the rows of {dst.describe()} may pass the end of '{dst.name}' (last dimension "
            f"{dst.buffer.shape[last_d]}); the bulk add writes whole rows",
            op.span,
        )
    n_rows = 1
    for c in counts:
        n_rows *= c
    o = tirx.Var("o", "int32")
    threads = ctx.num_threads
    flat = o * threads + ctx.thread if n_rows > threads else ctx.thread
    coords, rem = [], flat
    for c in reversed(counts):
        coords.append(tirx.floormod(rem, c))
        rem = tirx.floordiv(rem, c)
    coords.reverse()
    d_idx, s_idx = list(dst.starts), list(src.starts)
    for k_d, k_s, c in zip(d_dims[:-1], s_dims[:-1], coords):
        d_idx[k_d] = dst.starts[k_d] + c
        s_idx[k_s] = src.starts[k_s] + c
    s_off = _row_major_offset(src.buffer, s_idx)
    for name, offset in (("destination", _row_major_offset(dst.buffer, d_idx)), ("shared tile", s_off)):
        if not ana.can_prove(tirx.floormod(offset * elem, 16) == 0):
            raise at_span(
                f"{what}: rows of the {name} must start at 16-byte aligned addresses; "
                f"{dst.describe() if name == 'destination' else src.describe()} may not",
                op.span,
            )
    src_ptr = tirx.tvm_access_ptr(tirx.type_annotation(str(src.buffer.dtype)), src.buffer.data, s_off, row, 1)
    dst_ptr = tirx.address_of(tirx.BufferLoad(dst.buffer, d_idx))
    add = extern("tl::atomic_bulk_add", dst_ptr, src_ptr, tirx.const(row * elem, "uint32"))
    # Rows past the tensor's edge are skipped (inner guard); threads without a row skip it all.
    for k_d in d_dims[:-1]:
        if not ana.can_prove(dst.starts[k_d] + dst.extents[k_d] <= dst.buffer.shape[k_d]):
            add = tirx.IfThenElse(d_idx[k_d] < dst.buffer.shape[k_d], add, None)
    if n_rows < threads:
        add = tirx.IfThenElse(ctx.thread < n_rows, add, None)
    elif n_rows % threads:
        add = tirx.IfThenElse(flat < n_rows, add, None)
    if n_rows > threads:
        add = tirx.For(o, tirx.const(0, "int32"), tirx.const(-(-n_rows // threads), "int32"), tirx.ForKind.SERIAL, add)
    wait = extern("tl::atomic_bulk_wait_read")
    if n_rows < threads:
        wait = tirx.IfThenElse(ctx.thread < n_rows, wait, None)
    return seq([extern("tl::atomic_bulk_fence"), add, wait])

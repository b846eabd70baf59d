"""Analysis: the widest vector a `T.Parallel` nest can use along its innermost loop.

A vector of V elements along the innermost loop variable is legal when, for every access to global
or shared memory in the body, the flattened offset moves by exactly 1 per step of that variable and
starts V-aligned (so the access is one aligned 128-bit-or-narrower load or store), the innermost
extent is a multiple of V, and every guard in the body is uniform over each vector (true or false
for all V lanes at once). Values in registers (fragments, locals, casts) limit V to the widest
vector of their type the code generator can hold (`register_lanes`), and a register read that is
not a constant stride along the loop (`B_local[i, j // 2]`) to the lanes that read one element.
"""

from __future__ import annotations

from tvm import DataType, ir, tirx

from tilelang.dtypes import bits as dtype_bits
from tilelang.utils.ir import collect, const_int, is_if_then_else

MAX_VECTOR_BITS = 128


def register_lanes(bits: int) -> int:
    """The most lanes of `bits`-bit values one vector in registers may hold: 256 bits of 32- and 64-bit
    values (TVM's CUDA code generator holds 8 x float32 in a ulonglong4), 128 bits of narrower ones
    (it has no type for 16 x float16 or 32 x int8, and stops with "Cannot convert type")."""
    return (2 * MAX_VECTOR_BITS if bits >= 32 else MAX_VECTOR_BITS) // bits


def _flat_offset(buffer, indices):
    offset = tirx.const(0, "int32")
    for idx, extent in zip(indices, buffer.shape):
        offset = offset * extent + idx
    return offset


def _subst(expr, var, value):
    from tilelang.layout.fragment import substitute

    return substitute(expr, {var: value})


def _aligned_unit_stride(expr, var, vec, analyzer) -> bool:
    """`expr` = V-aligned base + var, as far as the analyzer can prove."""
    step = analyzer.simplify(_subst(expr, var, var + 1) - expr)
    if const_int(step) == 0:
        return True  # does not move with var: the same address for every lane is fine for loads
    if const_int(step) != 1:
        return False
    base = analyzer.simplify(_subst(expr, var, tirx.const(0, "int32")))
    m = analyzer.modular_set(base)
    return int(m.coeff) % vec == 0 and int(m.base) % vec == 0


def _register_lanes_line_up(expr, var, vec, analyzer) -> bool:
    """For a register access (fragment, local): `expr` moves by a constant per step of var, or each
    aligned group of `vec` lanes reads one element (`B_local[i, j // 2]` for vec 2: a broadcast).
    A gather across lanes of anything else (j // 2 over 8 lanes) has no vector form in the code
    generator (it packs uint8 lanes into a uint2 with shifts past 32 bits)."""
    step = analyzer.simplify(_subst(expr, var, var + 1) - expr)
    if const_int(step) is not None:
        return True
    outer, lane = tirx.Var("vo", "int32"), tirx.Var("vl", "int32")
    analyzer.bind(lane, ir.Range(0, vec))
    analyzer.bind(outer, ir.Range(0, 1 << 20))
    grouped = analyzer.simplify(_subst(expr, var, outer * vec + lane))
    return _free_of(grouped, lane)


def _uniform_condition(cond, var, vec, analyzer) -> bool:
    """Whether `cond` has one value over each aligned group of `vec` consecutive values of var.

    A comparison is rewritten as `e >= 0` or `e < 0` with `e` growing by one per step of var;
    it then flips only where e crosses 0, which is a group boundary when e(var = 0) is a multiple
    of vec.
    """
    if isinstance(cond, (tirx.And, tirx.Or)):
        return _uniform_condition(cond.a, var, vec, analyzer) and _uniform_condition(cond.b, var, vec, analyzer)
    if isinstance(cond, tirx.Not):
        return _uniform_condition(cond.a, var, vec, analyzer)
    if isinstance(cond, (tirx.LT, tirx.GE, tirx.GT, tirx.LE)):
        e = cond.a - cond.b
        if isinstance(cond, (tirx.GT, tirx.LE)):
            e = e - 1
        e = analyzer.simplify(e)
        step = const_int(analyzer.simplify(_subst(e, var, var + 1) - e))
        if step == 0:
            return True
        if step == -1:
            e, step = analyzer.simplify(-e - 1), 1
        if step != 1:
            return False
        m = analyzer.modular_set(analyzer.simplify(_subst(e, var, tirx.const(0, "int32"))))
        return int(m.coeff) % vec == 0 and int(m.base) % vec == 0
    return _free_of(cond, var)


def _depends_on(expr, var) -> bool:
    return not _free_of(expr, var)


def _free_of(expr, var) -> bool:
    found = collect(expr, ir.Var)
    return not any(v.same_as(var) for v in found)


def _value_casts(body, var) -> list:
    """Casts of values a vector carries in registers: of loaded values, and of values computed
    from the loop variable (`(j % 2 * 4).astype(T.uint8)` computes j % 2 * 4 in int32 lanes). Casts
    inside indices, such as the int64 casts a dynamic int64 dimension brings into every address,
    are left out: they do not widen the vector's registers."""
    in_indices = [c for ld in collect(body, ir.TensorLoad) for i in ld.indices for c in collect(i, tirx.Cast)]
    in_indices += [c for st in collect(body, tirx.BufferStore) for i in st.indices for c in collect(i, tirx.Cast)]
    return [
        c
        for c in collect(body, tirx.Cast)
        if (collect(c.value, ir.TensorLoad) or _depends_on(c.value, var)) and not any(c.same_as(x) for x in in_indices)
    ]


def _cast_bits(cast) -> int:
    """The wider of a cast's source and result types."""
    return max(DataType(str(cast.ty.dtype)).bits, DataType(str(cast.value.ty.dtype)).bits)


def plan_vector_size(loop_vars, extents, body, analyzer, limit: int = 0) -> int:
    """The largest legal vector width (elements) for the innermost of `loop_vars`."""
    var = loop_vars[-1]
    inner = const_int(extents[-1])
    if inner is None or collect(body, tirx.Evaluate):
        return 1  # unknown extent, or calls with side effects (atomics) that have no vector form
    loads = collect(body, ir.TensorLoad)
    stores = collect(body, tirx.BufferStore)
    accesses = [(ld.source, list(ld.indices)) for ld in loads] + [(st.buffer, list(st.indices)) for st in stores]
    memory = [(b, idx) for b, idx in accesses if b.scope() in ("global", "shared", "shared.dyn")]
    registers = [(b, idx) for b, idx in accesses if b.scope() in ("local", "local.fragment", "local.var")]
    # Memory accesses are at most 128 bits; values computed in registers (e.g. fp16 widened to fp32)
    # may be wider, as far as the code generator has a type for them (`register_lanes`).
    widths = [MAX_VECTOR_BITS // dtype_bits(str(b.dtype)) for b, _ in memory]
    widths += [register_lanes(dtype_bits(str(b.dtype))) for b, _ in accesses]
    widths += [register_lanes(_cast_bits(c)) for c in _value_casts(body, var)]
    widths = widths or [1]
    vec = min(min(widths), limit) if limit else min(widths)
    conds = [s.condition for s in collect(body, tirx.IfThenElse)]
    conds += [c.args[0] for c in collect(body, ir.Call) if is_if_then_else(c)]
    if any(not _depends_on(_flat_offset(st.buffer, list(st.indices)), var) for st in stores):
        return 1  # the lanes would all store to one element (a reduction along the loop, `acc[i] += ...`)
    while vec > 1:
        ok = inner % vec == 0
        ok = ok and all(_aligned_unit_stride(_flat_offset(b, idx), var, vec, analyzer) for b, idx in memory)
        ok = ok and all(_register_lanes_line_up(_flat_offset(b, idx), var, vec, analyzer) for b, idx in registers)
        ok = ok and all(_uniform_condition(c, var, vec, analyzer) for c in conds)
        if ok:
            return vec
        vec //= 2
    return 1

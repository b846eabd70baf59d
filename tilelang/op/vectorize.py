"""Analysis: the widest vector a `T.Parallel` nest can use along its innermost loop.

A vector of V elements along the innermost loop variable is legal when, for every access to global
or shared memory in the body, the flattened offset moves by exactly 1 per step of that variable and
starts V-aligned (so the access is one aligned 128-bit-or-narrower load or store), the innermost
extent is a multiple of V, and every guard in the body is uniform over each vector (true or false
for all V lanes at once). Values in registers (fragments, locals, casts) limit V to the widest
vector of their type the code generator can hold (`register_lanes`), and a register read that is
not a constant stride along the loop (`B_local[i, j // 2]`) to the lanes that read one element.
Calls stop vectors, except plain element adds into global memory (`T.atomic_add(C[i, j], v)`), at
most 4 lanes, each into its own element: `parallel.lower` issues each vector as one T.atomic_addx2/x4.
Bools stay scalar: TVM writes a vector of them in a wider type than their bytes.

Indices through `//` and `%` (an im2col tile's channel `(k * 64 + j) % C`): each aligned group of V
values of the loop variable is looked at as `base + lane`; a `(base + lane) % c` with c a multiple
of V and base a multiple of V is `base % c + lane`, a `(base + lane) // c` is `base // c`
(`split_lanes`). The accesses are then checked along the lane.

Dynamic sizes (`T.dynamic`, `T.symbolic`): a row of A[m, k] starts at row * k, which is V-aligned
only when k is a multiple of V. The plan then assumes that the dynamic sizes of the tensors the loop
touches are multiples of V, and `vector_guard` names the ones the proof needed: the lowering runs
the vectorized loop when they are (a check at run time, the same for the whole block) and the loop
one element at a time otherwise, as the public TileLang does with its dynamic alignment.
"""

from __future__ import annotations

import contextlib

import tvm_ffi
from tvm import DataType, ir, tirx

from tilelang.dtypes import bits as dtype_bits
from tilelang.op import atomic
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


def split_lanes(expr, lane, vec: int, analyzer):
    """`expr` with each `(a + lane) // c` written `a // c` and `(a + lane) % c` written `a % c + lane`,
    where c is a multiple of `vec`, `a` a multiple of vec and lane in [0, vec): the lane of a vector
    then shows as a term of its own."""

    def aligned_part(a):
        a0 = analyzer.simplify(_subst(a, lane, tirx.const(0, str(lane.ty.dtype))))
        if not _free_of(a0, lane) or not analyzer.can_prove_equal(a - a0, lane):
            return None
        m = analyzer.modular_set(a0)
        return a0 if int(m.coeff) % vec == 0 and int(m.base) % vec == 0 else None

    def on_div(node):
        c = const_int(node.b)
        if c is None or c % vec or _free_of(node.a, lane):
            return node
        a0 = aligned_part(node.a)
        if a0 is None:
            return node
        return tirx.floordiv(a0, node.b) if isinstance(node, tirx.FloorDiv) else tirx.floormod(a0, node.b) + lane

    return tvm_ffi.structural_map(expr, [(tirx.FloorDiv, on_div), (tirx.FloorMod, on_div)], order="post")


def _lane_groups(var, vec: int, inner: int, analyzer):
    """A function taking an expression of `var` to one of (group, lane), var = group * vec + lane,
    with the lane split out of `//` and `%` (`split_lanes`), and the lane variable."""
    group, lane = tirx.Var("vg", str(var.ty.dtype)), tirx.Var("vl", str(var.ty.dtype))
    analyzer.bind(group, ir.Range(0, max(inner // vec, 1)))
    analyzer.bind(lane, ir.Range(0, vec))
    at = group * tirx.const(vec, str(var.ty.dtype)) + lane
    return (lambda e: analyzer.simplify(split_lanes(analyzer.simplify(_subst(e, var, at)), lane, vec, analyzer))), lane


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


class _Accesses:
    """The memory and register accesses, guards and stores of a loop body, and the dynamic sizes
    of the tensors it touches in memory."""

    def __init__(self, body):
        loads = collect(body, ir.TensorLoad)
        self.stores = collect(body, tirx.BufferStore)
        accesses = [(ld.source, list(ld.indices)) for ld in loads]
        accesses += [(st.buffer, list(st.indices)) for st in self.stores]
        self.all = accesses
        self.memory = [(b, idx) for b, idx in accesses if b.scope() in ("global", "shared", "shared.dyn")]
        self.registers = [(b, idx) for b, idx in accesses if b.scope() in ("local", "local.fragment", "local.var")]
        self.conds = [s.condition for s in collect(body, tirx.IfThenElse)]
        self.conds += [c.args[0] for c in collect(body, ir.Call) if is_if_then_else(c)]
        dims = []
        for b, _ in self.memory:
            for extent in list(b.shape) + list(b.strides or []):
                for v in collect(extent, ir.Var):
                    if not any(v.same_as(d) for d in dims):
                        dims.append(v)
        self.dynamic_dims = dims

    def fit(self, var, inner: int, vec: int, analyzer, assumed=()) -> bool:
        """Whether a vector of `vec` lanes along `var` is legal, with the sizes `assumed` taken as
        multiples of vec."""
        if inner % vec:
            return False
        if assumed:
            with contextlib.ExitStack() as scopes:  # one scope each: the analyzer reads no conjunctions
                for d in assumed:
                    scopes.enter_context(analyzer.constraint_scope(multiples([d], vec)))
                return self.fit(var, inner, vec, analyzer)
        grouped = []  # (set on first use) var as group * vec + lane, for indices through // and %

        def lanes():
            if not grouped:
                grouped.extend(_lane_groups(var, vec, inner, analyzer))
            return grouped

        def memory_ok(offset) -> bool:
            if _aligned_unit_stride(offset, var, vec, analyzer):
                return True
            split, lane = lanes()
            return _aligned_unit_stride(split(offset), lane, vec, analyzer)

        def condition_ok(cond) -> bool:
            if _uniform_condition(cond, var, vec, analyzer):
                return True
            split, lane = lanes()
            return _uniform_condition(split(cond), lane, vec, analyzer)

        return (
            all(memory_ok(_flat_offset(b, idx)) for b, idx in self.memory)
            and all(_register_lanes_line_up(_flat_offset(b, idx), var, vec, analyzer) for b, idx in self.registers)
            and all(condition_ok(c) for c in self.conds)
        )


def multiples(dims, vec: int):
    """The condition that each of `dims` is a multiple of `vec`."""
    cond = None
    for d in dims:
        c = tirx.floormod(d, tirx.const(vec, str(d.ty.dtype))) == tirx.const(0, str(d.ty.dtype))
        cond = c if cond is None else tirx.And(cond, c)
    return cond


def vector_guard(loop_vars, extents, body, analyzer, vec: int) -> list:
    """The dynamic sizes that must be multiples of `vec` for a vector of `vec` lanes along the
    innermost loop variable to be legal (the lowering checks them at run time; `multiples`), or []
    when it is legal as it stands (or not even then: the plan did not rely on an assumption)."""
    acc, var, inner = _Accesses(body), loop_vars[-1], const_int(extents[-1])
    if vec <= 1 or inner is None or acc.fit(var, inner, vec, analyzer) or not acc.dynamic_dims:
        return []
    needed = list(acc.dynamic_dims)
    if not acc.fit(var, inner, vec, analyzer, needed):
        return []
    for d in list(needed):  # keep only the sizes the proof needs: the check passes more often
        rest = [x for x in needed if not x.same_as(d)]
        if acc.fit(var, inner, vec, analyzer, rest):
            needed = rest
    return needed


MULTIPLE_OF = "tl.multiple_of"  # AttrStmt(n, MULTIPLE_OF, V): n is a multiple of V in its body


def mark_multiple_of(dims, vec: int, body: tirx.Stmt) -> tirx.Stmt:
    """`body`, in which each of `dims` (dynamic sizes) is known to be a multiple of `vec`: the pass
    `expose_dynamic_multiples` writes them so that the code generator sees it."""
    for d in dims:
        body = tirx.AttrStmt(d, MULTIPLE_OF, tirx.const(vec, "int32"), body)
    return body


def plan_vector_size(loop_vars, extents, body, analyzer, limit: int = 0) -> int:
    """The largest legal vector width (elements) for the innermost of `loop_vars`, where the dynamic
    sizes of the tensors it touches may be assumed multiples of it (`vector_guard`)."""
    var = loop_vars[-1]
    inner = const_int(extents[-1])
    if inner is None:
        return 1
    calls = [e.value for e in collect(body, tirx.Evaluate)]
    adds = [atomic.vectorizable_add(c) for c in calls]
    if any(a is None for a in adds):
        return 1  # calls with side effects that have no vector form
    if adds:
        # Element adds along the loop: 2 or 4 at a time (`parallel.lower` makes them one vector
        # atomic), each into its own element.
        if any(not _depends_on(_flat_offset(a.source, list(a.indices)), var) for a in adds):
            return 1
        limit = min(limit, 4) if limit else 4
    acc = _Accesses(body)
    if any(str(b.dtype) == "bool" for b, _ in acc.all):
        # TVM's CUDA code generator writes a vector of 2 bools as a ushort2 (4 bytes over 2 one-byte
        # elements): a mask fragment stored 2 at a time overwrote its neighbours' entries.
        return 1
    # Memory accesses are at most 128 bits; values computed in registers (e.g. fp16 widened to fp32)
    # may be wider, as far as the code generator has a type for them (`register_lanes`).
    # (A load at the same address for every lane, such as a page index read from a table inside
    # another access's index, is one scalar load: it does not limit the vector.)
    moving = [(b, idx) for b, idx in acc.memory if _depends_on(_flat_offset(b, idx), var)]
    widths = [MAX_VECTOR_BITS // dtype_bits(str(b.dtype)) for b, _ in moving]
    widths += [register_lanes(dtype_bits(str(b.dtype))) for b, _ in acc.all]
    widths += [register_lanes(_cast_bits(c)) for c in _value_casts(body, var)]
    widths = widths or [1]
    vec = min(min(widths), limit) if limit else min(widths)
    if any(not _depends_on(_flat_offset(st.buffer, list(st.indices)), var) for st in acc.stores):
        return 1  # the lanes would all store to one element (a reduction along the loop, `acc[i] += ...`)
    while vec > 1:
        if acc.fit(var, inner, vec, analyzer) or acc.fit(var, inner, vec, analyzer, acc.dynamic_dims):
            return vec
        vec //= 2
    return 1

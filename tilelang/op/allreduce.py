"""`T.tvm_thread_allreduce`: combine per-thread values over threads of the block, every thread of
the group receiving the result (an all-reduce), inside
`with T.attr(T.comm_reducer(combiner, identities), "reduce_scope", ...)` as in TVM and TileLang:

    with T.attr(T.comm_reducer(lambda x, y: x + y, [T.cast(0, "float32")]), "reduce_scope",
                T.reinterpret(T.uint64(0), dtype="handle")):
        T.evaluate(T.tvm_thread_allreduce(T.uint32(1), acc[0], True, total[0], tk, dtype="handle"))

Arguments: the number of values n, n values, a condition (a thread whose condition is false
contributes the identity), n local elements receiving the results, then the thread indices to
reduce over (`T.get_thread_binding(1)`, `T.thread_binding(...)`): the threads that differ only in
those indices form a group.

Also the all-reduce every reduction across threads lowers to (`all_reduce`, used by
`T.finalize_reducer` too): the threads of a group are digit ranges (stride, count) of the
kernel's thread index. Ranges inside a warp combine by butterfly shuffles (`tl::shfl_xor`), ranges
across warps through a shared workspace (one value per warp once the warp's lanes agree, else one
per thread), with the barriers thread_sync puts between its writes and reads.
"""

from __future__ import annotations

from tvm import ir, tirx
from tvm.script.ir_builder import IRBuilder

from tilelang.dtypes import bits as dtype_bits
from tilelang.errors import UserError, at_span
from tilelang.layout import fragment as fl
from tilelang.op import base
from tilelang.utils.ir import const_int, seq
from tilelang.utils.ir import i32 as _c

NAME = "thread_allreduce"
__all__ = ["tvm_thread_allreduce"]
WARP = 32
WORKSPACE_BYTES = 16384  # the most shared memory one cross-warp stage takes at once
UNROLL_SLOTS = 8


def _enclosing_reducer():
    """The CommReducer of the innermost `T.attr(reducer, "reduce_scope", ...)` being traced."""
    for frame in reversed(list(IRBuilder.current().frames)):
        if type(frame).__name__ == "AttrFrame" and str(frame.attr_key) == "reduce_scope":
            if isinstance(frame.node, tirx.CommReducer):
                return frame.node
    return None


def tvm_thread_allreduce(*args, dtype="handle"):
    """All-reduce values over threads: `T.tvm_thread_allreduce(n, v_1..v_n, cond, r_1..r_n,
    thread_1, ...)` inside `T.attr(T.comm_reducer(...), "reduce_scope", ...)` (see the module
    docstring). Every thread of a group gets the combined values in r_1..r_n (local elements).

    Errors: UserError outside a reduce_scope, on a count that does not match the reducer's, results
    that are not local elements, or reduce indices that are not thread indices.

    Example: see the module docstring (a split-K GEMV's partial sums over threadIdx.y).
    """
    del dtype  # TileLang passes dtype="handle": the call is a statement
    what = "T.tvm_thread_allreduce"
    reducer = _enclosing_reducer()
    if reducer is None:
        raise UserError(
            f'{what} must be inside `with T.attr(T.comm_reducer(combiner, identities), "reduce_scope", ...)`, '
            f"which gives the combiner"
        )
    n = const_int(args[0]) if args and isinstance(args[0], (int, tirx.IntImm)) else None
    if n is None or n < 1:
        raise UserError(f"{what}: the first argument is the number of values reduced (e.g. T.uint32(1))")
    if n != len(reducer.lhs):
        raise UserError(f"{what}: {n} values, but the comm_reducer combines {len(reducer.lhs)}")
    if len(args) < 2 * n + 3:
        raise UserError(
            f"{what}: expected {n} values, a condition, {n} result elements and at least one thread index, "
            f"got {len(args) - 1} arguments after the count"
        )
    values = list(args[1 : 1 + n])
    cond = args[1 + n]
    results = list(args[2 + n : 2 + 2 * n])
    threads = list(args[2 + 2 * n :])
    cond = tirx.const(bool(cond), "bool") if isinstance(cond, (bool, int)) else cond
    for r in results:
        if not isinstance(r, ir.TensorLoad) or r.source.scope() != "local":
            raise UserError(
                f"{what}: each result must be an element of a T.alloc_local buffer (every thread gets the "
                f"result), got {r!r}"
            )
    for t in threads:
        if not isinstance(t, ir.Var) or tirx.is_buffer_var(t):
            raise UserError(f"{what}: reduce over thread indices (T.get_thread_binding(k)), got {t!r}")
    values = [_as(v, str(x.ty.dtype)) for v, x in zip(values, reducer.lhs)]
    args = [tirx.const(n, "int32"), tirx.const(len(threads), "int32"), *values, cond, *results]
    args += [_closed(r, reducer) for r in reducer.result] + [*reducer.identity_element, *threads]
    return base.make_call(NAME, args)


def _closed(expr, reducer):
    """`expr` (in the reducer's x and y) as a closed expression: each variable bound by a Let (to
    the identity, a placeholder), so the call holds no free variable; `_opened` takes it apart."""
    variables = [*reducer.lhs, *reducer.rhs]
    fresh = [tirx.Var(v.name, v.ty) for v in variables]  # each expression binds its own (the IR is SSA)
    expr = fl.substitute(expr, dict(zip(variables, fresh)))
    for var, ident in reversed(list(zip(fresh, [*reducer.identity_element] * 2))):
        expr = tirx.Let(var, ident, expr)
    return expr


def _opened(expr):
    """(the variables `_closed` bound, in order, and the expression in them)."""
    variables = []
    while isinstance(expr, tirx.Let):
        variables.append(expr.var)
        expr = expr.body
    return variables, expr


def _as(value, dtype):
    if isinstance(value, (bool, int, float)):
        return tirx.const(value, dtype)
    return value if str(value.ty.dtype) == dtype else tirx.Cast(dtype, value)


@base.register
class ThreadAllReduce(base.TileOp):
    """A parsed `tl.thread_allreduce(n, m, n values, cond, n results, n combined values (closed over
    the reducer's x and y), n identities, m thread indices)`."""

    name = NAME

    def __init__(self, call, span=None):
        super().__init__(call, span)
        a = list(call.args)
        n, m = int(a[0].value), int(a[1].value)
        k = 2
        self.values, k = a[k : k + n], k + n
        self.cond, k = a[k], k + 1
        self.results, k = a[k : k + n], k + n
        opened = [_opened(e) for e in a[k : k + n]]
        k += n
        self.identities, k = a[k : k + n], k + n
        self.threads = a[k : k + m]
        self.lhs, self.rhs = opened[0][0][:n], opened[0][0][n:]
        self.combined = [fl.substitute(e, dict(zip(v, opened[0][0]))) for v, e in opened]

    def describe(self) -> str:
        return "T.tvm_thread_allreduce"

    def combine(self, xs, ys):
        """The reducer's combined values for x = xs, y = ys."""
        mapping = dict(zip(self.lhs, xs))
        mapping.update(zip(self.rhs, ys))
        return [fl.substitute(e, mapping) for e in self.combined]

    def lower(self, ctx) -> tirx.Stmt:
        groups = [thread_group(ctx, t, self.span) for t in self.threads]
        accs = [
            tirx.decl_buffer((1,), str(v.ty.dtype), f"allreduce_{k}", scope="local") for k, v in enumerate(self.values)
        ]
        stmts = [tirx.AllocBuffer(a) for a in accs]
        for acc, value, ident in zip(accs, self.values, self.identities):
            stmts.append(tirx.BufferStore(acc, tirx.Select(self.cond, value, ident), [_c(0)]))
        stmts += all_reduce(ctx, accs, 1, sorted(groups), self.combine)
        for res, acc in zip(self.results, accs):
            stmts.append(tirx.BufferStore(res.source, tirx.BufferLoad(acc, [_c(0)]), list(res.indices)))
        return seq(stmts)


def thread_group(ctx, var, span) -> tuple[int, int]:
    """(stride, count): the digit range of the kernel's thread index that thread index `var` is."""
    linear, _ = ctx.block_thread
    ana = ctx.analyzer
    stride = const_int(ana.simplify(fl.substitute(linear, {var: var + 1}) - linear))
    bound = ana.const_int_bound(var)
    if not stride or stride < 0 or bound.min_value != 0:
        raise at_span(
            f"T.tvm_thread_allreduce: '{var}' is not a thread index of this kernel (T.get_thread_binding(k))",
            span,
        )
    return stride, int(bound.max_value) + 1


# ---- the all-reduce ------------------------------------------------------------------------------


def _pow2(n: int) -> bool:
    return n > 0 and n & (n - 1) == 0


def _split(groups, num_threads: int):
    """Digit ranges split into those inside a warp (shuffles: powers of two within 32 lanes) and
    those across warps (the workspace). A block of partial warps uses the workspace only: a
    shuffle names all 32 lanes."""
    if num_threads % WARP:
        return [], list(groups)
    inside, across = [], []
    for stride, count in groups:
        if _pow2(stride) and _pow2(count) and stride * count <= WARP:
            inside.append((stride, count))
        elif _pow2(stride) and _pow2(count) and stride < WARP:
            lanes = WARP // stride
            inside.append((stride, lanes))
            across.append((WARP, count // lanes))
        else:
            across.append((stride, count))
    return inside, across


def _lanes_agree(inside) -> bool:
    """Whether the shuffle stages combine all 32 lanes of a warp (each lane then holds the same)."""
    covered = 1
    for stride, count in sorted(inside):
        if stride != covered:
            return False
        covered *= count
    return covered == WARP


def all_reduce(ctx, accs, slots: int, groups, combine) -> list:
    """Statements that combine slot s of the register arrays `accs` (one per combined value) over
    the threads of `groups` [(stride, count)], for every s < slots, with `combine(xs, ys) -> values`
    (associative and commutative); every thread of a group ends with the group's result, the same
    bits in each."""
    inside, across = _split(groups, ctx.block_thread[1])
    stmts = [_shuffle_stage(accs, slots, stride, count, combine) for stride, count in inside]
    per_warp = _lanes_agree(inside)
    for stride, count in across:
        stmts.append(_workspace_stage(ctx, accs, slots, stride, count, combine, per_warp))
    return stmts


def _update(accs, index, new_values, scratch_name) -> tirx.Stmt:
    """accs[k][index] = new_values[k] for every k, all computed before any is written."""
    if len(accs) == 1:
        return tirx.BufferStore(accs[0], new_values[0], [index])
    tmps = [tirx.decl_buffer((1,), str(a.dtype), f"{scratch_name}_{k}", scope="local") for k, a in enumerate(accs)]
    body = [tirx.BufferStore(t, v, [_c(0)]) for t, v in zip(tmps, new_values)]
    body += [tirx.BufferStore(a, tirx.BufferLoad(t, [_c(0)]), [index]) for a, t in zip(accs, tmps)]
    return seq([tirx.AllocBuffer(t) for t in tmps] + body)


def _shuffle_stage(accs, slots, stride, count, combine) -> tirx.Stmt:
    """Butterfly rounds over lanes `stride` apart. Each round's shuffles are statements of their
    own: every lane must execute them (a shuffle inside the combiner's `Select` would run on some
    lanes only)."""
    s = tirx.Var("s", "int32")
    body, offset = [], stride
    while offset < stride * count:
        mine = [tirx.BufferLoad(a, [s]) for a in accs]
        moved = [tirx.decl_buffer((1,), str(a.dtype), f"shuffled_{k}", scope="local") for k, a in enumerate(accs)]
        body += [tirx.AllocBuffer(m) for m in moved]
        for m, value in zip(moved, mine):
            body.append(tirx.BufferStore(m, tirx.call_extern(str(m.dtype), "tl::shfl_xor", value, _c(offset)), [_c(0)]))
        theirs = [tirx.BufferLoad(m, [_c(0)]) for m in moved]
        body.append(_update(accs, s, combine(mine, theirs), "combined"))
        offset *= 2
    return tirx.For(s, _c(0), _c(slots), _slot_loop(slots), seq(body))


def _slot_loop(slots: int):
    """Unrolled over a few slots (a reduction's rows), a plain loop over many (a reducer's
    elements), which nvcc unrolls as it sees fit."""
    return tirx.ForKind.UNROLLED if slots <= UNROLL_SLOTS else tirx.ForKind.SERIAL


def _workspace_stage(ctx, accs, slots, stride, count, combine, per_warp) -> tirx.Stmt:
    """Every thread (or lane 0 of every warp, when the lanes agree and the range is of whole warps)
    publishes its slots; then each folds those of its group, in the same order in every thread so
    all get identical results. Slots go in chunks of at most WORKSPACE_BYTES."""
    block_thread, n = ctx.block_thread
    per_warp = per_warp and stride % WARP == 0 and n % WARP == 0
    writers = n // WARP if per_warp else n
    width = sum(max(dtype_bits(str(a.dtype)) // 8, 1) for a in accs)
    chunk = max(1, min(slots, WORKSPACE_BYTES // (writers * width)))
    works = [ctx.workspace(chunk * writers, str(a.dtype)) for a in accs]
    base_thread = fl.clear_groups(ctx.thread, [(stride, count)])
    if ctx.thread_offset:
        base_thread = base_thread + _c(ctx.thread_offset)
    if per_warp:
        me, first, step = tirx.floordiv(block_thread, _c(WARP)), tirx.floordiv(base_thread, _c(WARP)), stride // WARP
    else:
        me, first, step = block_thread, base_thread, stride
    c, i, d = tirx.Var("c", "int32"), tirx.Var("i", "int32"), tirx.Var("d", "int32")
    s = c * _c(chunk) + i if chunk < slots else i
    publish = seq([tirx.BufferStore(w, tirx.BufferLoad(a, [s]), [i * _c(writers) + me]) for w, a in zip(works, accs)])
    if per_warp:
        publish = tirx.IfThenElse(tirx.floormod(block_thread, _c(WARP)) == _c(0), publish, None)
    theirs = [tirx.BufferLoad(w, [i * _c(writers) + first + d * _c(step)]) for w in works]
    mine = [tirx.BufferLoad(a, [s]) for a in accs]
    # Start from the group's first member, not the identity: max(-FLT_MAX, -inf) would not be -inf.
    gather = seq(
        [
            seq([tirx.BufferStore(a, fl.substitute(t, {d: _c(0)}), [s]) for a, t in zip(accs, theirs)]),
            tirx.For(d, _c(1), _c(count - 1), tirx.ForKind.SERIAL, _update(accs, s, combine(mine, theirs), "gathered")),
        ]
    )
    valid = None if chunk >= slots or slots % chunk == 0 else s < _c(slots)

    def over_chunk(stmt):
        stmt = tirx.IfThenElse(valid, stmt, None) if valid is not None else stmt
        fresh = tirx.Var("i", "int32")  # each loop its own variable (the IR stays SSA)
        stmt = fl.substitute(stmt, {i: fresh})
        return tirx.For(fresh, _c(0), _c(min(chunk, slots)), _slot_loop(slots), stmt)

    body = seq([over_chunk(publish), over_chunk(gather)])
    if chunk >= slots:
        return body
    return tirx.For(c, _c(0), _c(-(-slots // chunk)), tirx.ForKind.SERIAL, body)

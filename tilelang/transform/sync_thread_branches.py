"""Passes `expose_thread_branches` and `restore_thread_branches`: barriers for thread branches, the
`if tx < n:` / else, `if tx >= n:` or `if a <= tx < b:` around tile ops that `lower_tile_ops`
marks with each side's threads [lo, hi).

TVM's barrier insertion refuses thread-dependent branches: a `__syncthreads()` inside one would
wait for threads that never come. So around it:

1. `expose_thread_branches` (before barrier insertion) takes the condition away, leaving the sides
   in sequence under a mark each, and puts a block barrier before and after the branch when it
   touches shared memory. The barrier before orders the branch after every earlier access by the
   other threads (a gemm of another warpgroup still reading last iteration's scores); the one after
   makes what the branch wrote visible to everyone.
2. TVM then inserts barriers inside either side as if every thread ran it. Those order accesses
   within the side only: the barriers around the branch settle everything else (one TVM puts
   between the two sides is dropped: they run side by side).
3. `restore_thread_branches` (after barrier insertion) puts the condition back and turns the
   barriers inside each side into named barriers over its threads, `bar.sync id, hi - lo`, one id
   per distinct range, from `barrier_ids.THREAD_BRANCHES`.

Before:  if tx < 128:          1: sync                    3: sync
             S[...] = ...         mark([0, 128)):            if tx < 128:
                                      S[...] = ...               S[...] = ...
                                  sync                       sync

A condition the same for every thread of the block (`if tile < total:` in a persistent kernel's
loop over tiles: block indices, loop counters and scalars only; tensors the kernel does not write,
such as a tile table an earlier kernel of the function filled) is marked thread-invariant for
TVM, which then places barriers inside it too, and unmarked afterwards. TVM's barrier insertion
runs through `thread_sync`, which reports a barrier needed under any other condition as the user's
mistake, at their `if`.

With `tl.disable_thread_storage_sync` (as in TileLang: the kernel orders its shared memory itself
with T.sync_threads), TVM's barrier insertion does not run, and `expose_thread_branches` puts no
barriers around the branches either; the user's own block barriers inside a side still become
named barriers over its threads.

Requires: `lower_tile_ops` (the marks), shared memory merged. Guarantees: no `tl.thread_branch`
attribute remains after `restore_thread_branches`.
"""

from __future__ import annotations

import tvm
import tvm_ffi
from tvm import ir, s_tir, tirx

from tilelang import intrinsics
from tilelang.errors import UserError, at_span
from tilelang.options import DEFAULT_OPTIONS, CompileOptions
from tilelang.transform import barrier_ids
from tilelang.transform.common import kernels
from tilelang.utils.ir import block_sync, collect, const_int, is_block_barrier, is_pure_call, seq, statements

THREAD_BRANCH = "tl.thread_branch"  # one side of a thread branch: node [lo, hi)
_HIDDEN = "tl.thread_branch_condition"  # a branch whose condition is hidden: node the condition
_DONE = "tl.thread_branch_done"  # a side whose barriers are named ones already
_SHARED = ("shared", "shared.dyn")


def mark(rng, body):
    """`body`, one side of a thread branch, run by threads [lo, hi) = `rng`."""
    return tirx.AttrStmt(tvm.runtime.convert([int(rng[0]), int(rng[1])]), THREAD_BRANCH, 0, body)


def _is_mark(stmt) -> bool:
    return isinstance(stmt, tirx.AttrStmt) and stmt.attr_key == THREAD_BRANCH


def _shared_scopes(stmt) -> set:
    """The shared-memory scopes `stmt` accesses."""
    found = set()

    def on_load(node):
        if str(node.source.scope()) in _SHARED:
            found.add(str(node.source.scope()))

    def on_store(node):
        if str(node.buffer.scope()) in _SHARED:
            found.add(str(node.buffer.scope()))

    def on_call(call):
        if isinstance(call.op, ir.Op) and call.op.name == "tirx.tvm_access_ptr":
            data = call.args[1]
            if isinstance(data.ty, ir.PointerType) and str(data.ty.storage_scope) in _SHARED:
                found.add(str(data.ty.storage_scope))

    tvm_ffi.structural_walk(stmt, [(ir.TensorLoad, on_load), (tirx.BufferStore, on_store), (ir.Call, on_call)])
    return found


def _data_name(source):
    """The name of a loaded or stored buffer (TVM 0.27 gives buffers as Vars), or None."""
    return getattr(source, "name", None) if tirx.is_buffer_var(source) else None


def _register_writes(body):
    """({register array name: its stores}, [(expressions, names of the register arrays stored where
    they decide)]): an `if`'s condition decides whether the stores under it run, a loop's bounds
    how often. Register arrays are `local` buffers (T.alloc_var, T.alloc_local, fragments)."""
    stores, scoped = {}, []

    def stored_under(stmt):
        names = set()
        tvm_ffi.structural_walk(
            stmt,
            [(tirx.BufferStore, lambda st: names.add(_data_name(st.buffer)) if st.buffer.scope() == "local" else 0)],
        )
        return names

    def on_store(st):
        if st.buffer.scope() == "local":
            stores.setdefault(_data_name(st.buffer), []).append(st)

    tvm_ffi.structural_walk(
        body,
        [
            (tirx.BufferStore, on_store),
            (tirx.IfThenElse, lambda n: scoped.append(([n.condition], stored_under(n)))),
            (tirx.For, lambda n: scoped.append(([n.min, n.extent], stored_under(n.body)))),
            (tirx.While, lambda n: scoped.append(([n.condition], stored_under(n.body)))),
        ],
    )
    return stores, scoped


def _block_uniform(body):
    """A test of whether an expression has one value across the threads of a block: it calls only
    pure functions (`if_then_else`, `min`), reads memory only from global tensors the kernel never
    writes (a block-sparse mask, `if BlockMask[by, bx, k]:`) and from register arrays only ever
    written uniform values (a fragment every thread holds whole, `if mask[k]:`; a T.alloc_var
    flag), at uniform indices, and its variables are block indices, scalar parameters, or loop and
    let variables defined from such expressions."""
    defs, varying, written = {}, set(), set()

    def on_attr(node):
        if node.attr_key == "thread_extent" and not str(node.node.thread_tag).startswith("blockIdx"):
            varying.add(node.node.var)

    # Written memory by buffer name: a tensor can reach a pass as several buffer objects of one
    # name (a clash only makes the test stricter).
    written_by_call = set()

    def on_call(call):  # memory a call may write through a pointer it takes (atomics, templates)
        for arg in call.args:
            if isinstance(arg, ir.Call) and isinstance(arg.op, ir.Op) and arg.op.name == "tirx.address_of":
                # The addressed element's tensor; loads inside its indices (a gather's idx[k]) are reads.
                if isinstance(arg.args[0], ir.TensorLoad):
                    written_by_call.add(_data_name(arg.args[0].source))
                else:  # not an element: every tensor it loads may be written
                    tvm_ffi.structural_walk(
                        arg, [(ir.TensorLoad, lambda ld: written_by_call.add(_data_name(ld.source)))]
                    )
            elif isinstance(arg, ir.Call) and isinstance(arg.op, ir.Op) and arg.op.name == "tirx.tvm_access_ptr":
                if const_int(arg.args[4]) is None or const_int(arg.args[4]) & 2:  # its read/write mask
                    written_by_call.add(str(arg.args[1]).removesuffix(".data"))

    tvm_ffi.structural_walk(
        body,
        [
            (tirx.AttrStmt, on_attr),
            (tirx.LetStmt, lambda n: defs.__setitem__(n.var, [n.value])),
            (tirx.Bind, lambda n: defs.__setitem__(n.var, [n.value])),
            (tirx.For, lambda n: defs.__setitem__(n.loop_var, [n.min, n.extent])),
            (tirx.BufferStore, lambda n: written.add(_data_name(n.buffer))),
            (ir.Call, on_call),
        ],
    )
    written |= written_by_call

    known = {}  # variable -> uniform, each decided once (per round of the fixpoint below)

    def uniform_var(v) -> bool:
        if v not in known:
            known[v] = v not in varying and all(uniform(d) for d in defs.get(v, []))
        return known[v]

    def uniform(expr) -> bool:
        ok = [True]

        def on_var(v):
            if not uniform_var(v):
                ok[0] = False

        def on_call(call):  # a pure call (if_then_else, min, a cast) is as uniform as its arguments
            if not is_pure_call(call):
                ok[0] = False

        def on_load(ld):
            name = _data_name(ld.source)
            readonly = name is not None and ld.source.scope() == "global" and name not in written
            registers = name in stores and ld.source.scope() == "local" and name not in varying_arrays
            if not ((readonly or registers) and all(uniform(i) for i in ld.indices)):
                ok[0] = False

        tvm_ffi.structural_walk(expr, [(tirx.Var, on_var), (ir.TensorLoad, on_load), (ir.Call, on_call)])
        return ok[0]

    # Register arrays: assumed uniform, then any written a varying value, at a varying index, under
    # a varying condition or through a pointer is not, until nothing changes (a greatest fixpoint:
    # `flag = flag or mask[k]` stays uniform).
    stores, scoped = _register_writes(body)
    varying_arrays = set(written_by_call)
    while True:
        known.clear()
        bad = {
            name
            for name, sts in stores.items()
            if name not in varying_arrays
            and not all(uniform(st.value) and all(uniform(i) for i in st.indices) for st in sts)
        }
        bad |= {
            name for exprs, names in scoped for name in names - varying_arrays if not all(uniform(e) for e in exprs)
        }
        if not bad:
            return uniform
        varying_arrays |= bad


def expose_thread_branches(func: tirx.PrimFunc, options: CompileOptions = DEFAULT_OPTIONS) -> tirx.PrimFunc:
    """Each kernel of the function on its own: a tensor an earlier kernel wrote is read-only in a
    later one (the launches run in order), so a condition on it is block-uniform there."""
    roots = kernels(func.body)
    if not roots:
        return func.with_body(_expose_in(func.body, options))
    done = [(root, _expose_in(root, options)) for root in roots]

    def on_attr(node):
        return next((new for root, new in done if node.same_as(root)), node)

    return func.with_body(tvm_ffi.structural_map(func.body, [(tirx.AttrStmt, on_attr)], order="pre"))


def _expose_in(body, options: CompileOptions):
    uniform = _block_uniform(body)
    barriers = not options.disable_thread_storage_sync

    def on_if(node):
        if not (_is_mark(node.then_case) or _is_mark(node.else_case)):
            if uniform(node.condition):
                invariant = tirx.call_intrin(node.condition.ty, "tirx.tvm_thread_invariant", node.condition)
                return tirx.IfThenElse(invariant, node.then_case, node.else_case, span=node.span)
            return node
        scopes = set()
        for case in (node.then_case, node.else_case):
            scopes |= _shared_scopes(case) if case is not None else set()
        if not scopes:  # nothing to order: the branch goes back as it was
            plain = [c.body if _is_mark(c) else c for c in (node.then_case, node.else_case)]
            return tirx.IfThenElse(node.condition, plain[0], plain[1], span=node.span)
        # TVM's barrier insertion runs once per scope and counts only barriers of its own scope;
        # one barrier of the merged dynamic block orders the static tiles too.
        sync = block_sync("shared.dyn" if "shared.dyn" in scopes else "shared")
        # The sides in sequence, as if every thread ran both (TVM's barrier insertion accepts no
        # thread-dependent condition; a placeholder counts as one too).
        sides = [c for c in (node.then_case, node.else_case) if c is not None]
        flag = 1 if node.else_case is not None else 0
        hidden = tirx.AttrStmt(node.condition, _HIDDEN, flag, seq(sides))
        return seq([sync, hidden, sync]) if barriers else hidden

    return tvm_ffi.structural_map(body, [(tirx.IfThenElse, on_if)], order="post")


def _is_invariant_mark(cond) -> bool:
    return isinstance(cond, ir.Call) and isinstance(cond.op, ir.Op) and cond.op.name == "tirx.tvm_thread_invariant"


def thread_sync(scope: str):
    """TVM's barrier insertion for `scope`. Where it refuses to put a barrier under a condition that may
    differ between threads, the compiler's own thread guards are split around it (`_split_thread_guards`)
    and it is asked again; a refusal that stands becomes a UserError at the user's `if`."""
    insert = s_tir.transform.ThreadSync(scope)

    def refused(err) -> bool:
        return "Cannot insert syncs inside condition" in str(err)

    def run(mod):
        try:
            return insert(mod)
        except Exception as err:  # noqa: BLE001 (one message of TVM's is the user's mistake)
            if not refused(err):
                raise
        split = _split_thread_guards(mod)
        if split is not None:
            try:
                return insert(split)
            except Exception as err:  # noqa: BLE001
                if not refused(err):
                    raise
        raise _barrier_under_a_varying_condition(mod) from None

    return run


def _barrier_under_a_varying_condition(mod) -> UserError:
    """The UserError for TVM's refusal, at the `if`s around shared-memory work whose condition may vary."""
    suspects = []

    def on_if(node):
        sides = [c for c in (node.then_case, node.else_case) if c is not None]
        if not _is_invariant_mark(node.condition) and any(_shared_scopes(c) for c in sides):
            suspects.append(node.span)

    for func in mod.functions.values():
        tvm_ffi.structural_walk(func.body, [(tirx.IfThenElse, on_if)])
    return at_span(
        "threads read shared memory other threads wrote inside an `if` whose condition may differ "
        "between the threads of a block (it reads memory or depends on the thread index): the "
        "barrier it needs could wait for threads that never come. Compute the condition from block "
        "indices, loop counters and scalar arguments only, or move the shared-memory work out of it",
        *suspects,
    )


def _split_thread_guards(mod):
    """`mod` with each `if c: s1; s2; ...` that the compiler made (a T.Parallel loop's `if tx < 64:`
    over fewer items than threads; the user's own `if`s keep their error), whose condition reads no
    memory and calls nothing, written as `if c: s1`, `if c: s2`, ...: c is the same before each, and a
    barrier between two of the statements (s2 reads what another thread wrote before the `if`) then
    goes between two `if`s, where every thread reaches it. None when no `if` was split."""
    changed = []

    def splittable(node) -> bool:
        body = node.then_case
        return (
            node.span is None  # the compiler's guard (a T.Parallel loop's), not an `if` of the user's
            and node.else_case is None
            and isinstance(body, tirx.SeqStmt)
            and not _is_invariant_mark(node.condition)
            and not collect(node.condition, ir.TensorLoad)
            and not collect(node.condition, ir.Call)
            and not any(isinstance(st, (tirx.Bind, tirx.AllocBuffer, tirx.DeclBuffer)) for st in body.seq)
            and bool(_shared_scopes(body))
        )

    def on_if(node):
        if not splittable(node):
            return node
        changed.append(node)
        return tirx.SeqStmt([tirx.IfThenElse(node.condition, st, None, span=node.span) for st in node.then_case.seq])

    funcs = {gv: f.with_body(tvm_ffi.structural_map(f.body, [(tirx.IfThenElse, on_if)], order="post"))
             for gv, f in mod.functions.items()}  # fmt: skip
    return tvm.IRModule(funcs, attrs=mod.attrs) if changed else None


def restore_thread_branches(func: tirx.PrimFunc) -> tirx.PrimFunc:
    ids: dict = {}  # (lo, hi) -> named barrier id, one per distinct range of the kernel
    # Ids the kernel already names (the user's T.sync_threads(id, n)) are not handed out again.
    taken = set()
    tvm_ffi.structural_walk(
        func.body,
        [
            (
                tirx.Evaluate,
                lambda s: (
                    taken.add(intrinsics.NAMED_BARRIER_SYNC.template(s)["id"])
                    if intrinsics.NAMED_BARRIER_SYNC.matches(s)
                    else None
                ),
            )
        ],
    )
    free = [i for i in barrier_ids.THREAD_BRANCHES if i not in taken]

    def barrier_id(rng):
        if rng not in ids:
            if len(ids) == len(free):
                raise UserError(
                    f"thread branches: barriers are needed inside more than {len(free)} different thread "
                    f"ranges (the GPU has 16 named barriers, {len(barrier_ids.THREAD_BRANCHES) - len(free)} of "
                    f"those for branches taken by the kernel's T.sync_threads ids); use fewer distinct "
                    f"`if tx < n` ranges that touch shared memory"
                )
            ids[rng] = free[len(ids)]
        return ids[rng]

    def on_attr(node, mutator):
        body = mutator.default_mutate(node)  # inner branches first: their barriers are theirs
        if _is_mark(node):  # (kept as a mark until its branch is rebuilt)
            lo, hi = (int(x) for x in node.node)
            bar = intrinsics.NAMED_BARRIER_SYNC.stmt({"id": barrier_id((lo, hi)), "threads": hi - lo})
            inner = tvm_ffi.structural_map(body.body, [(tirx.Evaluate, lambda s: bar if is_block_barrier(s) else s)])
            return tirx.AttrStmt(node.node, _DONE, 0, inner)
        if node.attr_key == _HIDDEN:
            # The sides again; a barrier TVM put between them goes (they run side by side).
            stmts = statements(body.body)
            sides = [st.body for st in stmts if isinstance(st, tirx.AttrStmt) and st.attr_key == _DONE]
            assert len(sides) == len([st for st in stmts if not is_block_barrier(st)]), "a thread branch's sides"
            then_case, else_case = (sides[0], sides[1]) if int(node.value) else (sides[0], None)
            return tirx.IfThenElse(node.node, then_case, else_case)
        return body

    def on_if(node):  # a block-uniform condition loses its mark
        if _is_invariant_mark(node.condition):
            return tirx.IfThenElse(node.condition.args[0], node.then_case, node.else_case, span=node.span)
        return node

    body = tvm_ffi.structural_mutate(func.body, [(tirx.AttrStmt, on_attr)])
    return func.with_body(tvm_ffi.structural_map(body, [(tirx.IfThenElse, on_if)], order="post"))

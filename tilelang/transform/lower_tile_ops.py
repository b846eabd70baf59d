"""Pass `lower_tile_ops`: tile ops and `T.Parallel` loops become per-thread code; fragments become
per-thread register arrays and annotated shared tiles are re-indexed through their layout.

Each tile op lowers itself (`TileOp.lower`; parallel loops through `op/parallel.py`) against a
`LowerContext` that knows the layouts from `infer_layout`, the register array of each fragment, the
thread index, and allocates shared workspaces (e.g. for reductions across warps) at the top of the
kernel.

Before:  for i, j in T.Parallel(128, 64): C_f[i, j] = A_s[i, j]          (128 threads, vector 4)
After:   for r in range(16): for v in T.vectorized(4):
             C_f_local[r * 4 + v] = A_s[r * 2 + tx // 16, tx % 16 * 4 + v]

Requires: `infer_layout`. Guarantees: no parallel loops, no tile-op calls and no `local.fragment`
buffers remain; shared buffers with a layout are flat and swizzled.
"""

from __future__ import annotations

import tvm_ffi
from tvm import ir, tirx

from tilelang.errors import CompilerError, at_span
from tilelang.layout import fragment as fl
from tilelang.layout.layout import shared_layout_from_ir
from tilelang.op import base, parallel
from tilelang.options import DEFAULT_OPTIONS, CompileOptions
from tilelang.transform import sync_thread_branches as thread_branch
from tilelang.transform.common import (
    Scope,
    allocate_at_kernel_top,
    collect,
    is_innermost_thread_extent,
    mutate_with_scope,
    walk,
)
from tilelang.transform.infer_layout import (
    DYNAMIC,
    FRAGMENT_LAYOUTS,
    LOOP_LAYOUT,
    SHARED_LAYOUTS,
    THREAD_LOCAL,
)
from tilelang.utils.ir import const_int, extern_name, seq


class LowerContext:
    """What an op's lowering may ask for."""

    def __init__(self, fragments, scope, target=None, shared_layouts=None, options=None, views=None):
        self.target = target
        self.options = options if options is not None else DEFAULT_OPTIONS
        self._fragments = fragments
        self._shared_layouts = shared_layouts or {}
        self.tensor_maps = []  # TMA descriptors (op/tma.py TensorMap) the host encodes before the launch
        self._locals = {
            b: tirx.decl_buffer((f.local_size,), str(b.dtype), f"{b.name}_local", scope="local")
            for b, f in fragments.items()
        }
        # A fragment view (T.reshape / T.view) is its source's registers under another shape.
        for view in views or {}:
            source = view
            while source in views:
                source = views[source]
            self._locals[view] = self._locals[source]
        self._scope = scope
        self.workspaces = []
        self.warpgroup = None  # the kernel's `tl::warpgroup_index()`, bound at its start once used

    @property
    def analyzer(self):
        return self._scope.analyzer

    @property
    def thread(self):
        return self._scope.thread_var()[0]

    @property
    def num_threads(self) -> int:
        return self._scope.thread_var()[1]

    @property
    def thread_offset(self) -> int:
        """The first thread of the thread branch the op is in (0 outside one): `thread` counts
        from it."""
        return self._scope.thread_offset()

    @property
    def block_thread(self):
        """(the kernel's thread index, its number of threads), also inside a thread branch."""
        return self._scope.block_thread()

    @property
    def kernel_span(self):
        """The span of the user's `T.Kernel(..., threads=n)` line (for errors about the threads)."""
        return self._scope.kernel_span

    def fragment_layout(self, buffer) -> fl.Fragment:
        return self._fragments[buffer]

    def shared_layout(self, buffer):
        """The layout inference gave a shared tile (None: row-major)."""
        value = self._shared_layouts.get(buffer)
        return shared_layout_from_ir(value) if value is not None else None

    def local_of(self, buffer):
        return self._locals[buffer]

    def has_local(self, buffer) -> bool:
        return buffer in self._locals

    def warpgroup_index(self):
        """A variable holding this thread's warpgroup (read once per kernel, for the wgmma calls)."""
        if self.warpgroup is None:
            self.warpgroup = tirx.Var("warpgroup", "int32")
        return self.warpgroup

    def workspace(self, size: int, dtype):
        """Shared scratch of `size` elements, live only inside the lowering of one tile op (between
        its writes and its reads, which barriers separate); a kernel's workspaces of one dtype
        become one buffer (`_share_workspaces`)."""
        buf = tirx.decl_buffer((size,), dtype, f"workspace_{len(self.workspaces)}", scope="shared.dyn")
        self.workspaces.append(buf)
        return buf

    def remap(self, stmt):
        """Fragment accesses in `stmt` become accesses of their register arrays."""
        ana = self.analyzer

        def on_load(ld):
            if ld.source in self._fragments:
                _, index = self._fragments[ld.source].map(list(ld.indices))
                return tirx.BufferLoad(self._locals[ld.source], [ana.simplify(index)])
            return ld

        def on_store(st):
            if st.buffer in self._fragments:
                _, index = self._fragments[st.buffer].map(list(st.indices))
                return tirx.BufferStore(self._locals[st.buffer], st.value, [ana.simplify(index)], span=st.span)
            return st

        return tvm_ffi.structural_map(stmt, [(ir.TensorLoad, on_load), (tirx.BufferStore, on_store)], order="post")


def _share_workspaces(stmt, workspaces):
    """One workspace per dtype, as large as the largest: each tile op's scratch is dead once the op
    is done, so they need not take shared memory side by side."""
    by_dtype = {}
    for w in workspaces:
        by_dtype.setdefault(str(w.dtype), []).append(w)
    kept, swap = [], {}
    for dtype, group in by_dtype.items():
        size = max(int(w.shape[0]) for w in group)
        one = tirx.decl_buffer((size,), dtype, f"workspace_{len(kept)}", scope="shared.dyn")
        kept.append(one)
        swap.update({w: one for w in group})
    return fl.substitute(stmt, swap), kept


def lower_tile_ops(func: tirx.PrimFunc, options: CompileOptions = DEFAULT_OPTIONS) -> tirx.PrimFunc:
    fragments = {}
    if func.attrs is not None and FRAGMENT_LAYOUTS in func.attrs:
        fragments = {b: fl.from_ir(v) for b, v in func.attrs[FRAGMENT_LAYOUTS].items()}
    scope = Scope()
    attrs = func.attrs if func.attrs is not None else {}
    views = {v: s for op in map(base.parse, collect(func.body, tirx.Evaluate)) if op for v, s in op.aliases()}
    views = {v: s for v, s in views.items() if v in fragments}
    ctx = LowerContext(fragments, scope, attrs.get("target"), attrs.get(SHARED_LAYOUTS), options, views)

    def on_for(loop, recurse):
        if LOOP_LAYOUT not in loop.annotations:
            return recurse(loop)
        layout = loop.annotations[LOOP_LAYOUT]
        if isinstance(layout, str) and layout == DYNAMIC:
            return parallel.lower_dynamic(loop, ctx)
        if isinstance(layout, str) and layout == THREAD_LOCAL:
            return recurse(parallel.lower_thread_local(loop))
        return parallel.lower(loop, fl.from_ir(layout), ctx)

    def on_eval(stmt, recurse):
        op = base.parse(stmt)
        if op is not None:
            if op.expands:
                raise CompilerError(f"{op.describe()} reached lower_tile_ops; expand_elementwise_ops expands it")
            return op.lower(ctx)
        return stmt

    def on_alloc(stmt, recurse):
        if stmt.buffer in fragments:
            return tirx.AllocBuffer(ctx.local_of(stmt.buffer))
        return stmt

    def on_decl(stmt, recurse):  # a fragment view: its accesses now go to its source's registers
        return tirx.Evaluate(0) if stmt.buffer in fragments else stmt

    def on_attr(stmt, recurse):
        if not is_innermost_thread_extent(stmt):
            return recurse(stmt)
        outer = ctx.workspaces, ctx.warpgroup
        ctx.workspaces, ctx.warpgroup = [], None
        new = recurse(stmt)
        if ctx.warpgroup is not None:
            index = tirx.call_extern("int32", "tl::warpgroup_index")
            new = tirx.AttrStmt(new.node, new.attr_key, new.value, seq([tirx.Bind(ctx.warpgroup, index), new.body]))
        # Shared scratch for this kernel, allocated before its first statement.
        new = allocate_at_kernel_top(*_share_workspaces(new, ctx.workspaces))
        ctx.workspaces, ctx.warpgroup = outer
        return new

    def on_if(stmt, recurse):
        ranges = scope.branch_ranges(stmt.condition)  # (the scope outside the branch)
        always = scope.covers_all_threads(stmt.condition)
        new = recurse(stmt)
        if always:  # `if tx < n` with n past the last thread here
            return new.then_case
        if ranges is None:
            return new
        if new.else_case is not None and ranges[1] is None:
            raise at_span(
                "the else of `if a <= tx < b:` runs on threads on both sides of [a, b); tile ops there "
                "need one range of threads: write two branches (`if tx < a:` ... `elif tx >= b:`)",
                stmt.span,
            )
        # Barriers inside a side become named barriers over its threads (`sync_thread_branches`),
        # but T.alloc_barrier's initialization by thread 0 is not for a side to run.
        if any(extern_name(st) == "tl::mbarrier_init" for st in collect(stmt, tirx.Evaluate)):
            raise at_span(
                "T.alloc_barrier inside a thread branch (`if tx < n:` and the like): thread 0 initializes "
                "the barriers before a barrier over the whole block, which threads outside the branch never "
                "reach; allocate barriers (T.alloc_barrier) outside the branch",
                stmt.span,
            )
        # Each side marked with its threads: barriers around the branch (`sync_thread_branches`).
        then_case = thread_branch.mark(ranges[0], new.then_case)
        else_case = thread_branch.mark(ranges[1], new.else_case) if new.else_case is not None else None
        return tirx.IfThenElse(new.condition, then_case, else_case, span=stmt.span)

    body = func.body
    if SHARED_LAYOUTS in attrs:
        body = _pointers_through_layouts(body, attrs[SHARED_LAYOUTS])
    body = mutate_with_scope(
        body,
        scope,
        {
            tirx.For: on_for,
            tirx.Evaluate: on_eval,
            tirx.AllocBuffer: on_alloc,
            tirx.DeclBuffer: on_decl,
            tirx.AttrStmt: on_attr,
            tirx.IfThenElse: on_if,
        },
    )
    body = _remap_whole_fragments(body, ctx, fragments)
    _check_no_fragment_left(body)
    if func.attrs is not None and SHARED_LAYOUTS in func.attrs:
        body = _apply_shared_layouts(body, func.attrs[SHARED_LAYOUTS])
    if ctx.tensor_maps:  # encoded by the host before the launch: the kernel takes them as parameters
        body = seq([st for m in ctx.tensor_maps for st in m.host_stmts()] + [body])
    func = func.with_body(body)
    for key in (FRAGMENT_LAYOUTS, SHARED_LAYOUTS):
        if func.attrs is not None and key in func.attrs:
            func = func.without_attr(key)
    return func


def _pointers_through_layouts(body, layouts):
    """The kernel's own pointers into laid-out shared tiles point where the layout puts their element.

    `T.access_ptr(KV_s[r, c], "w", 8)` (a hand-written cp.async into a tile a wgmma reads) holds
    the row-major offset of (r, c); the tile's layout moves that element (a swizzle permutes its
    16-byte chunks, gmma panels move whole column blocks), as the public TileLang's lowering does
    for the element it is given. The `extent` elements from there must stay consecutive in the
    layout: an aligned part of one contiguous run (a 16-byte chunk). Runs before the tile ops lower,
    so every pointer here is the kernel's own; a pointer at a tile's first element (an extern taking
    the whole tile) stays, as that element stays in place.
    """
    table = {b: shared_layout_from_ir(v) for b, v in layouts.items()}
    scope = Scope()  # the alignment is proved knowing the kernel's bindings and loop ranges
    errors = []

    def tile(data):  # the tile of a pointer's `S.data` (tirx.buffer_data(S)), if it has a layout
        if isinstance(data, ir.Call) and isinstance(data.op, ir.Op) and data.op.name == "tirx.buffer_data":
            return data.args[0] if data.args[0] in table else None
        return None

    def through_layout(call, span):
        if not (isinstance(call.op, ir.Op) and call.op.name == "tirx.tvm_access_ptr") or tile(call.args[1]) is None:
            return call
        buf = tile(call.args[1])
        layout = table[buf]
        offset, extent = call.args[2], call.args[3]
        if const_int(offset) == 0:
            return call
        n, run = const_int(extent), layout.contiguous_run()
        if n is None or n > run or run % n or not scope.analyzer.can_prove(tirx.floormod(offset, n) == 0):
            errors.append(
                at_span(
                    f"T.access_ptr into '{buf.name}': the tile is laid out for the gemm or TMA copy that "
                    f"reads it, which keeps only aligned blocks of {run} elements consecutive; {extent} "
                    f"elements at offset {offset} are not inside one, so no pointer addresses them. Access "
                    f"at most {run} elements starting at a multiple of {run} (16 bytes of a swizzled tile)",
                    span,
                )
            )
            return call
        indices, rest = [], offset
        for size in reversed([int(d) for d in buf.shape]):
            indices.append(tirx.floormod(rest, size))
            rest = tirx.floordiv(rest, size)
        physical = scope.analyzer.simplify(layout.map(indices[::-1]))
        return ir.Call(call.op, [call.args[0], call.args[1], physical, extent, call.args[4]], ret_ty=call.ty)

    def on_eval(stmt, recurse):
        if not any(isinstance(c.op, ir.Op) and c.op.name == "tirx.tvm_access_ptr" for c in collect(stmt, ir.Call)):
            return stmt
        value = tvm_ffi.structural_map(stmt.value, [(ir.Call, lambda c: through_layout(c, stmt.span))], order="post")
        return stmt if value.same_as(stmt.value) else tirx.Evaluate(value, span=stmt.span)

    body = mutate_with_scope(body, scope, {tirx.Evaluate: on_eval})
    if errors:
        raise errors[0]
    return body


def _apply_shared_layouts(body, layouts):
    """Shared tiles with a layout become flat buffers indexed through it."""
    table = {b: shared_layout_from_ir(v) for b, v in layouts.items()}
    flat = {
        b: tirx.decl_buffer((lay.physical_size,), str(b.dtype), b.name, scope=b.scope()) for b, lay in table.items()
    }

    def on_load(ld):
        if ld.source in table:
            return tirx.BufferLoad(flat[ld.source], [table[ld.source].map(list(ld.indices))])
        return ld

    def on_store(st):
        if st.buffer in table:
            return tirx.BufferStore(flat[st.buffer], st.value, [table[st.buffer].map(list(st.indices))], span=st.span)
        return st

    def on_alloc(stmt):
        return tirx.AllocBuffer(flat[stmt.buffer]) if stmt.buffer in table else stmt

    body = tvm_ffi.structural_map(
        body, [(ir.TensorLoad, on_load), (tirx.BufferStore, on_store), (tirx.AllocBuffer, on_alloc)], order="post"
    )
    # What is left are pointers to the tiles (e.g. a gemm's operands through tvm_access_ptr); their
    # offsets point at a tile's first element, which every swizzle keeps in place.
    return tvm_ffi.structural_map(body, [(ir.Var, lambda v: flat[v] if v in flat else v)])


def _remap_whole_fragments(body, ctx, fragments):
    """Fragments touched outside loops and tile ops (`if mask[k]:`) that every thread holds whole
    (infer_layout gives them that layout): accesses of their register arrays, the same in every thread."""
    whole = {b for b, f in fragments.items() if f.is_fully_replicated()}
    if not whole:
        return body

    def on_load(ld):
        if ld.source in whole:
            index = ctx.analyzer.simplify(fragments[ld.source].map(list(ld.indices))[1])
            return tirx.BufferLoad(ctx.local_of(ld.source), [index])
        return ld

    def on_store(st):
        if st.buffer in whole:
            index = ctx.analyzer.simplify(fragments[st.buffer].map(list(st.indices))[1])
            return tirx.BufferStore(ctx.local_of(st.buffer), st.value, [index], span=st.span)
        return st

    return tvm_ffi.structural_map(body, [(ir.TensorLoad, on_load), (tirx.BufferStore, on_store)], order="post")


def _check_no_fragment_left(body):
    """Fragments touched outside parallel loops have no per-thread form: report the statement."""

    def fragment_reads(node):
        return [ld.source.name for ld in collect(node, ir.TensorLoad) if ld.source.scope() == "local.fragment"]

    def on_store(st):
        if st.buffer.scope() == "local.fragment":
            raise at_span(
                f"fragment '{st.buffer.name}' is written outside a T.Parallel loop or tile op; "
                f"fragments are spread over threads, so index them only inside T.Parallel",
                st.span,
            )
        reads = fragment_reads(st.value) + [n for i in st.indices for n in fragment_reads(i)]
        if reads:
            raise at_span(
                f"fragment '{reads[0]}' is read outside a T.Parallel loop or tile op; "
                f"use T.alloc_local or T.alloc_var for per-thread values",
                st.span,
            )

    def on_if(node):
        reads = fragment_reads(node.condition)
        if reads:
            raise at_span(f"fragment '{reads[0]}' is read outside a T.Parallel loop or tile op", node.span)

    walk(body, [(tirx.BufferStore, on_store), (tirx.IfThenElse, on_if)])

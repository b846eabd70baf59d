"""Hopper (sm_90a) form of a pipelined loop, used by `pipeline_loops`: TMA loads completing on
mbarriers, and (by default) a producer warpgroup feeding the consumer threads.

For `T.Pipelined(n, num_stages=S)` whose global-to-shared copies the TMA unit can do, each copied
tile j gets S buffers and S "full" mbarriers (one arrival: the issuing thread's expect_tx, plus the
tile's bytes). Iteration i uses stage i % S and waits for use i // S of a barrier, parity
(i // S) & 1. A consumer waits on tile j's full barrier just before its first statement that reads
tile j, so one tile's load overlaps the work on another's.

Warp-specialized (default; `tl.disable_warp_specialized` turns it off):

    for i in range(n):                         # producer: one thread of an extra warpgroup
        if i >= S: wait(empty[i % S], (i // S + 1) & 1)      # consumers are done with the stage
        for each tile j: expect_tx + TMA of iteration i into stage i % S, on full_j[i % S]
    for i in range(n):                         # consumers: the kernel's own threads
        wait(full_j[i % S], (i // S) & 1) before the first reader of tile j
        loop body on stage i % S
        arrive(empty[i % S])                   # one per consumer warp (the barrier's count)

When the body is only wgmma gemms on shared tiles, iteration i's gemms run on while the consumers
wait for iteration i - 1's (wg_wait=1) and then free stage (i - 1) % S. A gemm whose shared
operands only TMA writes skips the proxy fence. The producer warpgroup is left out when the loop's
trip count or coordinates read values the consumers compute (registers, shared memory); TMA is left
out for loops inside other loops (the barrier parities count from the loop's first iteration).

The two loops are left in a `tl.ws` region (prelude: barrier allocation and initialization;
producer; consumer). `warp_specialize` later adds the warpgroup, splits the threads, and sets the
register budgets. Without warp specialization, thread 0 issues the loads S - 1 iterations ahead
and a block barrier at the top of each iteration frees the stage the loads overwrite, as the
cp.async pipeline does.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass

from tvm import ir, tirx

from tilelang.layout.fragment import substitute
from tilelang.op import base, gemm_wgmma, tma
from tilelang.op import gemm as gemm_op
from tilelang.transform import pass_config
from tilelang.transform.common import collect, walk
from tilelang.transform.infer_layout import ANNOTATED_LAYOUTS, shared_layout_from_ir
from tilelang.utils.ir import extern, is_zero, seq
from tilelang.utils.target import arch_of

WS_REGION = "tl.ws"  # AttrStmt value: number of consumer threads
WS_PRELUDE = "tl.ws_prelude"
WS_PRODUCER = "tl.ws_producer"
WS_CONSUMER = "tl.ws_consumer"
PRODUCER_THREADS = 128  # one warpgroup: setmaxnreg acts per warpgroup

logger = logging.getLogger("tilelang")


@dataclass
class Kernel:
    """What the planner knows about the kernel around a pipelined loop."""

    func: tirx.PrimFunc
    target: object
    thread: object  # threadIdx.x
    threads: int
    only_x: bool  # no threadIdx.y / threadIdx.z
    specialized: list  # the loops already warp-specialized in this kernel (at most one)
    tma_tiles: tuple = ()  # shared tiles only TMA loads write (`lower_tma_copies`)
    nested: bool = False  # the pipelined loop runs inside another loop


def _bar(buffer, index):
    return tirx.address_of(tirx.BufferLoad(buffer, [index]))


def _uses(stmt, buffer) -> bool:
    found = []

    def hit(node, src):
        if src.same_as(buffer):
            found.append(node)

    walk(stmt, [(ir.TensorRegion, lambda r: hit(r, r.source)), (ir.TensorLoad, lambda ld: hit(ld, ld.source))])
    return bool(found)


def predicted_layout(tile_buffer, kernel: Kernel):
    """The layout layout inference will give `tile_buffer`: annotated, else the one the gemms that
    read it need, else row-major (None)."""
    annotated = kernel.func.attrs.get(ANNOTATED_LAYOUTS) if kernel.func.attrs is not None else None
    if annotated is not None and tile_buffer in annotated:
        return shared_layout_from_ir(annotated[tile_buffer])
    found = []

    def on_eval(stmt):
        if base.is_tile_op(stmt.value, gemm_op.NAME):
            g = gemm_op.Gemm(stmt.value)
            lay = gemm_op.shared_layouts(g, kernel.target, kernel.threads).get(tile_buffer)
            if lay is not None:
                found.append(lay)

    walk(kernel.func.body, [(tirx.Evaluate, on_eval)])
    return found[0] if found else None


def why_not(producers, kernel: Kernel) -> str | None:
    """Why the loop cannot use TMA (None: it can)."""
    if kernel.target is None or arch_of(kernel.target) != "sm_90a":
        return "not sm_90a"
    if pass_config.enabled(pass_config.PassConfigKey.TL_DISABLE_TMA_LOWER):
        return "tl.disable_tma_lower is set"
    if kernel.nested:
        # The barriers' phases would carry over from one run of the loop to the next, while the
        # parities here count from the loop's own first iteration.
        return "the pipelined loop is inside another loop"
    for p in producers:
        src, dst = base.Region.from_ir(p.value.args[0]), base.Region.from_ir(p.value.args[1])
        tile = tma.tile_of(src, dst)
        if isinstance(tile, str):
            return f"T.copy into '{dst.name}': {tile}"
        if tma.box_plan(tile, predicted_layout(dst.buffer, kernel)) is None:
            return f"T.copy into '{dst.name}': its shared layout is not one the TMA unit writes"
    return None


def why_not_specialized(loop, producers, kernel: Kernel) -> str | None:
    """Why the loop cannot get a producer warpgroup (None: it can)."""
    if pass_config.enabled(pass_config.PassConfigKey.TL_DISABLE_WARP_SPECIALIZED):
        return "tl.disable_warp_specialized is set"
    # The producer runs only the loop: its trip count and load coordinates must not read values the
    # consumers' code computes into registers or shared memory (a T.alloc_var, a tile).
    reads = [loop.extent] + [p.value.args[0] for p in producers]
    for node in reads:
        for ld in collect(node, ir.TensorLoad):
            if ld.source.scope() != "global":
                return f"the loop's bounds or copy coordinates read '{ld.source.name}'"
    if not kernel.only_x:
        return "the kernel has threadIdx.y/z"
    if kernel.threads % 128:
        return f"{kernel.threads} threads are not whole warpgroups"
    if kernel.threads + PRODUCER_THREADS > 1024:
        return "no room for a producer warpgroup"
    if kernel.specialized:
        return "another loop of the kernel is already warp-specialized"
    return None


def build(loop, stages: int, producers, ordered, versioned, staged: list, kernel: Kernel, specialize: bool):
    """The Hopper pipeline for `loop` (see the module docstring). `versioned(stmt, stage)` points a
    statement's accesses of the multi-buffered tiles at one stage; `staged` are those tiles' new
    (multi-buffered) buffers."""
    k, n, tx = loop.loop_var, loop.extent, kernel.thread

    def at_iteration(stmt, it):
        """`stmt` of the loop body at iteration `it` (counted from 0)."""
        return substitute(stmt, {k: it if is_zero(loop.min) else loop.min + it})

    S = tirx.const(stages, "int32")
    tiles = [base.Region.from_ir(p.value.args[1]).buffer for p in producers]
    full = {t: tirx.decl_buffer((stages,), "uint64", f"{t.name}_full", scope="shared") for t in tiles}
    empty = tirx.decl_buffer((stages,), "uint64", f"{loop.loop_var.name}_empty", scope="shared")

    def load(p, i):
        """Tile copy `p` of iteration i (0-based) into stage i % S, completing on its full barrier."""
        stmt = at_iteration(p, i)
        call = versioned(stmt, tirx.floormod(i, S)).value
        src, dst = base.Region.from_ir(call.args[0]), base.Region.from_ir(call.args[1])
        t = base.Region.from_ir(p.value.args[1]).buffer
        return tma.make(src, dst, _bar(full[t], tirx.floormod(i, S)))

    i = tirx.Var("i", "int32")
    consumers = [s for s in ordered if not any(s.same_as(p) for p in producers)]

    def consumer_body(it):
        body, waited = [], set()
        for st in consumers:
            for t in tiles:
                if t not in waited and _uses(st, t):
                    waited.add(t)
                    parity = tirx.floormod(tirx.floordiv(it, S), 2)
                    body.append(extern("tl::mbarrier_wait", _bar(full[t], tirx.floormod(it, S)), parity))
            it_stmt = at_iteration(st, it)
            body.append(versioned(it_stmt, tirx.floormod(it, S)))
        return body

    init = [extern("tl::mbarrier_init", _bar(full[t], s), 1) for t in tiles for s in range(stages)]
    if specialize:
        init += [extern("tl::mbarrier_init", _bar(empty, s), kernel.threads // 32) for s in range(stages)]
    init.append(extern("tl::fence_barrier_init"))
    prelude = [tirx.IfThenElse(tx == 0, seq(init), None), extern("__syncthreads")]
    allocs = [tirx.AllocBuffer(full[t]) for t in tiles] + ([tirx.AllocBuffer(empty)] if specialize else [])

    if specialize:
        ip = tirx.Var("i_load", "int32")
        wait_empty = tirx.IfThenElse(
            ip >= S,
            extern(
                "tl::mbarrier_wait",
                _bar(empty, tirx.floormod(ip, S)),
                tirx.floormod(tirx.floordiv(ip, S) + 1, 2),
            ),
            None,
        )
        produce = tirx.For(ip, 0, n, tirx.ForKind.SERIAL, seq([wait_empty] + [load(p, ip) for p in producers]))
        producer = tirx.IfThenElse(tx == 0, produce, None)  # tx counts from the producer warpgroup's start
        if _all_async_gemms(consumers, kernel):
            # Keep the tensor cores busy across iterations: iteration i's wgmmas run on while the
            # thread waits only for iteration i - 1's, and then frees that stage.
            consume = [_gemm_flags(st, staged + list(kernel.tma_tiles), 1) for st in consumer_body(i)] + [
                tirx.IfThenElse(i > 0, extern("tl::mbarrier_arrive_warp", _bar(empty, tirx.floormod(i - 1, S))), None)
            ]
            after = [extern("tl::wgmma_wait<0>")]
        else:
            consume = [_gemm_flags(st, staged + list(kernel.tma_tiles)) for st in consumer_body(i)]
            consume.append(extern("tl::mbarrier_arrive_warp", _bar(empty, tirx.floormod(i, S))))
            after = []
        consumer = seq([tirx.For(i, 0, n, tirx.ForKind.SERIAL, seq(consume), span=loop.span)] + after)
        region = seq(
            allocs
            + [
                tirx.AttrStmt(tirx.const(0, "int32"), WS_PRELUDE, 0, seq(prelude)),
                tirx.AttrStmt(tirx.const(0, "int32"), WS_PRODUCER, 0, producer),
                tirx.AttrStmt(tirx.const(0, "int32"), WS_CONSUMER, 0, consumer),
            ]
        )
        kernel.specialized.append(loop)
        return tirx.AttrStmt(tirx.const(0, "int32"), WS_REGION, kernel.threads, region)

    # One pipeline over all threads: thread 0 issues the loads S - 1 iterations ahead.
    j = tirx.Var("stage", "int32")
    first = tirx.For(
        j,
        0,
        stages - 1,
        tirx.ForKind.UNROLLED,
        tirx.IfThenElse(j < n, seq([load(p, j) for p in producers]), None),
    )
    ahead = i + (stages - 1)
    body = [
        extern("__syncthreads"),  # every thread is done with stage (i - 1) % S, which the loads overwrite
        tirx.IfThenElse(tirx.And(tx == 0, ahead < n), seq([load(p, ahead) for p in producers]), None),
    ] + [_gemm_flags(st, staged + list(kernel.tma_tiles)) for st in consumer_body(i)]
    main = tirx.For(i, 0, n, tirx.ForKind.SERIAL, seq(body), span=loop.span)
    return seq(allocs + prelude + [tirx.IfThenElse(tx == 0, first, None), main])


def _all_async_gemms(consumers, kernel: Kernel) -> bool:
    """Whether the loop body is only wgmma gemms with both operands in shared memory, which may run
    asynchronously across iterations (their accumulators are not read inside the loop)."""
    for st in consumers:
        if not (isinstance(st, tirx.Evaluate) and base.is_tile_op(st.value, gemm_op.NAME)):
            return False
        g = gemm_op.Gemm(st.value)
        if g.kind != "ss" or g.wg_wait != 0 or gemm_wgmma.plan(g, kernel.target, kernel.threads) is None:
            return False
    return bool(consumers)


def _gemm_flags(stmt, tiles, wg_wait: int | None = None):
    """A gemm statement with `wg_wait` (None: unchanged) and, when every shared operand is a tile
    only the TMA unit writes (`tiles`), marked as needing no proxy fence (registers need none).
    Other statements are returned unchanged."""
    if not (isinstance(stmt, tirx.Evaluate) and base.is_tile_op(stmt.value, gemm_op.NAME)):
        return stmt
    call = stmt.value
    g = gemm_op.Gemm(call)
    shared = [r.buffer for r in (g.a, g.b) if r.buffer.scope().startswith("shared")]
    tma_only = all(any(b.same_as(t) for t in tiles) for b in shared)
    pending = g.wg_wait if wg_wait is None else wg_wait
    args = list(call.args[:7]) + [tirx.const(pending, "int32"), tirx.const(int(tma_only), "int32")]
    return tirx.Evaluate(ir.Call(call.op, args, ret_ty="void"), span=stmt.span)

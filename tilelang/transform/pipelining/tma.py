"""Hopper (sm_90a) forms of a pipelined loop, built by `inject_tma_pipelines`: TMA loads completing on
mbarriers, and (by default) a producer warpgroup feeding the consumer threads.

For `T.Pipelined(n, num_stages=S)` whose global-to-shared copies the TMA unit can do, each copied
tile j gets S buffers and S "full" mbarriers (one arrival: the issuing thread's expect_tx, plus the
tile's bytes). Iteration i uses stage i % S and waits for use i // S of a barrier, parity
(i // S) & 1. A consumer waits on tile j's full barrier just before its first statement that reads
tile j, so one tile's load overlaps the work on another's.

Warp-specialized (default; `tl.disable_warp_specialized` turns it off):

    for i in range(n):                         # producer: one thread of an extra warpgroup
        for each tile j:
            if i >= S: wait(empty_j[i % S], (i // S + 1) & 1)    # consumers are done with the stage
            expect_tx + TMA of iteration i into stage i % S, on full_j[i % S]
    for i in range(n):                         # consumers: the kernel's own threads
        wait(full_j[i % S], (i // S) & 1) before the first reader of tile j
        loop body on stage i % S
        arrive(empty_j[i % S])                 # one per consumer warp (the barrier's count)

A load under a condition (a block-sparse GEMM's `if mask[k]:`, written per statement by
`schedule.distribute_guard`) that is false arrives on its full barrier without bytes, so the stage
completes as usual; its readers, under the same condition (`checks.why_not`), skip their work.

A consumer that reads a stage with ordinary loads (ldmatrix, ld.shared: the generic proxy; anything
but a wgmma operand) fences those reads against the async proxy (fence.proxy.async) before the
stage is freed (before the arrival, or the block barrier): the next TMA load into the stage is an
async-proxy write, which neither of those orders after reads still in flight.

Tiles the consumers read in the same consumer stage share one "empty" barrier per stage; with one
stage (`num_stages=1`, one buffer per tile), tiles last read by the same statement share one, freed
right after that statement: that is what lets a load overlap any work. The
consumers' side (`consumer_loop`) also runs consumer stages one iteration apart, and marks where
each stage is freed: `place_wgmma_waits` then runs the wgmma gemms asynchronously, makes the
arrivals and lets two warpgroups take turns at the tensor cores. A gemm whose shared operands only
TMA writes skips the proxy fence. The producer warpgroup is left out
when the loop's trip count or coordinates read values the consumers compute (registers, shared
memory).

A pipelined loop inside another loop (a persistent kernel's loop over tiles) counts its stages on
from one run to the next: each side keeps the number of iterations its earlier runs did in a
register (`k_consumer_runs`, `k_producer_runs` for loop variable k), and iteration i of a run is
iteration runs + i of the stages and barriers, so the producer may run ahead into the next run (the
next tile's loads beside this tile's epilogue). Every run frees all the stages it used. Without
warp specialization such a loop keeps cp.async (thread 0's loads ahead would need the same count).

With `tl.enable_tma_multicast`, when blocks paired along a grid dimension copy the same tile in
every iteration (a GEMM's B tile for blocks of one column), the pair runs as a 2-block cluster
(`cluster_plan`): each block's producer loads half of that tile's boxes into both blocks (TMA
multicast), every empty barrier counts the consumer warps of both blocks (they arrive on their own
and the peer's), and the blocks synchronize after initializing the barriers and before exiting
(`warp_specialize`).

The two loops are left in a `tl.ws` region (prelude: barrier allocation and initialization;
producer; consumer). `warp_specialize` later adds the warpgroup, splits the threads, and sets the
register budgets. Without warp specialization, thread 0 issues the loads S - 1 iterations ahead
and a block barrier at the top of each iteration frees the stage the loads overwrite, as the
cp.async pipeline does.
"""

from __future__ import annotations

import logging

from tvm import ir, tirx

from tilelang import intrinsics
from tilelang.layout.fragment import substitute
from tilelang.op import tma
from tilelang.transform.pipelining import consumer_loop
from tilelang.transform.pipelining.checks import Kernel, load_of, unguarded, uses
from tilelang.transform.pipelining.consumer_loop import Empty, barrier, mma_flags
from tilelang.transform.pipelining.wgmma_waits import mma_of
from tilelang.utils.ir import collect, extern, is_zero, seq

WS_REGION = "tl.ws"  # AttrStmt value: number of consumer threads
# An empty barrier is named after the loop (it frees every tile) or after its tiles, joined by this
# (`A_shared__B_shared_empty`); the barrier-protocol checker reads the names back.
EMPTY_JOIN = "__"
WS_PRELUDE = "tl.ws_prelude"
WS_PRODUCER = "tl.ws_producer"
WS_CONSUMER = "tl.ws_consumer"

logger = logging.getLogger("tilelang")


def _empty_name(loop, groups, group) -> str:
    return loop.loop_var.name if len(groups) == 1 else EMPTY_JOIN.join(t.name for t in group)


def _read_generically(consumers, tile) -> bool:
    """Whether a consumer reads `tile` with ordinary loads (ldmatrix, ld.shared: the generic proxy),
    not only as a wgmma operand (the async proxy, as the TMA unit writes). Such reads must be fenced
    (fence.proxy.async) before the stage is handed back to the TMA loads: a barrier alone does not
    order an async-proxy write after them."""

    def count(node):
        hits = [r for r in collect(node, ir.TensorRegion) if r.source.same_as(tile)]
        return len(hits) + len([ld for ld in collect(node, ir.TensorLoad) if ld.source.same_as(tile)])

    def on_wgmma(node):
        m = mma_of(node)
        return m is not None and m.asynchronous

    return any(count(st) > sum(count(e) for e in collect(st, tirx.Evaluate) if on_wgmma(e)) for st, _ in consumers)


def build(loop, stages: int, plan, versioned, staged: list, kernel: Kernel, specialize: bool, cluster=None):
    """The Hopper pipeline for `loop` (see the module docstring), from its schedule `plan`.
    `versioned(stmt, stage)` points a statement's accesses of the multi-buffered tiles at one stage;
    `staged` are those tiles' new (multi-buffered) buffers; `cluster` (warp-specialized only) the
    grid dimension of 2-block clusters and the indices of the producer copies they multicast."""
    k, n, tx = loop.loop_var, loop.extent, kernel.thread
    producers = plan.producers

    def at_iteration(stmt, it):
        """`stmt` of the loop body at iteration `it` (counted from 0)."""
        return substitute(stmt, {k: it if is_zero(loop.min) else loop.min + it})

    S = tirx.const(stages, "int32")
    # Iterations of earlier runs of the loop (nested loops only), one counter per side.
    counters = {}
    if kernel.nested:
        for side in ("consumer", "producer"):
            counters[side] = tirx.decl_buffer((1,), "int32", f"{k.name}_{side}_runs", scope="local")

    def counted(side):
        """Iteration `it` of this run as the barriers count it."""
        if not counters:
            return lambda it: it
        return lambda it: tirx.BufferLoad(counters[side], [0]) + it

    def count_run(side):
        return [tirx.BufferStore(counters[side], tirx.BufferLoad(counters[side], [0]) + n, [0])] if counters else []

    at_c = counted("consumer")
    tiles = [load_of(p).dst.buffer for p in producers]
    consumers = [(st, c) for st, c in zip(plan.ordered, plan.stage_of) if not any(st.same_as(p) for p in producers)]
    full = {t: tirx.decl_buffer((stages,), "uint64", f"{t.name}_full", scope="shared") for t in tiles}
    # A tile of iteration j is free once the consumer stage c that reads it has run body j + c:
    # tiles read in the same stage share one "empty" barrier per stage. With one stage (one buffer
    # per tile), tiles share one only with those read last by the same statement, freed right after
    # it: the producer loads K of the next iteration while the consumers still run P·V on this V.
    read_in = {t: max([c for st, c in consumers if uses(st, t)], default=0) for t in tiles}
    staged_of = dict(zip(tiles, staged))
    if any(read_in.values()) or stages > 1 or not specialize:
        groups = [(c, None, [t for t in tiles if read_in[t] == c]) for c in sorted(set(read_in.values()))]
    else:
        last = {t: max([j for j, (st, _) in enumerate(consumers) if uses(st, t)], default=None) for t in tiles}
        after = sorted({last[t] for t in tiles}, key=lambda j: len(consumers) if j is None else j)
        groups = [(0, j, [t for t in tiles if last[t] == j]) for j in after]
    empties = [
        Empty(
            tirx.decl_buffer((stages,), "uint64", f"{_empty_name(loop, groups, group)}_empty", scope="shared"),
            c,
            [staged_of[t] for t in group],
            group,
            any(_read_generically(consumers, t) for t in group),
            after,
        )
        for c, after, group in groups
    ]

    # 2-block clusters: tiles both blocks of a pair copy are loaded half by each, multicast.
    kernel.cluster = cluster[0] if cluster else None
    multicast = [producers[j] for j in cluster[1]] if cluster else []

    def load(p, i, g=None):
        """Tile copy `p` of iteration i (0-based; g as the barriers count it) into stage g % S,
        completing on its full barrier."""
        g = i if g is None else g
        stmt = at_iteration(p, i)
        at_stage = load_of(versioned(stmt, tirx.floormod(g, S)))
        src, dst = at_stage.src, at_stage.dst
        t = load_of(p).dst.buffer
        shared = any(p.same_as(m) for m in multicast)
        copy = tma.make(src, dst, barrier(full[t], tirx.floormod(g, S)), multicast=shared)
        cond = unguarded(stmt)[0]
        if cond is None:
            return copy
        # A skipped load still completes its stage (one arrival, no bytes): the consumers, skipping
        # the iteration's work under the same condition, wait on the barrier all the same.
        return tirx.IfThenElse(cond, copy, extern("tl::mbarrier_arrive", barrier(full[t], tirx.floormod(g, S))))

    i = tirx.Var("i", "int32")

    def consumer_items(it, stage_filter=None):
        """(statement, consumer stage) of the consumers run at body iteration `it`: one in consumer
        stage c works on iteration it - c, after waiting for the tiles of that iteration it reads
        (those waits have stage None)."""
        body, waited = [], set()
        for st, c in consumers:
            if stage_filter is not None and c != stage_filter:
                continue
            own = it - c
            g = at_c(own)
            for t in tiles:
                if (t, c) not in waited and uses(st, t):
                    waited.add((t, c))
                    parity = tirx.floormod(tirx.floordiv(g, S), 2)
                    body.append((extern("tl::mbarrier_wait", barrier(full[t], tirx.floormod(g, S)), parity), None))
            body.append((versioned(at_iteration(st, own), tirx.floormod(g, S)), c))
        return body

    init = [extern("tl::mbarrier_init", barrier(full[t], s), 1) for t in tiles for s in range(stages)]
    if specialize:
        # In a cluster, a stage is free once the consumer warps of both blocks are done with it
        # (either block's producer may fill it in both).
        warps = kernel.threads // 32 * (2 if cluster else 1)
        init += [extern("tl::mbarrier_init", barrier(e.barrier, s), warps) for e in empties for s in range(stages)]
    init.append(extern("tl::fence_barrier_init"))
    prelude = [tirx.IfThenElse(tx == 0, seq(init), None), extern("__syncthreads")]
    if cluster:
        # The kernel's record of its clusters: `rasterize_blocks`, `warp_specialize` and the code
        # generator (`__cluster_dims__`) read it.
        dims = {axis: 2 if d == cluster[0] else 1 for d, axis in enumerate("xyz")}
        prelude = [intrinsics.CLUSTER_DIMS.stmt(dims), prelude[0], extern("tl::cluster_sync")]
    allocs = [tirx.AllocBuffer(full[t]) for t in tiles]
    allocs += [tirx.AllocBuffer(e.barrier) for e in empties] if specialize else []
    allocs += [tirx.AllocBuffer(c) for c in counters.values()]
    prelude += [tirx.BufferStore(c, tirx.const(0, "int32"), [0]) for c in counters.values()]

    if specialize:
        ip = tirx.Var("i_load", "int32")
        gp = counted("producer")(ip)

        def wait_empty(e):
            """Before the first load into a stage's tiles of `e`: wait until the consumers freed them."""
            parity = tirx.floormod(tirx.floordiv(gp, S) + 1, 2)
            wait = extern("tl::mbarrier_wait", barrier(e.barrier, tirx.floormod(gp, S)), parity)
            return tirx.IfThenElse(gp >= S, wait, None)

        loads, waited = [], []
        for p, t in zip(producers, tiles):
            e = next(e for e in empties if any(t.same_as(x) for x in e.tiles))
            if e not in waited:
                waited.append(e)
                loads.append(wait_empty(e))
            loads.append(load(p, ip, gp))
        produce = seq([tirx.For(ip, 0, n, tirx.ForKind.SERIAL, seq(loads))] + count_run("producer"))
        producer = tirx.IfThenElse(tx == 0, produce, None)  # tx counts from the producer warpgroup's start
        runs = tirx.BufferLoad(counters["consumer"], [0]) if counters else None
        consumer = consumer_loop.build(loop, i, stages, consumers, consumer_items, empties, staged, kernel, runs)
        consumer = seq([consumer] + count_run("consumer"))
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
    ] + [mma_flags(st, staged + list(kernel.tma_tiles)) for st, _ in consumer_items(i)]
    if any(_read_generically(consumers, t) for t in tiles):
        # Ordinary reads of the stage the loads overwrite are fenced against the TMA unit's writes first.
        body.insert(0, extern("tl::fence_proxy_async_shared"))
    main = tirx.For(i, 0, n, tirx.ForKind.SERIAL, seq(body), span=loop.span)
    return seq(allocs + prelude + [tirx.IfThenElse(tx == 0, first, None), main])

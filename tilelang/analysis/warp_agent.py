"""One warp of a lowered kernel, run as a generator: the step of the barrier-protocol interpreter
(`tilelang.analysis.barrier_protocol`) that walks the device IR.

A warp is represented by its lane 0 (thread `tx`): it runs the kernel's statements with every index
known (`block_values`), and at each barrier call updates its block's state (`block_state`). Where
it must wait, it yields a predicate that is true once it may go on; the scheduler resumes it then.

What each call means:
- `tl::mbarrier_init` / `_arrive_expect_tx` / `_expect_tx` (bytes, no arrival) / `_arrive` (once per
  lane running it: the lanes of the warp whose thread conditions hold, one under `if tx == 128`) /
  `_arrive_warp` / `_arrive_cluster_warp` (also on the peer block) / `_wait(bar, parity)`;
- `tl::tma_load[_multicast]`: the box lands at once, its bytes on the barrier (of both blocks when
  multicast), as a write of the box by the issuing warp;
- `tl::wgmma_ss<m, n, k, ...>` / `wgmma_rs`: reads of the shared operand tiles;
- `__syncthreads` and TVM's `tvm_storage_sync` (barrier 0), `tl::named_barrier_sync<id, count>`,
  the pingpong barriers (`barrier_ids.PINGPONG`: two consumer warpgroups taking turns), `tl::cluster_sync`.
A wait passes only on the phase it is for: parity 1 on a fresh barrier passes at once (the phase
"before the first"), and waiting again for the phase this warp last passed passes, as on hardware;
any later phase means the barrier was completed again before this warp looked, an error.

A branch on data (a float compare) cannot be decided for one warp; it is skipped, which is exact
only while neither side synchronizes or touches shared memory, so anything else is an error.
"""

from __future__ import annotations

import tvm_ffi
from tvm import ir, tirx

from tilelang.analysis.block_state import DataDependent, ProtocolError, access, clock_of, join, tick
from tilelang.analysis.block_values import barrier_key, device_call, is_shared, lanes, register, shared_at, value
from tilelang.transform import barrier_ids
from tilelang.utils.ir import is_block_barrier


def run_warp(stmt, env, block, tx, consumed):
    """Runs `stmt` as the warp whose lane 0 is thread `tx`; yields a predicate while blocked.
    `consumed`: mbarrier -> the phase this warp last passed."""
    if isinstance(stmt, tirx.SeqStmt):
        for s in stmt.seq:
            yield from run_warp(s, env, block, tx, consumed)
    elif isinstance(stmt, tirx.AttrStmt):
        if stmt.attr_key == "thread_extent":
            iv = stmt.node
            env[iv.var] = tirx.const(tx if iv.thread_tag == "threadIdx.x" else env["block"][iv.thread_tag], "int32")
            if iv.thread_tag == "threadIdx.x":
                env["tx_var"] = iv.var
        yield from run_warp(stmt.body, env, block, tx, consumed)
    elif isinstance(stmt, tirx.For):
        try:
            lo, extent = value(stmt.min, env), value(stmt.extent, env)
        except ProtocolError as err:  # (sizes and indices are known: what is not was read from memory)
            raise DataDependent(f"loop '{stmt.loop_var.name}' runs a count read from memory ({err})") from err
        for v in range(lo, lo + extent):
            env[stmt.loop_var] = tirx.const(v, "int32")
            yield from run_warp(stmt.body, env, block, tx, consumed)
    elif isinstance(stmt, tirx.IfThenElse):
        try:
            taken = value(stmt.condition, env)
        except ProtocolError:
            _skip_data_branch(stmt, env)
            return
        side = stmt.then_case if taken else stmt.else_case
        if side is not None:
            outer = env.get("lanes", _ALL_LANES)
            env["lanes"] = _lanes_taking(stmt.condition, bool(taken), env, tx)
            yield from run_warp(side, env, block, tx, consumed)
            env["lanes"] = outer
    elif isinstance(stmt, tirx.Bind):
        try:
            env[stmt.var] = tirx.const(value(stmt.value, env), "int32")
        except (ProtocolError, AttributeError, TypeError, ValueError):
            pass  # not an index (a float, a pointer): nothing the barriers depend on
    elif isinstance(stmt, tirx.BufferStore):
        warp = (env["rank"], tx)
        _reads_in(stmt.value, env, block, warp)
        if is_shared(stmt.buffer):
            start = value(stmt.indices[-1], env) * stmt.buffer.dtype.bits // 8
            n = lanes(stmt.indices[-1])
            access(block, warp, start, n * stmt.buffer.dtype.bits // 8, True, stmt.buffer.name)
        elif stmt.buffer.scope() == "local" and "int" in str(stmt.buffer.dtype):
            env[register(stmt.buffer, stmt.indices, env)] = value(stmt.value, env)
    elif isinstance(stmt, tirx.Evaluate):
        yield from _call(stmt, env, block, tx, consumed)


_ALL_LANES = tuple(range(32))


def _lanes_taking(cond, taken, env, tx) -> tuple:
    """The lanes of the warp (0..31 from `tx`) that run the side of `if cond` lane 0 takes: those
    running here whose `cond` is `taken` (one lane for `if tx == 128`, all 32 for a condition
    without the thread index). A barrier arrival counts once per running lane."""
    active = env.get("lanes", _ALL_LANES)
    tx_var = env.get("tx_var")
    uses = env.setdefault("uses_tx", {})
    if tx_var is None:
        return active
    if cond not in uses:
        found = []
        tvm_ffi.structural_walk(cond, [(tirx.Var, lambda v: found.append(v.same_as(tx_var)))])
        uses[cond] = any(found)
    if not uses[cond]:
        return active
    here = env[tx_var]
    try:
        out = []
        for lane in active:
            env[tx_var] = tirx.const(tx + lane, "int32")
            if bool(value(cond, env)) == taken:
                out.append(lane)
    except ProtocolError:  # a condition on data as well: take lane 0's answer for the warp
        out = list(active)
    env[tx_var] = here
    return tuple(out)


def _reads_in(expr, env, block, warp):
    """Records the shared-memory loads of `expr` (lane 0's elements)."""
    found = []
    tvm_ffi.structural_walk(expr, [(ir.TensorLoad, found.append)])
    for load in found:
        at = shared_at(load, env)
        if at is not None:
            access(block, warp, at[1], lanes(load.indices[-1]) * load.source.dtype.bits // 8, False, at[0].name)


def _skip_data_branch(stmt, env):
    """A branch on data (a float compare, or a register set under one) is skipped, which is exact
    only while neither side synchronizes or touches shared memory: anything else is an error. The
    integer registers either side sets become unknown."""
    calls, stores, loads = [], [], []
    tvm_ffi.structural_walk(
        stmt, [(tirx.Evaluate, calls.append), (tirx.BufferStore, stores.append), (ir.TensorLoad, loads.append)]
    )
    shared = [x.buffer.name for x in stores if is_shared(x.buffer)]
    shared += [x.source.name for x in loads if is_shared(x.source)]
    if calls or shared:
        raise ProtocolError(f"a branch on data calls or touches shared memory ({calls or shared}): {stmt.condition}")
    for x in stores:
        if x.buffer.scope() == "local":
            for key in [k for k in env if isinstance(k, tuple) and k[:2] == ("register", x.buffer.name)]:
                del env[key]


def _call(stmt, env, block, tx, consumed):
    # A block barrier TVM placed (tvm_storage_sync) counts as a `__syncthreads()`.
    found = ("__syncthreads", (), []) if is_block_barrier(stmt) else device_call(stmt)
    if found is None:
        return
    name, template, args = found
    warp = (env["rank"], tx)
    if name == "tl::mbarrier_init":
        block.mbar[barrier_key(args[0], env)] = [value(args[1], env), 0, 0, 0]
    elif name == "tl::mbarrier_arrive_expect_tx":
        block.arrive(barrier_key(args[0], env), value(args[1], env), tick(block, warp))
    elif name == "tl::mbarrier_expect_tx":  # the bytes only, no arrival (the user's T.tma_copy)
        running = len(env.get("lanes", _ALL_LANES))
        block.expect(barrier_key(args[0], env), value(args[1], env) * running)
    elif name == "tl::mbarrier_arrive":  # every running thread of the warp (T.barrier_arrive)
        bar = barrier_key(args[0], env)
        block.release(tx, bar)
        clock = tick(block, warp)
        for _ in env.get("lanes", _ALL_LANES):
            block.arrive(bar, clock=clock)
    elif name in ("tl::mbarrier_arrive_warp", "tl::mbarrier_arrive_cluster_warp"):
        bar = barrier_key(args[0], env)
        block.release(tx, bar)
        clock = tick(block, warp)
        block.arrive(bar, clock=clock)
        if name == "tl::mbarrier_arrive_cluster_warp":
            block.peer.arrive(bar, clock=clock)
    elif name in ("tl::tma_load", "tl::tma_load_multicast"):
        _tma_load(name, stmt.value, args, env, block, warp)
    elif name in ("tl::wgmma_ss", "tl::wgmma_rs"):
        m, n, k = template[:3]
        for ptr, elements in [(args[0], m * k), (args[1], n * k)]:
            at = shared_at(ptr, env) if isinstance(ptr, ir.Call) else None
            if at is not None:
                access(block, warp, at[1], elements * at[0].dtype.bits // 8, False, f"{at[0].name} (a wgmma operand)")
    elif name == "tl::mbarrier_wait":
        yield from _wait(args, env, block, tx, consumed)
    elif name == "tl::cluster_sync":
        generation = block.named_arrive("cluster", 2 * block.threads, block.cluster_named, tick(block, warp))
        yield lambda: block.cluster_named["cluster"][1] > generation
        join(block.clocks[warp], block.cluster_named["cluster"][3][generation])
    elif name in ("__syncthreads", "tl::named_barrier_sync", "tl::pingpong_sync"):
        if name == "__syncthreads":
            bar_id, count = 0, block.threads
        elif name == "tl::pingpong_sync":
            bar_id, count = barrier_ids.PINGPONG[tx // 128], 256
        else:
            bar_id, count = template
        generation = block.named_arrive(bar_id, count, clock=tick(block, warp))
        yield lambda: block.named[bar_id][1] > generation
        join(block.clocks[warp], block.named[bar_id][3][generation])
    elif name == "tl::pingpong_arrive":
        block.named_arrive(barrier_ids.PINGPONG[1 - tx // 128], 256, clock=tick(block, warp))
    elif name == "tl::pingpong_init" and tx // 128 == 1:
        block.named_arrive(barrier_ids.PINGPONG[0], 256, clock=tick(block, warp))


def _tma_load(name, call, args, env, block, warp):
    """The box lands at once: a write of its bytes by the issuing warp, in this block or (multicast)
    in both blocks of the cluster, and its bytes complete on the barrier of each."""
    nbytes = next(b for c, b in block.box_bytes if c.same_as(call))
    bar = barrier_key(args[1], env)
    buffer, start = shared_at(args[2], env)
    targets = [block, block.peer] if name == "tl::tma_load_multicast" else [block]
    for b in targets:
        access(b, warp, start, nbytes, True, f"{buffer.name} (a TMA box)")
    clock = tick(block, warp)
    for b in targets:
        b.land(bar, nbytes, clock)


def _wait(args, env, block, tx, consumed):
    """`tl::mbarrier_wait(bar, parity)`: blocks until the barrier's phase count has the other
    parity, then checks it passed on the phase it was for."""
    warp = (env["rank"], tx)
    bar, parity = barrier_key(args[0], env), value(args[1], env)
    if bar not in block.mbar:
        raise ProtocolError(f"warp {tx // 32} waits on {bar} before its initialization")
    yield lambda: block.mbar[bar][2] % 2 != parity
    if bar not in consumed and block.mbar[bar][2] == 0 and parity == 1:
        consumed[bar] = 0  # parity 1 on a fresh barrier: the phase "before the first", at once
        return
    want = consumed.get(bar, 0) + 1
    if bar in consumed and block.mbar[bar][2] == want - 1 and parity == (want - 2) % 2:
        return  # the phase this warp last passed, waited for again: passes at once, as on hardware
    if block.mbar[bar][2] != want:
        raise ProtocolError(
            f"warp {tx // 32} passed {bar} (parity {parity}) after {block.mbar[bar][2]} phases, "
            f"expecting phase {want}: a stage was refilled before it was freed"
        )
    consumed[bar] = want
    join(clock_of(block, warp), block.phase_clock.get((bar, want), {}))
    if block.consumer_threads is not None and bar[0].endswith("_full") and tx < block.consumer_threads:
        block.holds.setdefault(bar, set()).add(tx // 32)
        yield lambda: True  # other warps may run while this one reads the stage

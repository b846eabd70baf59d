"""The barrier protocol of Hopper pipelines (TMA and mbarriers, with or without a producer warpgroup),
run on the CPU: the lowered device IR is interpreted for one block, or the two blocks of a cluster,
one agent per warp (lane 0), keeping only what synchronizes: mbarriers (init, arrivals, expect_tx
bytes, parity waits), named barriers, `__syncthreads` and cluster barriers. The TMA unit is taken to
land a load at once, its box's bytes on the barrier of each block it is for (both, when multicast).
Every kernel must finish (no deadlock); every mbarrier wait must pass on exactly the phase it is for
(or, again, the one it last passed); no load may land in a stage a consumer warp has waited for and
not yet freed; no block may be signalled after it exited; whatever order the warps run in (several
schedules, and one where block 0 runs ahead as far as it can). A branch on data (a float compare)
is skipped, and must neither synchronize nor touch shared memory. Kernels that never free a stage,
refill one too early, free a cluster's stage only locally, or exit without the cluster barrier, are
caught.

Shared memory is checked too, for races between warps: each warp carries a vector clock, which
barriers pass on (an arrival releases the warp's clock into the phase, a wait that passes acquires
the phase's clocks; a TMA load's bytes carry its issuer's). Every access of a warp's lane 0 to
shared memory (stores and loads, 16-byte granules), every wgmma operand tile and every TMA box is
recorded, and a read of what another warp wrote, or a write over what another warp read or wrote,
must come after it through some chain of barriers. A warpgroup handing a shared tile to another
without waiting for it to be read first is caught."""

import os
import random
import re
import sys

import pytest
import tvm_ffi
from tvm import ir, tirx

import tilelang
import tilelang.language as T
from tilelang.engine.pipeline import lower
from tilelang.options import CompileOptions
from tilelang.utils.ir import extern_name, is_block_barrier
from tilelang.utils.target import determine_target

_EXAMPLES = os.path.join(os.path.dirname(__file__), "..", "..", "..", "examples")
sys.path[:0] = [os.path.join(_EXAMPLES, d) for d in ("flash_attention", "deepseek_mla", "gemm")]
sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "language"))
import example_gemm as gemm  # noqa: E402
import example_gemm_persistent as gemm_persistent  # noqa: E402
import example_mha_fwd_bshd as fa  # noqa: E402
import example_mla_decode as mla  # noqa: E402
import example_mla_decode_ws as mla_ws  # noqa: E402
import test_barriers as hand_written  # noqa: E402


class ProtocolError(AssertionError):
    pass


class _Block:
    """The synchronization state of one thread block (of a cluster of one or two)."""

    def __init__(self, threads, rank=0, box_bytes=()):
        self.threads = threads
        self.rank = rank
        # (buffer name, index) -> [expected arrivals, arrivals so far, completed phases, pending bytes]
        self.mbar = {}
        self.named = {}  # barrier id -> [threads arrived, generation]
        self.peer = None  # the other block of a 2-block cluster
        self.cluster_named = self.named  # barriers over the whole cluster (cluster_sync)
        self.box_bytes = box_bytes  # [(TMA load call, bytes of its box)]
        self.holds = {}  # (buffer name, index) of a full barrier -> warps reading that stage
        self.exited = False
        self.clocks = {}  # warp (rank, tx) -> vector clock {warp: count}; shared by a cluster's blocks
        self.released = {}  # mbarrier -> clock of the phase being completed
        self.phase_clock = {}  # (mbarrier, phases completed) -> clock that phase released
        self.written = {}  # shared granule -> (warp, its count at the write)
        self.read = {}  # shared granule -> {warp: its count at the read}

    def _state(self, bar):
        if self.exited:
            raise ProtocolError(f"block {self.rank} is signalled on {bar} after it exited")
        if bar not in self.mbar:
            raise ProtocolError(f"arrival on {bar} before its initialization")
        return self.mbar[bar]

    def _settle(self, bar, state):
        if state[1] == state[0] and state[3] == 0:
            state[1], state[2] = 0, state[2] + 1
            self.phase_clock[(bar, state[2])] = self.released.pop(bar, {})

    def arrive(self, bar, expect_bytes=0, clock=None):
        state = self._state(bar)
        _join(self.released.setdefault(bar, {}), clock or {})
        state[1] += 1
        state[3] += expect_bytes
        self._settle(bar, state)

    def land(self, bar, nbytes, clock=None):
        """A TMA box lands in this block: its bytes complete on `bar` (taken to land at once), and
        with them the clock of the warp that issued the load."""
        state = self._state(bar)
        _join(self.released.setdefault(bar, {}), clock or {})
        if self.holds.get(bar):
            raise ProtocolError(
                f"a load lands on {bar} of block {self.rank} while warps {sorted(self.holds[bar])} still "
                f"read that stage: a stage was refilled before it was freed"
            )
        state[3] -= nbytes
        self._settle(bar, state)

    def named_arrive(self, bar_id, count, table=None, clock=None):
        """A warp arrives on a named barrier; returns the generation it waits to complete (whose
        clock, the join of every arriving warp's, is `table[bar_id][3][generation]`)."""
        table = self.named if table is None else table
        state = table.setdefault(bar_id, [0, 0, {}, {}])
        state[0] += 32
        _join(state[2], clock or {})
        generation = state[1]
        if state[0] == count:
            state[3][generation] = state[2]
            state[0], state[1], state[2] = 0, state[1] + 1, {}
        return generation


# ---- shared-memory races: vector clocks carried by the barriers ------------------------------

_GRANULE = 16  # bytes: the width of the widest store of one thread


def _join(into, clock):
    for warp, count in clock.items():
        if into.get(warp, 0) < count:
            into[warp] = count


def _tick(block, warp):
    """The warp's clock after it released its present one (an arrival on some barrier)."""
    clock = block.clocks.setdefault(warp, {warp: 1})
    released = dict(clock)
    clock[warp] += 1
    return released


def _access(block, warp, start, nbytes, write, what):
    """Warp `warp` reads or writes bytes [start, start + nbytes) of the block's shared memory."""
    clock = block.clocks.setdefault(warp, {warp: 1})
    now = clock[warp]

    def unordered(other, count):
        return other != warp and clock.get(other, 0) < count

    for g in range(start // _GRANULE, (start + max(nbytes, 1) - 1) // _GRANULE + 1):
        last = block.written.get(g)
        if last is not None and unordered(*last):
            raise ProtocolError(
                f"shared-memory race in block {block.rank}: warp {warp[1] // 32} {'writes' if write else 'reads'} "
                f"{what} (byte {g * _GRANULE}), which warp {last[0][1] // 32} wrote with no barrier in between"
            )
        readers = block.read.setdefault(g, {})
        if write:
            for other, count in readers.items():
                if unordered(other, count):
                    raise ProtocolError(
                        f"shared-memory race in block {block.rank}: warp {warp[1] // 32} writes {what} "
                        f"(byte {g * _GRANULE}) while warp {other[1] // 32} may still read it (no barrier in between)"
                    )
            block.written[g] = (warp, now)
            readers.clear()
        else:
            readers[warp] = now


def _is_shared(buffer) -> bool:
    return str(buffer.scope()).startswith("shared")


def _shared_at(ptr_or_load, env):
    """(buffer, first byte) of a shared-memory element (`buf[i]` or `address_of(buf[i])`), or None
    (a vector index counts from its first lane)."""
    load = ptr_or_load.args[0] if isinstance(ptr_or_load, ir.Call) else ptr_or_load
    if not isinstance(load, ir.TensorLoad) or not _is_shared(load.source):
        return None
    return load.source, _int(load.indices[-1], env) * load.source.dtype.bits // 8


def _lanes(index) -> int:
    return int(index.ty.dtype.lanes)


def _reads_in(expr, env, block, warp):
    """Records the shared-memory loads of `expr` (lane 0's elements)."""
    found = []
    tvm_ffi.structural_walk(expr, [(ir.TensorLoad, found.append)])
    for load in found:
        at = _shared_at(load, env)
        if at is not None:
            _access(block, warp, at[1], _lanes(load.indices[-1]) * load.source.dtype.bits // 8, False, at[0].name)


def _key(ptr, env):
    """(buffer name, index) of an `address_of(buf[i])` barrier pointer."""
    load = ptr.args[0]
    return load.source.name, _int(load.indices[0], env)


_BINARY = {
    "Add": lambda a, b: a + b,
    "Sub": lambda a, b: a - b,
    "Mul": lambda a, b: a * b,
    "FloorDiv": lambda a, b: a // b,
    "FloorMod": lambda a, b: a % b,
    "Div": lambda a, b: int(a / b),
    "Mod": lambda a, b: a - b * int(a / b),
    "Min": min,
    "Max": max,
    "EQ": lambda a, b: int(a == b),
    "NE": lambda a, b: int(a != b),
    "LT": lambda a, b: int(a < b),
    "LE": lambda a, b: int(a <= b),
    "GT": lambda a, b: int(a > b),
    "GE": lambda a, b: int(a >= b),
    "And": lambda a, b: int(bool(a) and bool(b)),
    "Or": lambda a, b: int(bool(a) or bool(b)),
    "BitwiseAnd": lambda a, b: a & b,
    "BitwiseOr": lambda a, b: a | b,
    "BitwiseXor": lambda a, b: a ^ b,
    "RShift": lambda a, b: a >> b,
    "LShift": lambda a, b: a << b,
}


def _int(expr, env):
    """The integer value of an index expression, its variables bound in `env`."""
    kind = type(expr).__name__
    if isinstance(expr, tirx.IntImm):
        return int(expr.value)
    if isinstance(expr, ir.Var):
        for k, v in env.items():
            if isinstance(k, ir.Var) and k.same_as(expr):
                return int(v.value)
        raise ProtocolError(f"'{expr.name}' is not known for one block")
    if kind in _BINARY:
        return _BINARY[kind](_int(expr.a, env), _int(expr.b, env))
    if kind == "Not":
        return int(not _int(expr.a, env))
    if kind == "Cast":
        return _int(expr.value, env)
    if kind == "Select":
        return _int(expr.true_value if _int(expr.condition, env) else expr.false_value, env)
    if isinstance(expr, tirx.Ramp):  # vectors (shared-memory indices): their first lane
        return _int(expr.base, env)
    if isinstance(expr, tirx.Broadcast):
        return _int(expr.value, env)
    if isinstance(expr, ir.Call) and getattr(expr.op, "name", "") == "tirx.call_extern":
        if str(expr.args[0].value) == "tl::cluster_rank":
            return env["rank"]
    if isinstance(expr, ir.Call) and getattr(expr.op, "name", "") == "prim.if_then_else":
        return _int(expr.args[1] if _int(expr.args[0], env) else expr.args[2], env)
    if isinstance(expr, ir.TensorLoad) and _register(expr.source, expr.indices, env) in env:
        return env[_register(expr.source, expr.indices, env)]
    raise ProtocolError(f"cannot evaluate {expr} for one block")


def _register(buffer, indices, env):
    """The env key of an integer register (a local buffer element, such as a stage counter)."""
    return ("register", buffer.name, tuple(_int(i, env) for i in indices))


def _skip_data_branch(stmt, env):
    """A branch on data (a float compare, or a register set under one) is skipped, which is exact
    only while neither side synchronizes or touches shared memory: anything else is an error. The
    integer registers either side sets become unknown."""
    calls, stores, loads = [], [], []
    tvm_ffi.structural_walk(
        stmt, [(tirx.Evaluate, calls.append), (tirx.BufferStore, stores.append), (ir.TensorLoad, loads.append)]
    )
    shared = [x.buffer.name for x in stores if _is_shared(x.buffer)]
    shared += [x.source.name for x in loads if _is_shared(x.source)]
    if calls or shared:
        raise ProtocolError(f"a branch on data calls or touches shared memory ({calls or shared}): {stmt.condition}")
    for x in stores:
        if x.buffer.scope() == "local":
            for key in [k for k in env if isinstance(k, tuple) and k[:2] == ("register", x.buffer.name)]:
                del env[key]


def _agent(stmt, env, block, tx, consumed):
    """Runs `stmt` as the warp whose lane 0 is thread `tx`; yields a predicate while blocked."""
    if isinstance(stmt, tirx.SeqStmt):
        for s in stmt.seq:
            yield from _agent(s, env, block, tx, consumed)
    elif isinstance(stmt, tirx.AttrStmt):
        if stmt.attr_key == "thread_extent":
            iv = stmt.node
            env[iv.var] = tirx.const(tx if iv.thread_tag == "threadIdx.x" else env["block"][iv.thread_tag], "int32")
        yield from _agent(stmt.body, env, block, tx, consumed)
    elif isinstance(stmt, tirx.For):
        lo, extent = _int(stmt.min, env), _int(stmt.extent, env)
        for value in range(lo, lo + extent):
            env[stmt.loop_var] = tirx.const(value, "int32")
            yield from _agent(stmt.body, env, block, tx, consumed)
    elif isinstance(stmt, tirx.IfThenElse):
        try:
            taken = _int(stmt.condition, env)
        except ProtocolError:
            _skip_data_branch(stmt, env)
            return
        if taken:
            yield from _agent(stmt.then_case, env, block, tx, consumed)
        elif stmt.else_case is not None:
            yield from _agent(stmt.else_case, env, block, tx, consumed)
    elif isinstance(stmt, tirx.Bind):
        try:
            env[stmt.var] = tirx.const(_int(stmt.value, env), "int32")
        except (ProtocolError, AttributeError, TypeError, ValueError):
            pass  # not an index (a float, a pointer): nothing the barriers depend on
    elif isinstance(stmt, tirx.BufferStore):
        warp = (env["rank"], tx)
        _reads_in(stmt.value, env, block, warp)
        if _is_shared(stmt.buffer):
            start = _int(stmt.indices[-1], env) * stmt.buffer.dtype.bits // 8
            lanes = _lanes(stmt.indices[-1])
            _access(block, warp, start, lanes * stmt.buffer.dtype.bits // 8, True, stmt.buffer.name)
        elif stmt.buffer.scope() == "local" and "int" in str(stmt.buffer.dtype):
            env[_register(stmt.buffer, stmt.indices, env)] = _int(stmt.value, env)
    elif isinstance(stmt, tirx.Evaluate):
        yield from _call(stmt, env, block, tx, consumed)


def _call(stmt, env, block, tx, consumed):
    # A block barrier TVM placed (tvm_storage_sync) counts as a `__syncthreads()`.
    name = "__syncthreads" if is_block_barrier(stmt) else extern_name(stmt)
    if name is None:
        return
    call = stmt.value
    args = list(call.args[1:])
    warp = (env["rank"], tx)
    if name == "tl::mbarrier_init":
        block.mbar[_key(args[0], env)] = [_int(args[1], env), 0, 0, 0]
    elif name == "tl::mbarrier_arrive_expect_tx":
        block.arrive(_key(args[0], env), _int(args[1], env), _tick(block, warp))
    elif name == "tl::mbarrier_arrive":  # every thread of the warp (T.barrier_arrive)
        bar = _key(args[0], env)
        _release(block, tx, bar)
        clock = _tick(block, warp)
        for _ in range(32):
            block.arrive(bar, clock=clock)
    elif name in ("tl::mbarrier_arrive_warp", "tl::mbarrier_arrive_cluster_warp"):
        bar = _key(args[0], env)
        _release(block, tx, bar)
        clock = _tick(block, warp)
        block.arrive(bar, clock=clock)
        if name == "tl::mbarrier_arrive_cluster_warp":
            block.peer.arrive(bar, clock=clock)
    elif name in ("tl::tma_load", "tl::tma_load_multicast"):
        nbytes = next(b for c, b in block.box_bytes if c.same_as(call))
        bar = _key(args[1], env)
        buffer, start = _shared_at(args[2], env)
        targets = [block, block.peer] if name == "tl::tma_load_multicast" else [block]
        for b in targets:
            _access(b, warp, start, nbytes, True, f"{buffer.name} (a TMA box)")
        clock = _tick(block, warp)
        for b in targets:
            b.land(bar, nbytes, clock)
    elif name.startswith(("tl::wgmma_ss<", "tl::wgmma_rs<")):
        m, n, k = (int(x) for x in re.findall(r"-?\d+", name)[:3])
        operands = [(args[0], m * k), (args[1], n * k)]
        for ptr, elements in operands:
            at = _shared_at(ptr, env) if isinstance(ptr, ir.Call) else None
            if at is not None:
                _access(block, warp, at[1], elements * at[0].dtype.bits // 8, False, f"{at[0].name} (a wgmma operand)")
    elif name == "tl::mbarrier_wait":
        bar, parity = _key(args[0], env), _int(args[1], env)
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
        _join(block.clocks.setdefault(warp, {warp: 1}), block.phase_clock.get((bar, want), {}))
        if block.consumer_threads is not None and bar[0].endswith("_full") and tx < block.consumer_threads:
            block.holds.setdefault(bar, set()).add(tx // 32)
            yield lambda: True  # other warps may run while this one reads the stage
    elif name == "tl::cluster_sync":
        generation = block.named_arrive("cluster", 2 * block.threads, block.cluster_named, _tick(block, warp))
        yield lambda: block.cluster_named["cluster"][1] > generation
        _join(block.clocks[warp], block.cluster_named["cluster"][3][generation])
    elif name == "__syncthreads" or name.startswith("tl::named_barrier_sync<") or name == "tl::pingpong_sync":
        if name == "__syncthreads":
            bar_id, count = 0, block.threads
        elif name == "tl::pingpong_sync":
            bar_id, count = 2 + tx // 128, 256
        else:
            bar_id, count = (int(x) for x in re.findall(r"\d+", name))
        generation = block.named_arrive(bar_id, count, clock=_tick(block, warp))
        yield lambda: block.named[bar_id][1] > generation
        _join(block.clocks[warp], block.named[bar_id][3][generation])
    elif name == "tl::pingpong_arrive":
        block.named_arrive(3 - tx // 128, 256, clock=_tick(block, warp))
    elif name == "tl::pingpong_init" and tx // 128 == 1:
        block.named_arrive(2, 256, clock=_tick(block, warp))


def _release(block, tx, empty):
    """A consumer warp frees a stage (arrives on an empty barrier): it no longer reads the tiles of
    that stage, the tile whose name the barrier carries or, for a barrier named after the loop
    (`k_empty`), every tile of the stage."""
    name, index = empty
    tile = name[: -len("_empty")]
    held = [bar for bar in block.holds if bar[1] == index and tx // 32 in block.holds[bar]]
    named = [bar for bar in held if bar[0] == f"{tile}_full"]
    for bar in named or held:
        block.holds[bar].discard(tx // 32)


def _box_bytes(kernel):
    """[(TMA load call, bytes of its box)]: a tile's expect_tx announces the whole tile; the loads
    after it are its boxes (a multicast load issues half of them, the other block the rest)."""
    out = []

    def on_seq(seq):
        stmts = list(seq.seq)
        for j, st in enumerate(stmts):
            call = st.value if isinstance(st, tirx.Evaluate) else None
            if not (isinstance(call, ir.Call) and "mbarrier_arrive_expect_tx" in str(call.args[0])):
                continue
            loads = []
            for nxt in stmts[j + 1 :]:
                c = nxt.value if isinstance(nxt, tirx.Evaluate) else None
                if not (isinstance(c, ir.Call) and str(c.args[0].value) in ("tl::tma_load", "tl::tma_load_multicast")):
                    break
                loads.append(c)
            boxes = sum(2 if str(c.args[0].value) == "tl::tma_load_multicast" else 1 for c in loads)
            out.extend((c, int(call.args[2].value) // boxes) for c in loads)

    tvm_ffi.structural_walk(kernel.body, [(tirx.SeqStmt, on_seq)])
    return out


def _consumer_threads(kernel, threads) -> int | None:
    """Threads below the producer warpgroup; None without one (thread 0 then loads ahead and block
    barriers free the stages: no reads are held per stage)."""
    found = []

    def on_call(call):
        name = str(call.args[0].value) if getattr(call.op, "name", "") == "tirx.call_extern" else ""
        if name.startswith("tl::setmaxnreg_dec"):
            found.append(threads - 128)

    tvm_ffi.structural_walk(kernel.body, [(ir.Call, on_call)])
    return found[0] if found else None


def run_block(device_func, threads, block_index, seed):
    """Interprets one block of `device_func`; raises ProtocolError on a deadlock or an overrun."""
    run_cluster(device_func, threads, [block_index], seed)


def run_cluster(device_func, threads, block_indices, seed, lead=False):
    """Interprets the blocks of one cluster (one or two blocks, `block_indices` in rank order).
    With `lead`, block 0 runs whenever it can and block 1 only while block 0 waits: block 0 gets
    as far ahead as the protocol lets it."""
    box_bytes = _box_bytes(device_func)
    blocks = [_Block(threads, rank, box_bytes) for rank in range(len(block_indices))]
    for block in blocks:
        block.consumer_threads = _consumer_threads(device_func, threads)
        block.cluster_named = blocks[0].named if len(blocks) == 1 else blocks[0].__dict__.setdefault("_cn", {})
    if len(blocks) == 2:
        blocks[0].peer, blocks[1].peer = blocks[1], blocks[0]
        blocks[1].cluster_named = blocks[0].cluster_named
        blocks[1].clocks = blocks[0].clocks
    agents = {}
    for rank, (block, index) in enumerate(zip(blocks, block_indices)):
        for tx in range(0, threads, 32):
            env = {"block": index, "rank": rank}
            agents[(rank, tx)] = (_agent(device_func.body, env, block, tx, {}), [None])
    rng = random.Random(seed)
    while agents:
        progressed = False
        order = list(agents)
        rng.shuffle(order)
        if lead:
            order.sort(key=lambda k: k[0])
        for key in order:
            if lead and progressed and key[0] == 1:
                break  # block 0 moved: give it the next round too
            gen, blocked = agents[key]
            if blocked[0] is not None and not blocked[0]():
                continue
            progressed = True
            try:
                blocked[0] = next(gen)
            except StopIteration:
                del agents[key]
                if not any(rank == key[0] for rank, _ in agents):
                    blocks[key[0]].exited = True
        if not progressed:
            stuck = sorted(f"block {rank} warp {tx // 32}" for rank, tx in agents)
            raise ProtocolError(f"deadlock: {', '.join(stuck)} wait forever")


def _device_kernel(func, configs=None):
    low = lower(func, determine_target("sm_90a"), CompileOptions.from_pass_configs(configs))
    (kernel,) = [f for gv, f in low.device_mod.functions.items() if "kernel" in gv.name_hint]
    return kernel, _threads(kernel)


def _threads(kernel) -> int:
    out = []

    def on_attr(a):
        if a.attr_key == "thread_extent" and a.node.thread_tag == "threadIdx.x":
            out.append(int(a.value))

    tvm_ffi.structural_walk(kernel.body, [(tirx.AttrStmt, on_attr)])
    return out[0]


def _without(kernel, name, barrier_named, keep=lambda index: False):
    """`kernel` with its `name(barrier, ...)` calls on barriers `barrier_named` accepts dropped
    (except where `keep(barrier index)`)."""

    def drop(stmt):
        call = stmt.value
        if isinstance(call, ir.Call) and getattr(call.op, "name", "") == "tirx.call_extern":
            if str(call.args[0].value) == name:
                load = call.args[1].args[0]
                if barrier_named(load.source.name) and not keep(load.indices[0]):
                    return tirx.Evaluate(tirx.const(0, "int32"))
        return stmt

    return kernel.with_body(tvm_ffi.structural_map(kernel.body, [(tirx.Evaluate, drop)]))


def _check(func, blocks, configs=None, seeds=3):
    kernel, threads = _device_kernel(func, configs)
    for b in blocks:
        for seed in range(seeds):
            run_block(kernel, threads, b, seed)


def _errors(run, seeds) -> list:
    """The ProtocolError messages of `run(seed)` for each of `seeds` schedules (none where it passes)."""
    out = []
    for seed in range(seeds):
        try:
            run(seed)
        except ProtocolError as err:
            out.append(str(err))
    return out


def _bx(x):
    return {"blockIdx.x": x, "blockIdx.y": 0, "blockIdx.z": 0}


@pytest.mark.parametrize("causal", [False, True])
def test_flash_attention_schedule(causal):
    # Causal row blocks 0..3 run 1..4 iterations: prologue and epilogue only, up to a full loop.
    f = fa.flashattn.factory(1, 1, 512, 128, causal, 128, 128, 2, 256)
    _check(f, [_bx(x) for x in range(4)], {"tl.enable_fast_math": True})


def test_flash_attention_one_warpgroup_masked_tail():
    _check(fa.flashattn.factory(1, 1, 200, 64, True, 64, 64, 2, 128), [_bx(x) for x in range(4)])


@pytest.mark.parametrize("stages", [2, 3, 4])
@pytest.mark.parametrize("specialized", [True, False])
def test_gemm(stages, specialized):
    # Without a producer warpgroup, thread 0 issues the TMA loads ahead (the same mbarriers).
    f = gemm.matmul.factory(256, 256, 512, 128, 256, 64, "float16", "float", 256, stages)
    _check(f, [_bx(0)], {} if specialized else {"tl.disable_warp_specialized": True})


@pytest.mark.parametrize("stages", [2, 3, 4])
@pytest.mark.parametrize("K", [128, 512])
def test_persistent_gemm_counts_stages_across_tiles(stages, K):
    # 8 tiles over 3 blocks: blocks 0 and 1 run three tiles, block 2 two; the loads of a tile start
    # while the last tile's stages drain. K 128: fewer iterations per tile than stages.
    f = gemm_persistent.matmul_persistent.factory(512, 512, K, 128, 256, 64, 3, num_stages=stages)
    _check(f, [_bx(b) for b in range(3)])


@tilelang.jit(out_idx=[-1])
def _staged_per_tile(tiles=3):
    """A flash-attention-shaped loop (Q·Kᵀ, a stand-in softmax, P·V one iteration behind) run once
    per tile of a persistent loop, t + bx iterations per run (0 to 3)."""

    @T.prim_func
    def main(
        Q: T.Tensor((128, 64), "float16"),
        K: T.Tensor((256, 64), "float16"),
        V: T.Tensor((256, 64), "float16"),
        Out: T.Tensor((2, tiles, 128, 64), "float16"),
    ):
        with T.Kernel(2, threads=256) as bx:
            Q_s = T.alloc_shared((128, 64), "float16")
            K_s = T.alloc_shared((64, 64), "float16")
            V_s = T.alloc_shared((64, 64), "float16")
            S = T.alloc_fragment((128, 64), "float")
            P = T.alloc_fragment((128, 64), "float16")
            O = T.alloc_fragment((128, 64), "float")
            T.copy(Q, Q_s)
            for t in T.serial(tiles):
                T.clear(O)
                for k in T.Pipelined(
                    T.min(t + bx, 4),
                    num_stages=2,
                    order=[-1, 0, 3, 1, -1, 2],
                    stage=[-1, 0, 0, 1, -1, 1],
                    group=[[0], [1], [2, 3], [4], [5], [6]],
                ):
                    T.copy(K[k * 64, 0], K_s)
                    T.gemm(Q_s, K_s, S, transpose_B=True, clear_accum=True)
                    for i, j in T.Parallel(128, 64):
                        S[i, j] = S[i, j] * 0.125
                    T.copy(S, P)
                    for i, j in T.Parallel(128, 64):
                        O[i, j] = O[i, j] * 0.5
                    T.copy(V[k * 64, 0], V_s)
                    T.gemm(P, V_s, O)
                T.copy(O, Out[bx, t, :, :])

    return main


def test_staged_schedule_counts_stages_across_runs_of_any_length():
    # Runs of 0, 1, 2 and 3 iterations in a row: V of a run's last iteration (read one iteration
    # behind) is freed after its epilogue, so the next run's loads find their stages free.
    src = tilelang.compile(_staged_per_tile.factory(), out_idx=[-1], target="sm_90a").get_kernel_source()
    assert "k_consumer_runs_ptr" in src and "pingpong" not in src  # no turns across runs
    _check(_staged_per_tile.factory(), [_bx(0), _bx(1)])


def test_mla_split_and_combine_kernels():
    f = mla.mla_decode.factory(2, 128, 1, 1024, 512, 64, 64, 64, 2, "float16")
    low = lower(f, determine_target("sm_90a"))
    kernels = [fn for gv, fn in low.device_mod.functions.items()]
    assert len(kernels) == 2
    for kernel in kernels:
        for seed in range(2):
            run_block(kernel, _threads(kernel), {"blockIdx.x": 0, "blockIdx.y": 0, "blockIdx.z": 1}, seed)


def test_a_stage_never_freed_is_caught():
    f = fa.flashattn.factory(1, 1, 512, 128, False, 128, 128, 2, 256)
    kernel, threads = _device_kernel(f, {"tl.enable_fast_math": True})

    # The prologue frees stage 0 of K by a constant index; the loop's frees index by the iteration.
    in_loop = lambda i: not isinstance(i, tirx.IntImm)  # noqa: E731
    broken = _without(kernel, "tl::mbarrier_arrive_warp", lambda n: n == "K_shared_empty", keep=in_loop)
    with pytest.raises(ProtocolError, match="deadlock"):
        run_block(broken, threads, _bx(0), 0)


def test_a_producer_that_does_not_wait_for_free_stages_is_caught():
    # 6 iterations on 2 stages: a producer that runs ahead fills each stage 3 times.
    f = fa.flashattn.factory(1, 1, 768, 128, False, 128, 128, 2, 256)
    kernel, threads = _device_kernel(f, {"tl.enable_fast_math": True})

    broken = _without(kernel, "tl::mbarrier_wait", lambda n: n.endswith("_empty"))
    errors = _errors(lambda seed: run_block(broken, threads, _bx(0), seed), 10)
    # A consumer passes its wait on a later phase (or, two phases later, waits forever).
    assert len(errors) == 10 and any("refilled before it was freed" in e for e in errors)


MULTICAST = {"tl.enable_tma_multicast": True}


def _rewritten(kernel, rewrite):
    """`kernel` with each extern call statement passed through `rewrite(name, args)`, which returns
    new (name, args), or None to drop the call."""

    def on_eval(stmt):
        call = stmt.value
        if not (isinstance(call, ir.Call) and getattr(call.op, "name", "") == "tirx.call_extern"):
            return stmt
        out = rewrite(str(call.args[0].value), list(call.args[1:]))
        if out is None:
            return tirx.Evaluate(tirx.const(0, "int32"))
        return tirx.Evaluate(tirx.call_extern(call.ty, out[0], *out[1]))

    return kernel.with_body(tvm_ffi.structural_map(kernel.body, [(tirx.Evaluate, on_eval)]))


def _clusters(kernel, threads, pairs, seeds=3):
    for pair in pairs:
        for seed in range(seeds):
            run_cluster(kernel, threads, pair, seed)
        run_cluster(kernel, threads, pair, 0, lead=True)


def _by(x, y):
    return {"blockIdx.x": x, "blockIdx.y": y, "blockIdx.z": 0}


def test_gemm_in_clusters_of_two():
    # Blocks (0, 0) and (0, 1) share B: each loads half of it into both; 2 to 4 stages.
    for stages in (2, 3, 4):
        f = gemm.matmul.factory(256, 256, 512, 128, 256, 64, "float16", "float", 256, stages)
        kernel, threads = _device_kernel(f, MULTICAST)
        assert "tl::tma_load_multicast" in kernel.script()
        _clusters(kernel, threads, [[_by(0, 0), _by(0, 1)]])


def test_flash_attention_and_mla_in_clusters_of_two():
    f = fa.flashattn.factory(1, 1, 512, 128, False, 128, 128, 2, 256)
    kernel, threads = _device_kernel(f, {**MULTICAST, "tl.enable_fast_math": True})
    _clusters(kernel, threads, [[_bx(0), _bx(1)], [_bx(2), _bx(3)]])
    f = mla.mla_decode.factory(2, 128, 1, 1024, 512, 64, 64, 64, 1, "float16")
    kernel, threads = _device_kernel(f, MULTICAST)
    _clusters(kernel, threads, [[_by(0, 1), _by(1, 1)]], seeds=2)


def _gemm_cluster_kernel():
    f = gemm.matmul.factory(256, 256, 768, 128, 256, 64, "float16", "float", 256, 2)
    return _device_kernel(f, MULTICAST)


def test_freeing_a_stage_only_locally_is_caught():
    kernel, threads = _gemm_cluster_kernel()
    pair = [_by(0, 0), _by(0, 1)]
    # Without the remote arrivals the empty barriers (counting both blocks' warps) never complete.
    local = _rewritten(kernel, lambda n, a: ("tl::mbarrier_arrive_warp", a) if "arrive_cluster" in n else (n, a))
    with pytest.raises(ProtocolError, match="deadlock"):
        run_cluster(local, threads, pair, 0)
    # ... and counting only this block's warps, a producer refills the peer's stage while the peer's
    # consumers still read it (in some orders).

    def halve(name, args):
        if name == "tl::mbarrier_init" and "empty" in str(args[0]):
            return name, [args[0], tirx.const(8, "int32")]
        return ("tl::mbarrier_arrive_warp", args) if "arrive_cluster" in name else (name, args)

    halved = _rewritten(kernel, halve)
    errors = _errors(lambda seed: run_cluster(halved, threads, pair, seed), 12)
    # Either the load lands in a stage still held, or (seen first) it overwrites what a peer
    # consumer warp read with no barrier in between.
    assert errors and all("refilled before it was freed" in e or "shared-memory race" in e for e in errors)


def test_exiting_without_the_cluster_barrier_is_caught():
    kernel, threads = _gemm_cluster_kernel()
    assert kernel.script().count("tl::cluster_sync") == 2

    def is_sync(stmt):
        call = stmt.value if isinstance(stmt, tirx.Evaluate) else None
        return isinstance(call, ir.Call) and "tl::cluster_sync" in str(call.args[0])

    def drop_exit(seq):  # the exit barrier: the last statement of the kernel's body
        stmts = list(seq.seq)
        return tirx.SeqStmt(stmts[:-1]) if is_sync(stmts[-1]) and not is_sync(stmts[0]) else seq

    broken = kernel.with_body(tvm_ffi.structural_map(kernel.body, [(tirx.SeqStmt, drop_exit)]))
    assert broken.script().count("tl::cluster_sync") == 1
    # Block 0 runs ahead and exits while block 1's consumers still free its stages.
    with pytest.raises(ProtocolError, match="after it exited"):
        run_cluster(broken, threads, [_by(0, 0), _by(0, 1)], 0, lead=True)
    run_cluster(kernel, threads, [_by(0, 0), _by(0, 1)], 0, lead=True)  # the exit barrier waits for it


@pytest.mark.parametrize("stages", [1, 2])
def test_hand_written_warp_specialization(stages):
    """T.alloc_barrier / T.barrier_* / T.tma_copy in thread branches: the producer refills a
    stage only once every consumer thread has arrived on its k_empty."""
    _check(hand_written.ws_gemm(stages=stages), [_bx(0)], seeds=5)


def test_hand_written_producer_that_does_not_wait_is_caught():
    kernel, threads = _device_kernel(hand_written.ws_gemm())
    broken = _without(kernel, "tl::mbarrier_wait", lambda name: name == "k_empty")
    with pytest.raises(ProtocolError):
        for seed in range(5):
            run_block(broken, threads, _bx(0), seed)


def test_mla_seesaw_example():
    """The hand-written MLA decode: three warpgroups, KV parts refilled as their readers free them,
    m/P handed back and forth between the consumers (4 pairs of KV blocks)."""
    _check(mla_ws.mla_decode_ws.factory(1, 64, 512), [_bx(0)], {"tl.enable_fast_math": True}, seeds=4)


def test_mla_seesaw_producer_that_does_not_wait_is_caught():
    """The producer refilling KV parts before their readers (one or both warpgroups) are done."""
    kernel, threads = _device_kernel(mla_ws.mla_decode_ws.factory(1, 64, 512), {"tl.enable_fast_math": True})
    broken = _without(kernel, "tl::mbarrier_wait", lambda name: name == "kv_empty")
    with pytest.raises(ProtocolError):
        for seed in range(5):
            run_block(broken, threads, _bx(0), seed)


def test_mla_seesaw_consumer_that_does_not_wait_for_its_tile_to_be_read_is_caught():
    """Warpgroup 1 writing the next P_b and m_b into shared memory before warpgroup 0 has read the
    last ones (no b_free wait): no barrier counts on it, only the shared-memory race check sees it.
    (Warpgroup 0's a_free wait is redundant: it already waits, through the producer, for KV parts
    that warpgroup 1 frees only after reading P_a; dropping it is rightly not reported.)"""
    kernel, threads = _device_kernel(mla_ws.mla_decode_ws.factory(1, 64, 512), {"tl.enable_fast_math": True})
    broken = _without(kernel, "tl::mbarrier_wait", lambda name: name == "b_free")
    errors = _errors(lambda seed: run_block(broken, threads, _bx(0), seed), 4)
    assert errors and all("shared-memory race" in e for e in errors)


def test_a_barrier_under_a_branch_on_data_is_an_error():
    """Branches on data (the MLA example's rescale, taken by the threads whose row max moved) are
    skipped, which is exact only while they neither synchronize nor touch shared memory: an arrival
    moved under one is reported rather than guessed."""
    kernel, threads = _device_kernel(mla_ws.mla_decode_ws.factory(1, 64, 512), {"tl.enable_fast_math": True})
    calls = []
    tvm_ffi.structural_walk(kernel.body, [(tirx.Evaluate, calls.append)])
    arrival = next(s for s in calls if extern_name(s) == "tl::mbarrier_arrive")

    def signal_on_data(stmt):
        if "m_prev" in str(stmt.condition):
            return tirx.IfThenElse(stmt.condition, tirx.SeqStmt([stmt.then_case, arrival]), stmt.else_case)
        return stmt

    broken = kernel.with_body(tvm_ffi.structural_map(kernel.body, [(tirx.IfThenElse, signal_on_data)]))
    with pytest.raises(ProtocolError, match="a branch on data"):
        run_block(broken, threads, _bx(0), 0)


def test_waiting_again_for_a_passed_phase():
    """A consumer that waits for a stage's full barrier a second time (before freeing it) passes
    at once on hardware; the interpreter takes it too. Without the producer's empty wait it still
    catches the refill."""
    kernel, threads = _device_kernel(hand_written.ws_gemm())

    def wait_twice(stmt):
        if _is_full_wait(stmt):
            return tirx.SeqStmt([stmt, stmt])
        return stmt

    twice = kernel.with_body(tvm_ffi.structural_map(kernel.body, [(tirx.Evaluate, wait_twice)]))
    for seed in range(5):
        run_block(twice, threads, _bx(0), seed)
    broken = _without(twice, "tl::mbarrier_wait", lambda name: name == "k_empty")
    with pytest.raises(ProtocolError):
        for seed in range(5):
            run_block(broken, threads, _bx(0), seed)


def _is_full_wait(stmt) -> bool:
    return extern_name(stmt) == "tl::mbarrier_wait" and stmt.value.args[1].args[0].source.name == "k_full"

"""The barrier protocol of Hopper pipelines (TMA and mbarriers, with or without a producer
warpgroup), run on the CPU: the lowered device IR is interpreted for one block, one agent per warp
(lane 0), keeping only what synchronizes: mbarriers (init, arrivals, expect_tx, parity waits),
named barriers and `__syncthreads`. The TMA unit is taken to land a load at once. Every kernel must
finish (no deadlock) and every mbarrier wait must pass on exactly the phase it is for (a producer
running two phases ahead would overwrite a stage still in use), whatever order the warps run in
(several schedules). Kernels that never free a stage, or refill one too early, are caught."""

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
from tilelang.utils.target import determine_target

_EXAMPLES = os.path.join(os.path.dirname(__file__), "..", "..", "..", "examples")
sys.path[:0] = [os.path.join(_EXAMPLES, d) for d in ("flash_attention", "deepseek_mla", "gemm")]
import example_gemm as gemm  # noqa: E402
import example_gemm_persistent as gemm_persistent  # noqa: E402
import example_mha_fwd_bshd as fa  # noqa: E402
import example_mla_decode as mla  # noqa: E402


class ProtocolError(AssertionError):
    pass


class _Block:
    """The synchronization state of one thread block."""

    def __init__(self, threads):
        self.threads = threads
        self.mbar = {}  # (buffer name, index) -> [expected arrivals, arrivals so far, completed phases]
        self.named = {}  # barrier id -> [threads arrived, generation]

    def arrive(self, bar):
        if bar not in self.mbar:
            raise ProtocolError(f"arrival on {bar} before its initialization")
        state = self.mbar[bar]
        state[1] += 1
        if state[1] == state[0]:
            state[1], state[2] = 0, state[2] + 1

    def named_arrive(self, bar_id, count):
        state = self.named.setdefault(bar_id, [0, 0])
        state[0] += 32
        generation = state[1]
        if state[0] == count:
            state[0], state[1] = 0, state[1] + 1
        return generation


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
    if isinstance(expr, ir.Call) and getattr(expr.op, "name", "") == "prim.if_then_else":
        return _int(expr.args[1] if _int(expr.args[0], env) else expr.args[2], env)
    if isinstance(expr, ir.TensorLoad) and _register(expr.source, expr.indices, env) in env:
        return env[_register(expr.source, expr.indices, env)]
    raise ProtocolError(f"cannot evaluate {expr} for one block")


def _register(buffer, indices, env):
    """The env key of an integer register (a local buffer element, such as a stage counter)."""
    return ("register", buffer.name, tuple(_int(i, env) for i in indices))


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
        if _int(stmt.condition, env):
            yield from _agent(stmt.then_case, env, block, tx, consumed)
        elif stmt.else_case is not None:
            yield from _agent(stmt.else_case, env, block, tx, consumed)
    elif isinstance(stmt, tirx.Bind):
        try:
            env[stmt.var] = tirx.const(_int(stmt.value, env), "int32")
        except (ProtocolError, AttributeError, TypeError, ValueError):
            pass  # not an index (a float, a pointer): nothing the barriers depend on
    elif isinstance(stmt, tirx.BufferStore) and stmt.buffer.scope() == "local" and "int" in str(stmt.buffer.dtype):
        env[_register(stmt.buffer, stmt.indices, env)] = _int(stmt.value, env)
    elif isinstance(stmt, tirx.Evaluate):
        yield from _call(stmt.value, env, block, tx, consumed)


def _call(call, env, block, tx, consumed):
    if not (isinstance(call, ir.Call) and getattr(call.op, "name", "") == "tirx.call_extern"):
        return
    name, args = str(call.args[0].value), list(call.args[1:])
    if name == "tl::mbarrier_init":
        block.mbar[_key(args[0], env)] = [_int(args[1], env), 0, 0]
    elif name in ("tl::mbarrier_arrive_expect_tx", "tl::mbarrier_arrive_warp"):
        block.arrive(_key(args[0], env))
    elif name == "tl::mbarrier_wait":
        bar, parity = _key(args[0], env), _int(args[1], env)
        if bar not in block.mbar:
            raise ProtocolError(f"warp {tx // 32} waits on {bar} before its initialization")
        yield lambda: block.mbar[bar][2] % 2 != parity
        want = consumed.get(bar, 0) + 1
        if block.mbar[bar][2] != want:
            raise ProtocolError(
                f"warp {tx // 32} passed {bar} (parity {parity}) after {block.mbar[bar][2]} phases, "
                f"expecting phase {want}: a stage was refilled before it was freed"
            )
        consumed[bar] = want
    elif name == "__syncthreads" or name.startswith("tl::named_barrier_sync<") or name == "tl::pingpong_sync":
        if name == "__syncthreads":
            bar_id, count = 0, block.threads
        elif name == "tl::pingpong_sync":
            bar_id, count = 2 + tx // 128, 256
        else:
            bar_id, count = (int(x) for x in re.findall(r"\d+", name))
        generation = block.named_arrive(bar_id, count)
        yield lambda: block.named[bar_id][1] > generation
    elif name == "tl::pingpong_arrive":
        block.named_arrive(3 - tx // 128, 256)
    elif name == "tl::pingpong_init" and tx // 128 == 1:
        block.named_arrive(2, 256)


def run_block(device_func, threads, block_index, seed):
    """Interprets one block of `device_func`; raises ProtocolError on a deadlock or an overrun."""
    block = _Block(threads)
    agents = {}
    for tx in range(0, threads, 32):
        env = {"block": block_index}
        agents[tx] = (_agent(device_func.body, env, block, tx, {}), [None])
    rng = random.Random(seed)
    while agents:
        progressed = False
        order = list(agents)
        rng.shuffle(order)
        for tx in order:
            gen, blocked = agents[tx]
            if blocked[0] is not None and not blocked[0]():
                continue
            progressed = True
            try:
                blocked[0] = next(gen)
            except StopIteration:
                del agents[tx]
        if not progressed:
            raise ProtocolError(f"deadlock: warps {sorted(tx // 32 for tx in agents)} wait forever")


def _device_kernel(func, configs=None):
    low = lower(func, determine_target("sm_90a"), configs or {})
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
    low = lower(f, determine_target("sm_90a"), {})
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
    errors = []
    for seed in range(10):
        try:
            run_block(broken, threads, _bx(0), seed)
        except ProtocolError as err:
            errors.append(str(err))
    # A consumer passes its wait on a later phase (or, two phases later, waits forever).
    assert len(errors) == 10 and any("refilled before it was freed" in e for e in errors)

"""tilelang.analysis.barrier_protocol, on the CPU: every Hopper pipeline variant of the examples
(TMA and mbarriers, with or without a producer warpgroup, persistent, staged, in 2-block clusters,
hand-written) passes for the blocks whose iteration counts differ and in several warp orders; each
broken protocol (a stage never freed, refilled too early, freed only locally, an exit without the
cluster barrier, a tile handed on before it was read, a barrier under a branch on data) is caught.
The debug switch (`tl.check_barrier_protocol`, `TILELANG_CHECK_BARRIER_PROTOCOL=1`) runs the check
inside lower()."""

import functools
import os
import re
import sys

import pytest
import tvm_ffi
from tvm import tirx

import tilelang
import tilelang.language as T
from tilelang.analysis import ProtocolError, barrier_protocol_problems, kernel_problems, run_cluster
from tilelang.engine.pipeline import lower
from tilelang.errors import CompilerError
from tilelang.options import CompileOptions
from tilelang.utils.ir import collect, extern_name
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

FAST = {"tl.enable_fast_math": True}
MULTICAST = {"tl.enable_tma_multicast": True}


def _lower(func, configs=None):
    return lower(func, determine_target("sm_90a"), CompileOptions.from_pass_configs(configs))


def _kernel(func, configs=None):
    (kernel,) = [f for gv, f in _lower(func, configs).device_mod.functions.items() if "kernel" in gv.name_hint]
    return kernel


def _fa(seq_len=512, causal=False):
    return fa.flashattn.factory(1, 1, seq_len, 128, causal, 128, 128, 2, 256)


def _gemm(stages, K=512):
    return gemm.matmul.factory(256, 256, K, 128, 256, 64, "float16", "float", 256, stages)


@functools.cache
def _fa_kernel(seq_len=512):
    return _kernel(_fa(seq_len), FAST)


@functools.cache
def _mla_ws_kernel():
    return _kernel(mla_ws.mla_decode_ws.factory(1, 64, 512), FAST)


@functools.cache
def _hand_written_kernel():
    return _kernel(hand_written.ws_gemm())


@functools.cache
def _gemm_cluster_kernel():
    return _kernel(_gemm(2, K=768), MULTICAST)


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


def _case(name, kernel, blocks, seeds=3):
    return pytest.param(kernel, blocks, seeds, id=name)


PASSING = [
    # Causal row blocks 0..3 run 1..4 iterations: prologue and epilogue only, up to a full loop.
    _case("flash_attention", _fa_kernel, range(4)),
    _case("flash_attention_causal", lambda: _kernel(_fa(causal=True), FAST), range(4)),
    _case(
        "flash_attention_masked_tail",
        lambda: _kernel(fa.flashattn.factory(1, 1, 200, 64, True, 64, 64, 2, 128)),
        range(4),
    ),
    *[_case(f"gemm_{s}_stages", lambda s=s: _kernel(_gemm(s)), [0]) for s in (2, 3, 4)],
    # Without a producer warpgroup, thread 0 issues the TMA loads ahead (the same mbarriers).
    *[
        _case(f"gemm_{s}_stages_no_ws", lambda s=s: _kernel(_gemm(s), {"tl.disable_warp_specialized": True}), [0])
        for s in (2, 3, 4)
    ],
    # 8 tiles over 3 blocks: blocks 0 and 1 run three tiles, block 2 two; the loads of a tile start
    # while the last tile's stages drain. K 128: fewer iterations per tile than stages.
    *[
        _case(
            f"persistent_gemm_{s}_stages_K{K}",
            lambda s=s, K=K: _kernel(
                gemm_persistent.matmul_persistent.factory(512, 512, K, 128, 256, 64, 3, num_stages=s)
            ),
            range(3),
        )
        for s in (2, 3, 4)
        for K in (128, 512)
    ],
    # Runs of 0, 1, 2 and 3 iterations in a row: V of a run's last iteration (read one iteration
    # behind) is freed after its epilogue, so the next run's loads find their stages free.
    _case("staged_runs_of_any_length", lambda: _kernel(_staged_per_tile.factory()), [0, 1]),
    # T.alloc_barrier / T.barrier_* / T.tma_copy in thread branches.
    *[_case(f"hand_written_{s}_stages", lambda s=s: _kernel(hand_written.ws_gemm(stages=s)), [0], 5) for s in (1, 2)],
    # Three warpgroups: KV parts refilled as their readers free them, m/P handed back and forth.
    _case("mla_seesaw", _mla_ws_kernel, [0], 4),
    # 2-block clusters: each block a pair with its neighbour, which loads half of the shared tile.
    *[_case(f"gemm_cluster_{s}_stages", lambda s=s: _kernel(_gemm(s), MULTICAST), [(0, 0)]) for s in (2, 3, 4)],
    _case("flash_attention_cluster", lambda: _kernel(_fa(), {**MULTICAST, **FAST}), [0, 2]),
    _case(
        "mla_cluster",
        lambda: _kernel(mla.mla_decode.factory(2, 128, 1, 1024, 512, 64, 64, 64, 1, "float16"), MULTICAST),
        [(0, 1)],
        2,
    ),
]


@pytest.mark.parametrize("kernel, blocks, seeds", PASSING)
def test_correct_protocols_pass(kernel, blocks, seeds):
    assert barrier_protocol_problems(kernel(), list(blocks), seeds) == []


def test_staged_runs_take_no_turns_and_clusters_multicast():
    # What the cases above rely on: the staged loop counts stages across runs (no pingpong turns),
    # and the cluster GEMM multicasts.
    script = _kernel(_staged_per_tile.factory()).script()
    assert "k_consumer_runs" in script and "pingpong" not in script
    assert "tl::tma_load_multicast" in _kernel(_gemm(2), MULTICAST).script()


def test_mla_split_and_combine_kernels():
    low = _lower(mla.mla_decode.factory(2, 128, 1, 1024, 512, 64, 64, 64, 2, "float16"))
    kernels = [fn for _, fn in low.device_mod.functions.items()]
    assert len(kernels) == 2
    assert all(kernel_problems(kernel, [(0, 0, 1)], 2) == [] for kernel in kernels)


# ---- broken protocols -------------------------------------------------------------------------


def _errors(kernel, blocks, seeds, lead=False) -> list:
    """The ProtocolError message of each of `seeds` warp orders that fails (`blocks`: one block, or
    a cluster's two)."""
    out = []
    for seed in range(seeds):
        try:
            run_cluster(kernel, blocks, seed, lead)
        except ProtocolError as err:
            out.append(str(err))
    return out


def _map(kernel, kind, fn):
    return kernel.with_body(tvm_ffi.structural_map(kernel.body, [(kind, fn)]))


def _without(kernel, name, barrier_named, keep=lambda index: False):
    """`kernel` with its `name(barrier, ...)` calls on barriers `barrier_named` accepts dropped
    (except where `keep(barrier index)`)."""

    def drop(stmt):
        if extern_name(stmt) == name:
            load = stmt.value.args[1].args[0]
            if barrier_named(load.source.name) and not keep(load.indices[0]):
                return tirx.Evaluate(tirx.const(0, "int32"))
        return stmt

    return _map(kernel, tirx.Evaluate, drop)


def _rewritten(kernel, rewrite):
    """`kernel` with each extern call statement passed through `rewrite(name, args)`, which returns
    new (name, args), or None to drop the call."""

    def on_eval(stmt):
        if extern_name(stmt) is None:
            return stmt
        out = rewrite(extern_name(stmt), list(stmt.value.args[1:]))
        if out is None:
            return tirx.Evaluate(tirx.const(0, "int32"))
        return tirx.Evaluate(tirx.call_extern(stmt.value.ty, out[0], *out[1]))

    return _map(kernel, tirx.Evaluate, on_eval)


def _never_freed():
    # The prologue frees stage 0 of K by a constant index; the loop's frees index by the iteration.
    in_loop = lambda i: not isinstance(i, tirx.IntImm)  # noqa: E731
    return _without(_fa_kernel(), "tl::mbarrier_arrive_warp", lambda n: n == "K_shared_empty", keep=in_loop)


def _wait_twice(kernel):
    """A consumer waiting for a stage's full barrier a second time (before freeing it) passes at once
    on hardware; the interpreter takes it too."""

    def twice(stmt):
        full_wait = extern_name(stmt) == "tl::mbarrier_wait" and stmt.value.args[1].args[0].source.name == "k_full"
        return tirx.SeqStmt([stmt, stmt]) if full_wait else stmt

    return _map(kernel, tirx.Evaluate, twice)


def _barrier_under_data_branch():
    """An arrival moved under a branch on data (the MLA example's rescale, taken by the threads
    whose row max moved): reported rather than guessed."""
    kernel = _mla_ws_kernel()
    arrival = next(s for s in collect(kernel.body, tirx.Evaluate) if extern_name(s) == "tl::mbarrier_arrive")

    def signal_on_data(stmt):
        if "m_prev" in str(stmt.condition):
            return tirx.IfThenElse(stmt.condition, tirx.SeqStmt([stmt.then_case, arrival]), stmt.else_case)
        return stmt

    return _map(kernel, tirx.IfThenElse, signal_on_data)


CAUGHT = [
    # (broken kernel, schedules, what every failing schedule reports)
    pytest.param(_never_freed, 1, "deadlock", id="stage_never_freed"),
    pytest.param(
        lambda: _without(_hand_written_kernel(), "tl::mbarrier_wait", lambda n: n == "k_empty"),
        5,
        "",
        id="hand_written_producer_does_not_wait",
    ),
    pytest.param(
        lambda: _without(_wait_twice(_hand_written_kernel()), "tl::mbarrier_wait", lambda n: n == "k_empty"),
        5,
        "",
        id="consumer_waits_twice_producer_does_not_wait",
    ),
    # The producer refilling KV parts before their readers (one or both warpgroups) are done.
    pytest.param(
        lambda: _without(_mla_ws_kernel(), "tl::mbarrier_wait", lambda n: n == "kv_empty"),
        5,
        "",
        id="mla_producer_does_not_wait",
    ),
    # Warpgroup 1 writing the next P_b and m_b before warpgroup 0 has read the last ones: no barrier
    # counts on it, only the race check sees it. (Warpgroup 0's a_free wait is redundant: it already
    # waits, through the producer, for KV parts warpgroup 1 frees only after reading P_a.)
    pytest.param(
        lambda: _without(_mla_ws_kernel(), "tl::mbarrier_wait", lambda n: n == "b_free"),
        4,
        "shared-memory race",
        id="mla_tile_handed_on_before_read",
    ),
    pytest.param(_barrier_under_data_branch, 1, "a branch on data", id="barrier_under_data_branch"),
]


@pytest.mark.parametrize("broken, seeds, pattern", CAUGHT)
def test_broken_protocols_are_caught(broken, seeds, pattern):
    errors = _errors(broken(), [0], seeds)
    assert errors and all(re.search(pattern, e) for e in errors), errors


def test_waiting_again_for_a_passed_phase_passes():
    assert _errors(_wait_twice(_hand_written_kernel()), [0], 5) == []


def test_producer_that_does_not_wait_for_free_stages():
    # 6 iterations on 2 stages: a producer that runs ahead fills each stage 3 times. A consumer
    # passes its wait on a later phase (or, two phases later, waits forever).
    broken = _without(_fa_kernel(768), "tl::mbarrier_wait", lambda n: n.endswith("_empty"))
    errors = _errors(broken, [0], 10)
    assert len(errors) == 10 and any("refilled before it was freed" in e for e in errors)


PAIR = [(0, 0), (0, 1)]


def test_freeing_a_stage_only_locally():
    kernel = _gemm_cluster_kernel()
    # Without the remote arrivals the empty barriers (counting both blocks' warps) never complete.
    local = _rewritten(kernel, lambda n, a: ("tl::mbarrier_arrive_warp", a) if "arrive_cluster" in n else (n, a))
    assert re.match("deadlock", _errors(local, PAIR, 1)[0])

    # ... and counting only this block's warps, a producer refills the peer's stage while the peer's
    # consumers still read it (in some orders).
    def halve(name, args):
        if name == "tl::mbarrier_init" and "empty" in str(args[0]):
            return name, [args[0], tirx.const(8, "int32")]
        return ("tl::mbarrier_arrive_warp", args) if "arrive_cluster" in name else (name, args)

    errors = _errors(_rewritten(kernel, halve), PAIR, 12)
    # Either the load lands in a stage still held, or (seen first) it overwrites what a peer
    # consumer warp read with no barrier in between.
    assert errors and all("refilled before it was freed" in e or "shared-memory race" in e for e in errors)


def test_exiting_without_the_cluster_barrier():
    kernel = _gemm_cluster_kernel()
    assert kernel.script().count("tl::cluster_sync") == 2

    def is_sync(stmt):
        return extern_name(stmt) == "tl::cluster_sync"

    def drop_exit(seq):  # the exit barrier: the last statement of the kernel's body
        stmts = list(seq.seq)
        return tirx.SeqStmt(stmts[:-1]) if is_sync(stmts[-1]) and not is_sync(stmts[0]) else seq

    broken = _map(kernel, tirx.SeqStmt, drop_exit)
    assert broken.script().count("tl::cluster_sync") == 1
    # Block 0 runs ahead and exits while block 1's consumers still free its stages.
    assert "after it exited" in _errors(broken, PAIR, 1, lead=True)[0]
    assert _errors(kernel, PAIR, 1, lead=True) == []  # the exit barrier waits for it


# ---- the debug switch ---------------------------------------------------------------------------


def _pipeline(consumer_frees=True):
    """A producer warpgroup loads each K step of A by TMA into one of two stages; the consumer
    warpgroup adds it up and (unless told not to) frees the stage."""

    @T.prim_func
    def main(A: T.Tensor((64, 256), "float16"), C: T.Tensor((64, 64), "float32")):
        with T.Kernel(1, threads=256):
            A_s = T.alloc_shared((2, 64, 64), "float16")
            C_f = T.alloc_fragment((64, 64), "float32")
            full = T.alloc_barrier([1, 1])
            empty = T.alloc_barrier([128, 128])
            tx = T.get_thread_binding()
            if tx < 128:
                T.clear(C_f)
                for k in T.serial(4):
                    T.barrier_wait(full[k % 2], k // 2 % 2)
                    for i, j in T.Parallel(64, 64):
                        C_f[i, j] += A_s[k % 2, i, j]
                    if consumer_frees:
                        T.barrier_arrive(empty[k % 2])
                T.copy(C_f, C)
            elif tx == 128:  # one thread waits and loads: the producer's other warps could lag a phase behind
                for k in T.serial(4):
                    T.barrier_wait(empty[k % 2], (k // 2 + 1) % 2)
                    T.tma_copy(A[0:64, k * 64 : (k + 1) * 64], A_s[k % 2, :, :], barrier=full[k % 2])
                    T.mbarrier_arrive(full[k % 2])  # the one arrival `full` counts

    return main


CHECK = {"tl.check_barrier_protocol": True}


def test_the_switch_checks_every_lowered_kernel():
    _lower(_pipeline(), CHECK)
    _lower(_pipeline(consumer_frees=False))  # off by default: not interpreted
    with pytest.raises(CompilerError, match=r"barrier-protocol check .*\n.*main_kernel.*deadlock"):
        tilelang.compile(_pipeline(consumer_frees=False), target="sm_90a", pass_configs=CHECK)


def test_the_switch_from_the_environment(monkeypatch):
    monkeypatch.setenv("TILELANG_CHECK_BARRIER_PROTOCOL", "1")
    assert CompileOptions.from_pass_configs(None).check_barrier_protocol
    with pytest.raises(CompilerError, match="deadlock"):
        _lower(_pipeline(consumer_frees=False))
    _lower(_pipeline(consumer_frees=False), {"tl.check_barrier_protocol": False})

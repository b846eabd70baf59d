"""The autotuner without a GPU: parallel compiles of real kernels (sm_80) timed by a fake benchmark,
skipped configurations and their reasons, the tuning-result cache across processes, reference
checks on fake kernels, and the compile pool's crash and timeout handling."""

import logging
import os
import signal
import subprocess
import sys
import textwrap
import time

import cloudpickle
import pytest
import torch

import tilelang
import tilelang.language as T
from tilelang import cache
from tilelang.autotuner import parallel
from tilelang.errors import UserError
from tilelang.jit.params import Param

HERE = os.path.dirname(os.path.abspath(__file__))
CONFIGS = [{"block": 64}, {"block": 128}, {"block": 96}, {"block": 256}]


@tilelang.jit(out_idx=[-1], target="sm_80")
def scale(N, block=128, factor=2.0):
    if block % 64:
        raise ValueError(f"block must be a multiple of 64, got {block}")

    @T.prim_func
    def main(A: T.Tensor((N,), "float32"), B: T.Tensor((N,), "float32")):
        with T.Kernel(T.ceildiv(N, block), threads=block) as bx:
            for i in T.Parallel(block):
                B[bx * block + i] = A[bx * block + i] * factor

    return main


def fake_latency(profiler, func, inputs, baseline):
    """Bigger blocks are "faster", except 256, which fails at run time."""
    block = profiler.kernel.config["block"]
    if block == 256:
        raise RuntimeError("CUDA error: too many resources requested for launch")
    return 100.0 / block


def no_bench(profiler, func, inputs, baseline):
    raise AssertionError("the tuning cache should have answered without timing anything")


def tuned(bench, configs=CONFIGS, workers=None):
    return tilelang.autotune(configs=configs, _bench=bench, _workers=workers, _device="cpu")(scale)


@pytest.fixture(scope="module")
def first_tuning(tmp_path_factory):
    """One tuning through the compile pool, into a cache folder of its own; later tests reuse its
    kernels and result. Returns (folder, best kernel, log records)."""
    folder = tmp_path_factory.mktemp("tuning")
    records = []
    handler = logging.Handler(logging.INFO)
    handler.emit = records.append
    logger = logging.getLogger("tilelang")
    level = logger.level
    logger.addHandler(handler)
    logger.setLevel(logging.INFO)
    try:
        with pytest.MonkeyPatch.context() as env:
            env.setenv("TILELANG_CACHE_DIR", str(folder))
            best = tuned(fake_latency)(4096)
    finally:
        logger.removeHandler(handler)
        logger.setLevel(level)
    return folder, best, records


@pytest.fixture
def cache_dir(first_tuning, monkeypatch):
    monkeypatch.setenv("TILELANG_CACHE_DIR", str(first_tuning[0]))
    return first_tuning[0]


def test_tunes_in_parallel_and_skips_failures_with_their_reasons(first_tuning):
    folder, best, records = first_tuning
    assert best.config == {"block": 128} and best.latency == pytest.approx(100 / 128) and best.ref_latency is None
    assert best.out_idx == [1] and "scale_kernel" in best.get_kernel_source()
    text = "\n".join(r.getMessage() for r in records)
    assert "{'block': 96} does not compile: ValueError: block must be a multiple of 64, got 96" in text
    assert "{'block': 256} fails: RuntimeError: CUDA error: too many resources" in text
    summary = [r.getMessage() for r in records if r.levelno == logging.WARNING]
    assert len(summary) == 1 and "skipped 2 of 4 configurations" in summary[0]
    # The workers built each kernel that compiles into the disk cache; the result is on disk too.
    assert len(os.listdir(folder / "kernels")) == 3
    assert len(os.listdir(folder / "autotuner")) == 1


def test_a_new_tuner_answers_from_disk_then_from_memory(cache_dir):
    again = tuned(no_bench)
    kernel = again(4096)
    assert kernel.config == {"block": 128} and kernel.latency == pytest.approx(100 / 128)
    assert again(4096) is kernel


def test_a_second_process_gets_the_result_without_benchmarking(cache_dir):
    # The compiler's fingerprint is handed over: the key must not change if someone edits the
    # checkout between the two processes.
    code = textwrap.dedent(f"""
        import sys; sys.path.insert(0, {HERE!r}); sys.path.insert(0, {os.getcwd()!r})
        import test_autotune, tilelang.cache
        tilelang.cache.compiler_fingerprint = lambda: {cache.compiler_fingerprint()!r}
        kernel = test_autotune.tuned(test_autotune.no_bench)(4096)
        print("best", kernel.config, kernel.latency)
    """)
    env = dict(os.environ, TILELANG_CACHE_DIR=str(cache_dir))
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True)
    assert out.returncode == 0, out.stderr[-3000:]
    assert f"best {{'block': 128}} {100 / 128}" in out.stdout


def test_the_result_cache_key_covers_the_configuration_list(cache_dir):
    kernel = tuned(lambda *_: 1.0, configs=CONFIGS[:1], workers=0)(4096)  # tuned anew
    assert kernel.config == {"block": 64} and kernel.latency == 1.0


def test_nothing_working_lists_every_reason(cache_dir):
    with pytest.raises(RuntimeError) as info:
        tuned(fake_latency, configs=[{"block": 96}, {"block": 256}], workers=0)(4096)
    text = str(info.value)
    assert "autotune scale: none of the 2 configurations works" in text
    assert "{'block': 96}: ValueError: block must be a multiple of 64" in text
    assert "{'block': 256}: RuntimeError: CUDA error" in text


class FakeJIT:
    """A stand-in for @tilelang.jit whose kernels compute on the CPU: lets the reference check run.
    `mode="eager"` makes it an eager jit: calling it runs the kernel, `compile` returns it."""

    def __init__(self, factory, mode="lazy"):
        self.factory, self.out_idx, self.target, self.pass_configs = factory, [-1], "sm_80", None
        self.mode = mode
        self.calls = []

    def __call__(self, *args, **kwargs):
        self.calls.append((args, kwargs))
        if self.mode == "eager":  # compile for the tensor's size, then run
            return self.factory(args[0].numel(), **kwargs)(*args)
        return self.factory(*args, **kwargs)

    def compile(self, *args, **kwargs):
        self.calls.append(("compile", args, kwargs))
        return self.factory(args[0].numel() if args else kwargs.pop("N"), **kwargs)


class CPUKernel:
    def __init__(self, n, fn, name="cpu_scale"):
        self.params = [Param("A", (n,), "float32"), Param("B", (n,), "float32")]
        self.out_idx, self.name, self.fn = [1], name, fn

    def _ensure_built(self):
        pass

    def get_kernel_source(self):
        return f"// {self.name}"

    def __call__(self, a):
        return self.fn(a)


def cpu_scale(N, unroll=1):
    """unroll=3 is "miscompiled": its last element is wrong. (Writing 0 there was caught only when the
    random input's last value was not within the tolerance of 0, about 1 run in 100 failed.)"""

    def run(a):
        out = a * 2
        if unroll == 3:
            out[-1] = 7.0  # inputs are U(-1, 1): the right value is within (-2, 2)
        return out

    return CPUKernel(N, run)


def cpu_tuner(jit=None, configs=({"unroll": 1}, {"unroll": 2}, {"unroll": 3}), bench=None, **options):
    """@tilelang.autotune over a FakeJIT of cpu_scale: inputs on the CPU, compiles in this process."""
    bench = bench or (lambda profiler, func, inputs, baseline: 1.0 / profiler.kernel.config["unroll"])
    return tilelang.autotune(configs=list(configs), _bench=bench, _workers=0, _device="cpu", **options)(
        jit or FakeJIT(cpu_scale)
    )


@pytest.fixture
def cache_off(tmp_path, monkeypatch):
    """A tuning-result cache of its own for the test."""
    monkeypatch.setenv("TILELANG_CACHE_DIR", str(tmp_path))
    return tmp_path


def test_configurations_are_checked_against_the_reference(cache_off, caplog):
    tuner = cpu_tuner(
        ref_prog=lambda a: a * 2,
        max_mismatched_ratio=0.0,
        bench=lambda profiler, func, inputs, baseline: (
            0.5 if func is not None else 1.0 / profiler.kernel.config["unroll"]
        ),
    )
    with caplog.at_level(logging.INFO, logger="tilelang"):
        best = tuner(512)
    assert best.config == {"unroll": 2} and best.latency == 0.5 and best.ref_latency == 0.5
    assert "{'unroll': 3} fails: AssertionError: cpu_scale: output 'B' differs from the reference in 1 of 512" in (
        caplog.text
    )


def test_warmup_and_rep_are_run_counts_passed_to_do_bench(cache_off, monkeypatch):
    """Public TileLang's autotuner hands warmup/rep to do_bench as n_warmup/n_repeat."""
    from tilelang.profiler import Profiler

    seen = []

    def fake_do_bench(profiler, func=None, **options):
        seen.append(options)
        return 1.0 / profiler.kernel.config["unroll"]

    monkeypatch.setattr(Profiler, "do_bench", fake_do_bench)
    tuner = tilelang.autotune(configs=[{"unroll": 1}, {"unroll": 2}], warmup=4, rep=512, _workers=0, _device="cpu")
    assert tuner(FakeJIT(cpu_scale))(64).config == {"unroll": 2}
    assert seen[0]["n_warmup"] == 4 and seen[0]["n_repeat"] == 512 and seen[0]["backend"] == "event"
    assert seen[0]["early_stop_baseline"] is None and len(seen[0]["input_tensors"]) == 1


def test_any_tuned_argument_given_means_no_tuning(caplog):
    jit = FakeJIT(cpu_scale)
    tuner = cpu_tuner(jit, bench=no_bench)
    kernel = tuner(64, unroll=2)
    assert isinstance(kernel, CPUKernel) and jit.calls == [((64,), {"unroll": 2})]
    assert tuner(64, 2) is not None and jit.calls[-1] == ((64, 2), {})

    def factory(N, block_M=64, block_N=64):
        return CPUKernel(N, lambda a: a)

    # Public TileLang compiles directly as soon as any tuned argument is given (a warning here).
    two = FakeJIT(factory)
    with caplog.at_level(logging.INFO, logger="tilelang"):
        cpu_tuner(two, configs=[{"block_M": 64, "block_N": 64}], bench=no_bench)(64, block_M=32)
    assert two.calls == [((64,), {"block_M": 32})]
    assert "['block_M'] given, so no tuning (['block_N'] take their defaults)" in caplog.text


def test_wrong_configurations_and_calls_are_clear_errors():
    def factory(N, block_M=64, block_N=64):
        return None

    jit = FakeJIT(factory)
    # raised at the call: the traceback shows the user's line
    with pytest.raises(UserError, match=r"configuration \{'block_K': 32\} sets \['block_K'\], which it does not"):
        tilelang.autotune(configs=[{"block_K": 32}], _workers=0)(jit)(64)
    # raised at the call: the traceback shows the user's line
    with pytest.raises(UserError, match="the configuration list is empty"):
        tilelang.autotune(configs=lambda N: [], _workers=0)(jit)(64)
    # raised at the call: the traceback shows the user's line
    with pytest.raises(UserError, match="configurations are dicts of keyword arguments"):
        tilelang.autotune(configs=[("block_M", 64)], _workers=0)(jit)(64)
    # raised at the call: the traceback shows the user's line
    with pytest.raises(UserError, match="pass_configs of .* is not a dict"):
        tilelang.autotune(configs=[{"block_M": 64, "pass_configs": True}], _workers=0)(jit)(64)
    # raised at the call: the traceback shows the user's line
    with pytest.raises(UserError, match="goes above @tilelang.jit"):
        tilelang.autotune(configs=[{"block_M": 64}])(factory)
    with pytest.raises(UserError, match="needs configs="):  # raised at the call: the traceback shows the user's line
        tilelang.autotune(warmup=3)
    # raised at the call: the traceback shows the user's line
    with pytest.raises(UserError, match="early_stop_factor must be at least 1.0, got 0.5"):
        tilelang.autotune(configs=[{"block_M": 64}], early_stop=True, early_stop_factor=0.5)(jit)


def test_configurations_from_a_callable_see_the_call(cache_off):
    seen = []

    def configs(N):
        seen.append(N)
        return [{"unroll": u} for u in range(1, 3)]

    tuner = tilelang.autotune(
        configs=configs, _bench=lambda p, *_: -p.kernel.config["unroll"], _workers=0, _device="cpu"
    )
    assert tuner(FakeJIT(cpu_scale))(128).config == {"unroll": 2} and seen == [128]


def test_early_stop_gives_do_bench_the_best_so_far_times_the_factor(cache_off):
    baselines = []

    def bench(profiler, func, inputs, baseline):
        baselines.append(baseline)
        return {1: 4.0, 2: 1.0, 3: 3.0}[profiler.kernel.config["unroll"]]

    best = cpu_tuner(bench=bench, early_stop=True, early_stop_factor=1.5)(64)
    assert best.config == {"unroll": 2} and baselines == [None, 6.0, 1.5]
    baselines.clear()
    cpu_tuner(bench=bench)(65)  # early_stop off: never a baseline
    assert baselines == [None, None, None]


def test_supply_prog_gives_the_inputs_and_manual_check_prog_judges(cache_off, caplog):
    supplied, judged = [], []

    def supply_prog(params):
        supplied.append([(p.name, p.shape, p.dtype) for p in params])
        return [torch.arange(64, dtype=params[0].dtype.as_torch())]  # public TileLang's params have as_torch

    def manual_check_prog(outputs, expected):
        judged.append(len(outputs))
        torch.testing.assert_close(outputs[0], expected[0])

    def bench(profiler, func, inputs, baseline):
        assert torch.equal(inputs[0], torch.arange(64, dtype=torch.float32))
        return 1.0 / profiler.kernel.config["unroll"]

    with caplog.at_level(logging.INFO, logger="tilelang"):
        best = cpu_tuner(
            bench=bench, supply_prog=supply_prog, ref_prog=lambda a: a * 2, manual_check_prog=manual_check_prog
        )(64)
    assert best.config == {"unroll": 2} and supplied[0] == [("A", (64,), "float32")]
    assert judged == [1, 1, 1] and "{'unroll': 3} fails: AssertionError" in caplog.text


@pytest.mark.parametrize("cache_inputs", [True, False])
def test_cache_input_tensors_times_every_configuration_on_the_same_inputs(cache_off, cache_inputs):
    timed = []

    def bench(profiler, func, inputs, baseline):
        timed.append(inputs[0])
        return 1.0

    checked = []

    def reference(a):
        checked.append(a)
        return a * 2

    cpu_tuner(
        bench=bench, configs=[{"unroll": 1}, {"unroll": 2}], ref_prog=reference, cache_input_tensors=cache_inputs
    )(64)
    assert (timed[0] is timed[1]) == cache_inputs
    assert checked[0] is not checked[1]  # the check always draws fresh inputs


def test_set_autotune_inputs_gives_the_inputs_to_every_configuration(cache_off):
    from tilelang.autotuner import get_autotune_inputs, set_autotune_inputs

    given = torch.full((64,), 3.0)
    timed = []

    def bench(profiler, func, inputs, baseline):
        timed.append(inputs)
        return 1.0 / profiler.kernel.config["unroll"]

    assert get_autotune_inputs() is None
    with set_autotune_inputs(given):
        with set_autotune_inputs([torch.zeros(64)]) as inner:
            assert get_autotune_inputs() is inner.tensors
        assert get_autotune_inputs() == [given]
        best = cpu_tuner(bench=bench, ref_prog=lambda a: a * 2)(64)
    assert get_autotune_inputs() is None and best.config == {"unroll": 2}
    # Cloned once: the same tensors for every configuration, equal to but not the user's.
    # (The third timing is the reference's.)
    assert len(timed) == 3 and timed[0] is timed[1] is timed[2]
    assert timed[0][0] is not given and torch.equal(timed[0][0], given)


def test_set_autotune_inputs_is_per_thread():
    import threading

    from tilelang.autotuner import get_autotune_inputs, set_autotune_inputs

    seen = []
    with set_autotune_inputs(torch.ones(2)):
        thread = threading.Thread(target=lambda: seen.append(get_autotune_inputs()))
        thread.start()
        thread.join()
    assert seen == [None]


def test_a_configuration_past_the_timeout_is_skipped(cache_off, caplog):
    def bench(profiler, func, inputs, baseline):
        if profiler.kernel.config["unroll"] == 2:
            time.sleep(5)
        return 1.0 / profiler.kernel.config["unroll"]

    start = time.monotonic()
    with caplog.at_level(logging.INFO, logger="tilelang"):
        best = cpu_tuner(bench=bench, timeout=0.5)(64)
    assert best.config == {"unroll": 3} and time.monotonic() - start < 4
    assert "{'unroll': 2} fails: TimeoutError: checking and timing took longer than the timeout (0.5 s)" in caplog.text


def test_eager_kernels_are_compiled_per_configuration_and_the_best_runs(cache_off):
    jit = FakeJIT(cpu_scale, mode="eager")
    tuner = cpu_tuner(jit, configs=[{"unroll": 1}, {"unroll": 2}])
    a = torch.arange(8, dtype=torch.float32)
    assert torch.equal(tuner(a), a * 2)  # tunes on drawn inputs, then runs the best on `a`
    assert [c for c in jit.calls if c[0] == "compile"] == [
        ("compile", (a,), {"unroll": 1}),
        ("compile", (a,), {"unroll": 2}),
    ]
    assert jit.calls[-1] == ((a,), {"unroll": 2})
    # Another tensor of the same shape, dtype and strides: no new tuning.
    n_calls = len(jit.calls)
    tuner(torch.ones(8))
    assert len(jit.calls) == n_calls + 1
    kernel = tuner.compile(N=16)
    assert isinstance(kernel, CPUKernel) and kernel.config == {"unroll": 2} and kernel.latency == 0.5


def test_do_not_specialize_reuses_the_tuning(cache_off):
    runs = []

    def factory(N, scale=1.0, unroll=1):
        return cpu_scale(N, unroll)

    bench = lambda profiler, func, inputs, baseline: runs.append(1) or 1.0 / profiler.kernel.config["unroll"]  # noqa: E731
    tuner = cpu_tuner(
        FakeJIT(factory), configs=[{"unroll": 1}, {"unroll": 2}], bench=bench, do_not_specialize=["scale"]
    )
    assert tuner(64, 1.0).config == {"unroll": 2} and len(runs) == 2
    assert tuner(64, scale=3.0).config == {"unroll": 2} and len(runs) == 2
    assert tuner(128, 1.0) is not None and len(runs) == 4  # N is specialized on


def test_scheduling_options_are_accepted_and_said_what_they_do(cache_off, caplog):
    from tilelang.autotuner import AutoTuner

    tuner = AutoTuner.from_kernel(kernel=FakeJIT(cpu_scale), configs=[{"N": 32, "unroll": 1}])
    tuner._bench, tuner._workers, tuner._device = (lambda *_: 1.0), 0, "cpu"
    with caplog.at_level(logging.INFO, logger="tilelang"):
        result = tuner.run(
            use_pipeline=True, enable_grouped_compile=True, benchmark_multi_gpu=True, benchmark_devices=[0, 1]
        )
    assert result.latency == 1.0
    assert "every configuration compiles in a process of its own" in caplog.text
    assert (
        "timing on several GPUs at once" in caplog.text and "timed one after another on the current GPU" in caplog.text
    )
    # raised at the call: the traceback shows the user's line
    with pytest.raises(UserError, match="early_stop_factor must be at least 1.0"):
        tuner.run(early_stop=True, early_stop_factor=0.9)


def scale_kernel(N):
    """A function returning a prim_func, for AutoTuner.from_kernel (public TileLang's API mode)."""

    def kernel(block=128, factor=2.0):
        @T.prim_func
        def main(A: T.Tensor((N,), "float32"), B: T.Tensor((N,), "float32")):
            with T.Kernel(T.ceildiv(N, block), threads=block) as bx:
                for i in T.Parallel(block):
                    B[bx * block + i] = A[bx * block + i] * factor

        return main

    return kernel


def test_the_autotuner_api_with_per_configuration_pass_configs(cache_dir):
    from tilelang.autotuner import AutoTuner, AutotuneResult

    fast = {tilelang.PassConfigKey.TL_ENABLE_FAST_MATH: True}
    configs = [{"block": 64}, {"block": 128, "pass_configs": fast}]

    def make(bench):
        tuner = (
            AutoTuner.from_kernel(kernel=scale_kernel(2048), configs=configs)
            .set_compile_args(out_idx=[-1], target="sm_80")
            .set_profile_args(supply_type=tilelang.TensorSupplyType.Integer, cache_input_tensors=True)
        )
        tuner._bench, tuner._device = bench, "cpu"
        return tuner

    result = make(lambda profiler, *_: 64.0 / profiler.kernel.config["block"]).run(warmup=3, rep=20)
    assert isinstance(result, AutotuneResult) and result.config == configs[1] and result.latency == 0.5
    assert result.kernel.pass_configs.get("tl.enable_fast_math") is True and result.ref_latency is None
    assert result.libcode == result.kernel.get_kernel_source() and "__global__" in result.libcode
    assert result.kernel.config == configs[1] and result.kernel.latency == 0.5
    # A second tuner: the tuning-result cache answers, the winner keeps its pass configs.
    again = make(no_bench).run(warmup=3, rep=20)
    assert again.config == configs[1] and again.kernel.pass_configs.get("tl.enable_fast_math") is True
    # raised at the call: the traceback shows the user's line
    with pytest.raises(UserError, match="unknown backend 'nvtx'"):
        make(no_bench).set_profile_args(backend="nvtx")


@tilelang.jit(target="sm_80")
def eager_scale(A, block=128):
    N = T.const("N")
    A: T.Tensor((N,), "float32")
    B = T.empty((N,), "float32")
    with T.Kernel(T.ceildiv(N, block), threads=block) as bx:
        for i in T.Parallel(block):
            B[bx * block + i] = A[bx * block + i] * 2.0
    return B


def test_an_eager_kernel_tunes_through_compile_processes(cache_dir):
    """`.compile(N=...)` on an eager kernel: its compile-time values travel to the compile processes,
    which build each configuration into the disk cache; the best comes back with its result."""
    assert eager_scale.mode == "eager"
    tuner = tilelang.autotune(
        configs=[{"block": 64}, {"block": 128}], _bench=lambda p, *_: 64.0 / p.kernel.config["block"], _device="cpu"
    )(eager_scale)
    kernel = tuner.compile(N=8192)
    assert kernel.config == {"block": 128} and kernel.latency == 0.5
    assert [p.name for p in kernel.params] == ["A", "B"] and kernel.params[0].shape == (8192,)
    assert tuner.compile(N=8192, block=64).config is None  # a tuned value given: compiled as asked


def test_autotune_over_a_prim_func_says_there_is_nothing_to_tune():
    @T.prim_func
    def main(A: T.Tensor((128,), "float32")):
        with T.Kernel(1, threads=128):
            for i in T.Parallel(128):
                A[i] = 0.0

    # raised at the call: the traceback shows the user's line
    with pytest.raises(UserError, match="a @T.prim_func has no arguments to tune"):
        tilelang.autotune(configs=[{"block": 64}])(tilelang.jit(target="sm_80")(main))


# ---- the compile pool ------------------------------------------------------------------------------


def hang(N):
    time.sleep(600)


def crash(N):
    os.kill(os.getpid(), signal.SIGSEGV)


def job(factory, *args, **kwargs):
    options = {"out_idx": [-1], "target": "sm_80"}
    return cloudpickle.dumps((factory, factory.__code__.co_filename, options, "lazy", args, kwargs))


def test_a_factory_sent_by_value_finds_its_source_again():
    """cloudpickle 3.1+ names the code of a function sent by value '<dynamic-code>'; the worker puts
    the real file back on it and on the code of the kernel defined inside, which tracing reads."""
    fn = cloudpickle.loads(cloudpickle.dumps(scale.factory))
    fn.__code__ = fn.__code__.replace(co_filename="<dynamic-code>")  # what cloudpickle 3.1 sends
    fixed = parallel.with_filename(fn, scale.factory.__code__.co_filename)
    assert fixed.__code__.co_filename == __file__ or fixed.__code__.co_filename.endswith("test_autotune.py")
    nested = [c for c in fixed.__code__.co_consts if hasattr(c, "co_filename")]
    assert nested and all(c.co_filename == fixed.__code__.co_filename for c in nested)
    assert fixed(1024, 64) is not None  # traces: the kernel's source is found


def test_pool_survives_crashes_and_ends_jobs_past_the_timeout(cache_dir):
    done = []
    # The scale jobs are in the disk cache already (first_tuning): they finish well within the limit.
    payloads = [job(crash, 1), job(hang, 2), job(scale.factory, 4096, block=64), job(scale.factory, 4096, block=96)]
    start = time.monotonic()
    outcomes = parallel.compile_all(payloads, workers=2, timeout=5, progress=lambda: done.append(1))
    assert outcomes[0].startswith("the compile process died (exit code -11")
    assert outcomes[1] == "TimeoutError: compiling took longer than the timeout (5 s)"
    assert outcomes[2] is None and outcomes[3].startswith("ValueError: block must be a multiple of 64")
    assert len(done) == 4 and time.monotonic() - start < 120


def test_workers_default_to_the_cores_or_the_environment(monkeypatch):
    monkeypatch.delenv("TILELANG_AUTO_TUNING_CPU_COUNTS", raising=False)
    assert parallel.default_workers() == len(os.sched_getaffinity(0))
    monkeypatch.setenv("TILELANG_AUTO_TUNING_CPU_COUNTS", "3")
    assert parallel.default_workers() == 3


def test_a_factory_that_cannot_be_sent_compiles_here(cache_dir, caplog):
    import threading

    lock = threading.Lock()  # cloudpickle cannot send a lock to a worker

    def locked_scale(N, block=64):
        assert not lock.locked()
        return scale.factory(N, block)

    jit = tilelang.jit(out_idx=[-1], target="sm_80")(locked_scale)
    best = tilelang.autotune(configs=[{"block": 64}, {"block": 128}], _bench=lambda *_: 1.0, _device="cpu")(jit)(1024)
    assert best.config == {"block": 64} and "compiling in this process (cannot send the factory" in caplog.text

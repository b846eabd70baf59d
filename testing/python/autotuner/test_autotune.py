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

import tilelang
import tilelang.language as T
from tilelang import cache
from tilelang.autotuner import parallel
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


def fake_latency(profiler, func):
    """Bigger blocks are "faster", except 256, which fails at run time."""
    block = profiler.kernel.config["block"]
    if block == 256:
        raise RuntimeError("CUDA error: too many resources requested for launch")
    return 100.0 / block


def no_bench(profiler, func):
    raise AssertionError("the tuning cache should have answered without timing anything")


def tuned(bench, configs=CONFIGS, workers=None):
    return tilelang.autotune(configs=configs, _bench=bench, _workers=workers)(scale)


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
    kernel = tuned(lambda profiler, func: 1.0, configs=CONFIGS[:1], workers=0)(4096)  # tuned anew
    assert kernel.config == {"block": 64} and kernel.latency == 1.0


def test_nothing_working_lists_every_reason(cache_dir):
    with pytest.raises(RuntimeError) as info:
        tuned(fake_latency, configs=[{"block": 96}, {"block": 256}], workers=0)(4096)
    text = str(info.value)
    assert "autotune scale: none of the 2 configurations works" in text
    assert "{'block': 96}: ValueError: block must be a multiple of 64" in text
    assert "{'block': 256}: RuntimeError: CUDA error" in text


class FakeJIT:
    """A stand-in for @tilelang.jit whose kernels compute on the CPU: lets the reference check run."""

    def __init__(self, factory):
        self.factory, self.out_idx, self.target, self.pass_configs = factory, [-1], "sm_80", None
        self.calls = []

    def __call__(self, *args, **kwargs):
        self.calls.append((args, kwargs))
        return self.factory(*args, **kwargs)


class CPUKernel:
    def __init__(self, n, fn):
        self.params = [Param("A", (n,), "float32"), Param("B", (n,), "float32")]
        self.out_idx, self.name, self.fn = [1], "cpu_scale", fn

    def _ensure_built(self):
        pass

    def __call__(self, a):
        return self.fn(a)


def cpu_scale(N, unroll=1):
    """unroll=3 is "miscompiled": it forgets the last element."""

    def run(a):
        out = a * 2
        if unroll == 3:
            out[-1] = 0
        return out

    return CPUKernel(N, run)


def test_configurations_are_checked_against_the_reference(tmp_path, monkeypatch, caplog):
    monkeypatch.setenv("TILELANG_CACHE_DIR", str(tmp_path))
    jit = FakeJIT(cpu_scale)
    tuner = tilelang.autotune(
        configs=[{"unroll": 1}, {"unroll": 2}, {"unroll": 3}],
        ref_prog=lambda a: a * 2,
        max_mismatched_ratio=0.0,
        _bench=lambda profiler, func: 0.5 if func is not None else 1.0 / profiler.kernel.config["unroll"],
        _workers=0,
        _device="cpu",
    )(jit)
    with caplog.at_level(logging.INFO, logger="tilelang"):
        best = tuner(512)
    assert best.config == {"unroll": 2} and best.latency == 0.5 and best.ref_latency == 0.5
    assert "{'unroll': 3} fails: AssertionError: cpu_scale: output 'B' differs from the reference in 1 of 512" in (
        caplog.text
    )


def test_all_tuned_arguments_given_means_no_tuning():
    jit = FakeJIT(cpu_scale)
    tuner = tilelang.autotune(configs=[{"unroll": 1}, {"unroll": 2}], _bench=no_bench, _workers=0)(jit)
    kernel = tuner(64, unroll=2)
    assert isinstance(kernel, CPUKernel) and jit.calls == [((64,), {"unroll": 2})]
    assert tuner(64, 2) is not None and jit.calls[-1] == ((64, 2), {})


def test_wrong_configurations_and_calls_are_clear_errors():
    def factory(N, block_M=64, block_N=64):
        return None

    jit = FakeJIT(factory)
    both = [{"block_M": 64, "block_N": 64}]
    with pytest.raises(ValueError, match=r"\['block_M'\] given while \['block_N'\] are tuned"):
        tilelang.autotune(configs=both, _workers=0)(jit)(64, block_M=32)
    with pytest.raises(ValueError, match=r"configuration \{'block_K': 32\} sets \['block_K'\], which it does not"):
        tilelang.autotune(configs=[{"block_K": 32}], _workers=0)(jit)(64)
    with pytest.raises(ValueError, match="the configuration list is empty"):
        tilelang.autotune(configs=lambda N: [], _workers=0)(jit)(64)
    with pytest.raises(TypeError, match="goes above @tilelang.jit"):
        tilelang.autotune(configs=both)(factory)


def test_configurations_from_a_callable_see_the_call(tmp_path, monkeypatch):
    monkeypatch.setenv("TILELANG_CACHE_DIR", str(tmp_path))
    jit = FakeJIT(cpu_scale)
    seen = []

    def configs(N):
        seen.append(N)
        return [{"unroll": u} for u in range(1, 3)]

    tuner = tilelang.autotune(configs=configs, _bench=lambda p, f: -p.kernel.config["unroll"], _workers=0)(jit)
    assert tuner(128).config == {"unroll": 2} and seen[0] == 128


# ---- the compile pool ------------------------------------------------------------------------------


def hang(N):
    time.sleep(600)


def crash(N):
    os.kill(os.getpid(), signal.SIGSEGV)


def job(factory, *args, **kwargs):
    return cloudpickle.dumps((factory, factory.__code__.co_filename, [-1], "sm_80", None, args, kwargs))


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
        with lock:
            return scale.factory(N, block)

    jit = tilelang.jit(out_idx=[-1], target="sm_80")(locked_scale)
    best = tilelang.autotune(configs=[{"block": 64}, {"block": 128}], _bench=lambda p, f: 1.0)(jit)(1024)
    assert best.config == {"block": 64} and "compiling in this process (cannot send the factory" in caplog.text

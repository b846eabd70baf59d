"""The profiler on a real kernel: assert_allclose against torch, and timings with each backend (skipped
without a GPU)."""

import pytest
import torch

import tilelang
import tilelang.language as T
from tilelang.profiler import do_bench

pytestmark = pytest.mark.gpu


@tilelang.jit(out_idx=[-1])
def axpy(N, alpha=2.0, dtype="float16"):
    @T.prim_func
    def main(X: T.Tensor((N,), dtype), Y: T.Tensor((N,), dtype), Z: T.Tensor((N,), dtype)):
        with T.Kernel(T.ceildiv(N, 256), threads=256) as bx:
            for i in T.Parallel(256):
                Z[bx * 256 + i] = X[bx * 256 + i] * alpha + Y[bx * 256 + i]

    return main


@pytest.mark.parametrize("dtype", ["float16", "bfloat16", "float32"])
def test_assert_allclose_on_a_real_kernel(dtype):
    profiler = axpy(1 << 20, dtype=dtype).get_profiler(tilelang.TensorSupplyType.Randn)
    profiler.assert_allclose(lambda x, y: x.float() * 2 + y.float(), rtol=1e-2, atol=1e-2)
    with pytest.raises(AssertionError, match="output 'Z' differs"):
        profiler.assert_allclose(lambda x, y: x.float() * 3 + y.float())


def test_do_bench_times_the_kernel_and_a_reference():
    profiler = axpy(1 << 24).get_profiler()
    ours = profiler.do_bench(warmup=5, rep=20)
    theirs = profiler.do_bench(lambda x, y: x * 2 + y, warmup=5, rep=20)
    # 3 x 32 MiB moved: well above 10 us and below 10 ms on any GPU this runs on.
    assert 0.01 < ours < 10 and 0.01 < theirs < 10


def test_do_bench_run_counts():
    calls = []
    x = torch.randn(1024, device="cuda")
    ms = do_bench(lambda: calls.append(x.sum()), _n_warmup=3, _n_repeat=7)
    assert ms > 0 and len(calls) == 1 + 5 + 3 + 7  # the first call and the estimate are not timed


@pytest.mark.parametrize("backend", ["event", "cupti", "cudagraph"])
def test_each_backend_times_a_known_kernel(backend):
    """1 << 25 float16 elements: 64 MiB read twice and written once, about 50 us at the H200's
    4.8 TB/s. Every backend must see the kernel take the time moving 192 MiB takes."""
    profiler = axpy(1 << 25).get_profiler()
    ms = profiler.do_bench(backend=backend, n_warmup=5, n_repeat=50)
    bandwidth = 3 * (2 << 25) / (ms * 1e-3) / 1e12  # TB/s
    assert 0.5 < bandwidth < 6, f"{backend}: {ms:.4f} ms, {bandwidth:.2f} TB/s"
    runs = profiler.do_bench(backend=backend, n_warmup=2, n_repeat=20, return_mode="all")
    assert len(runs) == (10 if backend == "cudagraph" else 20) and all(r > 0 for r in runs)
    low, high = profiler.do_bench(backend=backend, n_warmup=2, n_repeat=20, quantiles=[0.1, 0.9])
    assert 0 < low <= high


def test_backends_agree_on_a_kernel_that_dominates_its_launch():
    profiler = axpy(1 << 26).get_profiler()
    times = {b: profiler.do_bench(backend=b, warmup=5, rep=50) for b in ("event", "cupti", "cudagraph")}
    # cudagraph replays back to back with a warm L2 after its first call: allow it to be faster.
    assert times["cupti"] == pytest.approx(times["event"], rel=0.25), times
    assert 0.5 * times["event"] < times["cudagraph"] < 1.25 * times["event"], times


def test_cupti_leaves_the_flush_and_the_gaps_out():
    """Two tiny kernels with a 1 ms host sleep between them: events see the sleep, cupti does not."""
    import time

    x = torch.randn(1024, device="cuda")

    def slow_host():
        x.mul_(1.0)
        torch.cuda.synchronize()
        time.sleep(1e-3)
        x.add_(0.0)

    event = do_bench(slow_host, backend="event", _n_warmup=2, _n_repeat=10)
    cupti = do_bench(slow_host, backend="cupti", _n_warmup=2, _n_repeat=10)
    assert event > 0.9 and cupti < 0.1, (event, cupti)


def test_early_stop_baseline_returns_the_estimate():
    profiler = axpy(1 << 24).get_profiler()
    calls = []
    ms = profiler.do_bench(lambda x, y: calls.append(x * 2 + y), early_stop_baseline=1e-6)
    assert ms > 1e-6 and len(calls) == 1 + 5  # the first call and the 5-run estimate, nothing timed


def test_do_bench_on_a_given_device():
    x = torch.randn(1 << 20, device="cuda:0")
    assert do_bench(lambda: x.mul_(1.0), device=0, _n_warmup=2, _n_repeat=5) > 0
    assert do_bench(lambda: x.mul_(1.0), device="cuda:0", _n_warmup=2, _n_repeat=5) > 0

"""The profiler without a GPU: input generation per dtype and supply type (on the CPU), and the
comparison of assert_allclose against fake kernels that compute on the CPU."""

import pytest
import torch

import tilelang
import tilelang.language as T
from tilelang.errors import UserError
from tilelang.jit.params import Param
from tilelang.profiler import Profiler, TensorSupplyType, check_close, do_bench, supply_tensor

DTYPES = ["float16", "bfloat16", "float32", "float64", "float8_e4m3fn", "float8_e5m2"]
DTYPES += ["int8", "int32", "int64", "uint8", "bool"]


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("kind", list(TensorSupplyType))
def test_supply_every_dtype_and_kind(dtype, kind):
    t = supply_tensor(Param("A", (64, 48), dtype), kind, device="cpu")
    assert t.shape == (64, 48) and t.dtype == getattr(torch, dtype) and t.device.type == "cpu"
    values = t.to(torch.float64)
    if kind is TensorSupplyType.Zero:
        assert not values.any()
        return
    if kind is TensorSupplyType.One:
        assert (values == 1).all()
        return
    # Every random kind gives varied values, never a constant tensor that would hide bugs.
    assert values.unique().numel() > 1
    if dtype == "bool":
        return
    whole = kind in (TensorSupplyType.Auto, TensorSupplyType.Integer) and dtype in (
        "float64",
        "float8_e4m3fn",
        "float8_e5m2",
    )
    if dtype.startswith(("int", "uint")) or kind is TensorSupplyType.Integer or whole:
        assert (values == values.round()).all(), "integer draws are whole numbers"
        wide = dtype.startswith("float8") and kind in (TensorSupplyType.Auto, TensorSupplyType.Integer)
        low, high = (-128, 128) if wide else (0 if dtype.startswith("uint") else -2, 2)
        assert values.min() >= low and values.max() <= high
        if wide:
            assert values.abs().max() > 100, "float8 draws span the range of int8, as public TileLang's"
    elif kind in (TensorSupplyType.Uniform, TensorSupplyType.Auto):
        assert values.abs().max() <= 1
    elif kind is TensorSupplyType.Normal:  # public TileLang's Normal: mean -1
        assert values.mean() == pytest.approx(-1.0, abs=0.15)
    else:  # Randn: N(0, 1)
        assert values.mean() == pytest.approx(0.0, abs=0.15) and values.abs().mean() == pytest.approx(0.8, abs=0.15)


def test_supply_sizes_dynamic_dimensions_from_the_given_sizes():
    param = Param("A", ("m", "m * 2", 4), "float16")
    assert supply_tensor(param, TensorSupplyType.Randn, device="cpu", sizes={"m": 3}).shape == (3, 6, 4)
    with pytest.raises(ValueError, match=r"parameter 'A' has shape .*do not say what m is"):
        supply_tensor(param, TensorSupplyType.Randn, device="cpu", sizes={"n": 3})


def test_supply_takes_public_style_params():
    class KernelParam:  # what public TileLang passes around: no name, a dtype object
        shape = [4, 5]
        dtype = torch.bfloat16

    ones = supply_tensor(KernelParam(), TensorSupplyType.One, device="cpu")
    assert ones.dtype == torch.bfloat16 and (ones == 1).all()


def test_dynamic_dimension_asks_for_input_tensors():
    with pytest.raises(ValueError, match=r"parameter 'A' has shape \['m', 64\].*input_tensors.*dynamic_symbolic"):
        supply_tensor(Param("A", ("m", 64), "float16"), TensorSupplyType.Randn, device="cpu")


def test_unsupported_dtype_is_named():
    with pytest.raises(ValueError, match="float4_e2m1fn"):
        supply_tensor(Param("A", (4,), "float4_e2m1fn"), TensorSupplyType.Randn, device="cpu")


class FakeKernel:
    """What the profiler needs of a kernel: params, out_idx, name, and a call that returns the outputs."""

    def __init__(self, params, out_idx, fn, name="fake"):
        self.params, self.out_idx, self.fn, self.name = params, out_idx, fn, name

    def __call__(self, *inputs):
        return self.fn(*inputs)


def add_kernel(fn, dtype="float16", n=1000):
    params = [Param("A", (n,), dtype), Param("B", (n,), dtype), Param("C", (n,), dtype)]
    return FakeKernel(params, [2], fn, name="add")


def test_assert_allclose_passes_for_a_correct_kernel():
    kernel = add_kernel(lambda a, b: a + b)
    # The reference computes in float32; the comparison accepts the float16 kernel output.
    Profiler(kernel, TensorSupplyType.Randn, device="cpu").assert_allclose(lambda a, b: a.float() + b.float())


def test_assert_allclose_reports_output_count_and_worst_element():
    kernel = add_kernel(lambda a, b: a - b)
    with pytest.raises(AssertionError) as info:
        Profiler(kernel, TensorSupplyType.Randn, device="cpu").assert_allclose(lambda a, b: a + b)
    text = str(info.value)
    assert "add: output 'C' differs from the reference in" in text and "of 1000 elements" in text
    assert "worst at index [" in text and "got" in text and "expected" in text


def test_inputs_are_fresh_for_every_check():
    """A kernel that keeps returning its first result (as a recycled output buffer would) must fail."""
    first = []

    def stale(a, b):
        if not first:
            first.append(a + b)
        return first[0]

    profiler = Profiler(add_kernel(stale), TensorSupplyType.Randn, device="cpu")
    profiler.assert_allclose(lambda a, b: a + b)
    with pytest.raises(AssertionError, match="differs from the reference"):
        profiler.assert_allclose(lambda a, b: a + b)


def test_a_few_mismatches_are_allowed_by_ratio():
    def one_off(a, b):
        c = a + b
        c[7] += 100
        return c

    profiler = Profiler(add_kernel(one_off, dtype="float32"), TensorSupplyType.Randn, device="cpu")
    profiler.assert_allclose(lambda a, b: a + b)  # 1 of 1000 is within the default 1%
    with pytest.raises(AssertionError, match=r"in 1 of 1000 elements .*worst at index \[7\]"):
        profiler.assert_allclose(lambda a, b: a + b, max_mismatched_ratio=0.0)


def test_several_outputs_and_given_inputs():
    params = [Param("X", (8, 4), "float32"), Param("S", (8,), "float32"), Param("M", (8,), "float32")]
    kernel = FakeKernel(params, [1, 2], lambda x: [x.sum(1), x.max(1).values])
    profiler = Profiler(kernel, device="cpu")
    x = torch.arange(32.0).reshape(8, 4)
    profiler.assert_allclose(lambda x: (x.sum(1), x.max(1).values), input_tensors=[x])
    with pytest.raises(AssertionError, match="output 'M' differs"):
        profiler.assert_allclose(lambda x: (x.sum(1), x.min(1).values), input_tensors=[x])
    with pytest.raises(AssertionError, match=r"returns 2 outputs \(S, M\), the reference returned 1"):
        profiler.assert_allclose(lambda x: x.sum(1), input_tensors=[x])


@pytest.mark.parametrize("dtype", ["float8_e4m3fn", "bool", "int8", "uint8", "int64", "bfloat16"])
def test_outputs_of_every_dtype_compare_against_a_float_reference(dtype):
    kernel = add_kernel(lambda a, b: a.float().add(b.float()).to(getattr(torch, dtype)), dtype=dtype, n=256)
    reference = {"bool": lambda a, b: a | b}.get(dtype, lambda a, b: (a.float() + b.float()).to(a.dtype).float())
    Profiler(kernel, TensorSupplyType.Integer, device="cpu").assert_allclose(reference)


def test_check_close_shapes_and_nans():
    nan = float("nan")
    check_close("out", torch.tensor([1.0, nan]), torch.tensor([1.0, nan]), 1e-2, 1e-2)
    with pytest.raises(AssertionError, match="1 of 2 elements"):
        check_close("out", torch.tensor([1.0, nan]), torch.tensor([1.0, 2.0]), 1e-2, 1e-2)
    with pytest.raises(AssertionError, match=r"out has shape \[2\], the reference \[2, 1\]"):
        check_close("out", torch.ones(2), torch.ones(2, 1), 1e-2, 1e-2)


def test_kernel_without_outputs_is_a_clear_error():
    kernel = FakeKernel([Param("A", (4,), "float32")], [], lambda a: None, name="inplace")
    with pytest.raises(ValueError, match="inplace: assert_allclose .* out_idx"):
        Profiler(kernel, device="cpu").assert_allclose(lambda a: a)


@tilelang.jit(out_idx=[-1], target="sm_80")
def axpy(N, alpha=2.0):
    @T.prim_func
    def main(X: T.Tensor((N,), "float16"), Y: T.Tensor((N,), "float16"), Z: T.Tensor((N,), "float16")):
        with T.Kernel(T.ceildiv(N, 128), threads=128) as bx:
            for i in T.Parallel(128):
                Z[bx * 128 + i] = X[bx * 128 + i] * alpha + Y[bx * 128 + i]

    return main


def test_jit_kernel_gives_a_profiler_over_its_inputs():
    kernel = axpy(512)  # traced and lowered for sm_80: no GPU needed to build the profiler
    profiler = kernel.get_profiler(tilelang.TensorSupplyType.Randn)
    assert isinstance(profiler, Profiler) and profiler.kernel is kernel
    assert profiler.supply_type is TensorSupplyType.Randn and profiler.device == "cuda"
    assert [p.name for p in profiler.input_params] == ["X", "Y"]
    assert kernel.get_profiler().supply_type is TensorSupplyType.Auto
    assert tilelang.TensorSupplyType is TensorSupplyType and tilelang.Profiler is Profiler


def test_do_bench_in_turn_times_the_functions_in_turn_and_takes_medians(monkeypatch):
    from tilelang.profiler import bench

    calls = []
    fake = {"a": iter([3.0, 1.0, 2.0]), "b": iter([5.0, 9.0, 4.0])}

    def timed(fn, **kwargs):
        calls.append(fn())
        return next(fake[calls[-1]])

    monkeypatch.setattr(bench, "do_bench", timed)
    got = bench.do_bench_in_turn({"a": lambda: "a", "b": lambda: "b", "missing": None}, rounds=3, rep=5)
    assert calls == ["a", "b"] * 3  # one of each per round, not all of a first
    assert got["a"] == 2.0 and got["b"] == 5.0 and got["missing"] != got["missing"]  # nan


# ---- the Profiler's public surface ------------------------------------------------------------------


def test_profiler_func_call_params_and_inputs_with_outputs():
    kernel = add_kernel(lambda a, b: a + b, dtype="float32", n=8)
    profiler = Profiler(kernel, TensorSupplyType.One, device="cpu")
    assert (
        profiler.func is kernel and profiler.result_idx == [2] and [p.name for p in profiler.params] == ["A", "B", "C"]
    )
    assert [p.name for p in profiler._get_params()] == ["A", "B"]
    assert [p.name for p in profiler._get_params(with_output=True)] == ["A", "B", "C"]
    assert len(profiler._get_inputs(with_output=True)) == 3
    assert torch.equal(profiler(torch.ones(8), torch.ones(8)), torch.full((8,), 2.0))
    assert torch.equal(profiler.run_once(), torch.full((8,), 2.0))
    assert torch.equal(profiler.run_once(lambda a, b: a - b), torch.zeros(8))


def test_manual_assert_close_lets_the_user_judge():
    seen = []

    def judge(outputs, expected):
        seen.append((outputs, expected))
        if not torch.allclose(outputs[0], expected[0]):
            raise AssertionError("not close")

    profiler = Profiler(add_kernel(lambda a, b: a + b, dtype="float32"), device="cpu")
    profiler.manual_assert_close(lambda a, b: a + b, manual_check_prog=judge)
    assert len(seen) == 1 and isinstance(seen[0][0], list) and isinstance(seen[0][1], list)
    with pytest.raises(AssertionError, match="not close"):
        profiler.manual_assert_close(lambda a, b: a * b, manual_check_prog=judge)
    with pytest.raises(ValueError, match="needs manual_check_prog"):
        profiler.manual_assert_close(lambda a, b: a + b)


def test_an_expected_output_of_none_is_not_compared():
    params = [Param("X", (4,), "float32"), Param("S", (4,), "float32"), Param("M", (4,), "float32")]
    kernel = FakeKernel(params, [1, 2], lambda x: [x * 2, x * 3])
    Profiler(kernel, device="cpu").assert_allclose(lambda x: (x * 2, None))


def test_assert_consistent_catches_a_kernel_that_varies_between_runs():
    runs = []

    def racy(a, b):
        runs.append(1)
        return a + b + (len(runs) == 4)  # the fourth run differs

    Profiler(add_kernel(lambda a, b: a + b, dtype="float32"), device="cpu").assert_consistent(repeat=5)
    with pytest.raises(AssertionError, match=r"output #0 of run 4 differs from the first run's in 1000 of 1000"):
        Profiler(add_kernel(racy, dtype="float32"), device="cpu").assert_consistent(repeat=5)


def test_profiler_do_bench_passes_every_option_on(monkeypatch):
    import contextlib

    from tilelang.profiler import bench

    calls, scopes = [], []

    def fake_do_bench(fn, **options):
        calls.append((fn(), options))
        return 1.5

    monkeypatch.setattr(bench, "do_bench", fake_do_bench)
    monkeypatch.setattr(bench, "_device_scope", lambda device: scopes.append(device) or contextlib.nullcontext())
    kernel = add_kernel(lambda a, b: (a, b), dtype="float32", n=4)
    profiler = Profiler(kernel, TensorSupplyType.Randn, device="cpu")
    a, b = torch.ones(4), torch.zeros(4)
    ms = profiler.do_bench(
        None, 5, 50, n_warmup=3, n_repeat=7, input_tensors=[a, b], backend="cupti", quantiles=[0.5, 0.9],
        return_mode="max", device=1, early_stop_baseline=2.0,
    )  # fmt: skip
    ((got, options),) = calls
    assert ms == 1.5 and got[0] is a and got[1] is b and scopes == [1]
    assert options == dict(
        warmup=5, rep=50, _n_warmup=3, _n_repeat=7, quantiles=[0.5, 0.9], backend="cupti", return_mode="max",
        device=1, early_stop_baseline=2.0,
    )  # fmt: skip
    # Without input tensors: drawn once and reused, so the kernel and a reference see the same data.
    profiler.do_bench()
    profiler.do_bench(lambda x, y: (x, y))
    assert calls[1][0][0] is calls[2][0][0] and calls[1][1]["return_mode"] == "mean"
    # Dynamic dimensions: drawn at the given sizes.
    dyn = FakeKernel([Param("A", ("m",), "float32"), Param("B", ("m",), "float32")], [1], lambda a: a)
    Profiler(dyn, device="cpu").do_bench(dynamic_symbolic_constraints={"m": 6})
    assert calls[-1][0].shape == (6,)


# ---- do_bench without a GPU: its GPU primitives replaced by fakes ----------------------------------


class FakeGPU:
    """bench.py's GPU primitives replaced: `estimate` is the 5-run estimate, and the timed runs of a
    backend take `times` (ms), or each what `fn()` returns. Records the calls and the run counts."""

    def __init__(self, monkeypatch):
        from tilelang.profiler import bench

        self.estimate = 2.0  # fn's own time
        self.run_estimate = None  # a whole run's, flush included (default: the same)
        self.times = None
        self.calls = []
        self.flushes = 0
        gpu = self

        class Flush:
            def zero_(self):
                gpu.flushes += 1

        def timer(name):
            def time_runs(fn, flush, n_repeat):
                self.calls.append((name, n_repeat))
                measured = [float(fn()) for _ in range(n_repeat)]
                return measured if self.times is None else list(self.times)

            return time_runs

        monkeypatch.setattr(bench, "_require_cuda", lambda backend: None)
        monkeypatch.setattr(bench, "_flush_buffer", lambda size, fast: Flush())
        monkeypatch.setattr(bench, "_synchronize", lambda: None)

        def estimate(fn, flush, n):
            for _ in range(n):
                flush.zero_()
                fn()
            return self.estimate, self.run_estimate or self.estimate

        monkeypatch.setattr(bench, "_estimate_ms", estimate)
        for name in bench.BACKENDS:
            monkeypatch.setitem(bench._TIMERS, name, timer(name))


@pytest.fixture
def fake_gpu(monkeypatch):
    return FakeGPU(monkeypatch)


@pytest.mark.parametrize("backend", ["event", "cupti", "cudagraph"])
def test_do_bench_dispatches_to_the_backend_with_counts_from_the_budgets(fake_gpu, backend):
    runs = []

    def fn():
        runs.append(1)
        return 3.0

    assert do_bench(fn, warmup=25, rep=100, backend=backend) == 3.0
    # Estimate 2 ms: 25 ms of warm-up is 12 runs, 100 ms of timing 50; 1 + 5 runs before that.
    assert fake_gpu.calls == [(backend, 50)] and len(runs) == 1 + 5 + 12 + 50
    assert fake_gpu.flushes == 5 + 12  # the estimate and warm-up runs flush here; timed runs in the backend
    runs.clear()
    do_bench(fn, backend=backend, _n_warmup=3, _n_repeat=7)
    assert fake_gpu.calls[-1] == (backend, 7) and len(runs) == 1 + 5 + 3 + 7


def test_do_bench_return_modes_and_quantiles(fake_gpu):
    fake_gpu.times = [3.0, 1.0, 10.0, 2.0]

    def bench(**options):
        return do_bench(lambda: 0.0, _n_warmup=1, _n_repeat=4, **options)

    assert bench() == 4.0  # mean, public TileLang's default
    assert bench(return_mode="median") == 2.0  # the lower middle value, as torch.median
    assert bench(return_mode="min") == 1.0 and bench(return_mode="max") == 10.0
    assert bench(return_mode="all") == [3.0, 1.0, 10.0, 2.0]
    assert bench(quantiles=[0.5]) == 2.5  # one quantile: a float, as in public TileLang
    assert bench(quantiles=[0.0, 1.0]) == [1.0, 10.0]


def test_do_bench_stops_early_above_the_baseline(fake_gpu):
    fake_gpu.estimate = 5.0
    assert do_bench(lambda: 1.0, early_stop_baseline=4.0) == 5.0 and fake_gpu.calls == []
    assert do_bench(lambda: 1.0, early_stop_baseline=4.0, quantiles=[0.2, 0.8]) == [5.0, 5.0]
    assert do_bench(lambda: 1.0, early_stop_baseline=6.0) == 1.0 and len(fake_gpu.calls) == 1
    # fn's own time decides, not the flush's: a 1 ms kernel behind a 2 ms flush goes on, and the
    # budgets count whole runs (25 / 3 ms: 8 warm-up runs, 100 / 3 ms: 33 timed).
    fake_gpu.estimate, fake_gpu.run_estimate = 1.0, 3.0
    assert do_bench(lambda: 1.0, early_stop_baseline=2.0) == 1.0 and fake_gpu.calls[-1] == ("event", 33)


def test_do_bench_rejects_unknown_options_naming_the_known_ones():
    # raised at the call: the traceback shows the user's line
    with pytest.raises(UserError, match=r"unknown backend 'nvtx'; the backends are 'event', 'cupti', 'cudagraph'"):
        do_bench(lambda: None, backend="nvtx")
    # raised at the call: the traceback shows the user's line
    with pytest.raises(UserError, match=r"unknown return_mode 'avg'; the modes are 'min', 'max', 'mean', 'median'"):
        do_bench(lambda: None, return_mode="avg")
    # raised at the call: the traceback shows the user's line
    with pytest.raises(UserError, match=r"quantiles are fractions in \[0, 1\]"):
        do_bench(lambda: None, quantiles=[50])


def test_do_bench_without_a_gpu_says_so():
    # raised at the call: the traceback shows the user's line
    with pytest.raises(UserError, match="do_bench times work on a CUDA GPU, and torch sees none"):
        do_bench(lambda: None)


def test_cupti_backend_unavailable_names_the_backends_that_are(monkeypatch):
    from tilelang.profiler import bench

    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.profiler, "supported_activities", lambda: {torch.profiler.ProfilerActivity.CPU})
    assert bench.available_backends() == ["event", "cudagraph"]
    bench._require_cuda("event")
    with pytest.raises(  # raised at the call: the traceback shows the user's line
        UserError, match=r"'cupti' backend needs .*CUDA activity.*available here are 'event', 'cudagraph'"
    ):
        bench._require_cuda("cupti")
    monkeypatch.setattr(
        torch.profiler, "supported_activities", lambda: set(torch.profiler.ProfilerActivity.__members__.values())
    )
    assert bench.available_backends() == ["event", "cupti", "cudagraph"]


class TraceEvent:
    """What the cupti backend reads of a torch.profiler event."""

    def __init__(self, name, start, end, device="cuda", annotation=False):
        from torch.autograd import DeviceType

        self.name, self.is_user_annotation = name, annotation
        self.device_type = DeviceType.CUDA if device == "cuda" else DeviceType.CPU
        self.time_range = type("Interval", (), {"start": start, "end": end})()


def flush_range(start, end):
    from tilelang.profiler.bench import _FLUSH_MARK

    return [TraceEvent(_FLUSH_MARK, start, end, annotation=True), TraceEvent("fill_kernel", start, end)]


def test_cupti_trace_gives_each_run_its_kernels_without_the_flush():
    from tilelang.profiler.bench import kernel_times_per_run

    events = [
        *flush_range(0, 10),
        TraceEvent("gemm", 12, 20),
        TraceEvent("epilogue", 21, 25),
        TraceEvent("aten::mm", 11, 26, device="cpu"),  # host events do not count
        TraceEvent("my_range", 11, 26, annotation=True),  # nor the user's own ranges
        *flush_range(30, 40),
        TraceEvent("gemm", 41, 50),
    ]
    assert kernel_times_per_run(events, 2) == pytest.approx([0.012, 0.009])
    with pytest.raises(RuntimeError, match="found 2 L2-flush ranges on the GPU for 3 runs"):
        kernel_times_per_run(events, 3)
    with pytest.raises(RuntimeError, match="recorded no GPU activity"):
        kernel_times_per_run([TraceEvent("aten::mm", 0, 1, device="cpu")], 1)

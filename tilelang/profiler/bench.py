"""`do_bench`: the GPU time of a function, in milliseconds, with the L2 cache flushed before each run.

As in public TileLang (and Triton), `warmup` and `rep` are budgets in milliseconds: five runs
estimate the cost of one, and the run counts follow from it, so a 5 us kernel and a 50 ms one both
get a stable measurement in about the same wall time (`_n_warmup`/`_n_repeat` fix the counts).

    ms = do_bench(lambda: kernel(a, b))                        # CUDA events, mean of the runs
    ms = do_bench(lambda: kernel(a, b), backend="cupti")       # kernel time only, no launch gaps
    p50, p90 = do_bench(lambda: kernel(a, b), quantiles=[0.5, 0.9])

Three ways to time the runs (`backend`):
    "event"      a CUDA event before and after each run; the time of a run includes launch gaps
                 between its kernels, as a caller of `fn` would see it.
    "cupti"      torch.profiler's CUDA activity trace (Kineto over CUPTI): the sum of the durations
                 of the GPU work each run launched, without the gaps between kernels.
    "cudagraph"  `fn` captured `n_repeat` times in one CUDA graph, replayed ten times: the time per
                 call without host launch overhead. The L2 is flushed before each replay, not
                 between the calls inside it, so only the first call of a replay starts cold.

With `device="cpu"` (kernels of the CPU target), runs are timed by the wall clock, each returning
when its work is done, without a cache flush; the backend is ignored.

To compare kernels, time them in turn (`do_bench_in_turn`): a GPU's clocks drift by several percent
between runs of a script (about 10% on the H200 used for the benchmarks), so timing one kernel
after another measures the drift as much as the kernels.

    ms = do_bench_in_turn({"ours": lambda: kernel(a, b), "cuBLAS": lambda: a @ b})
"""

from __future__ import annotations

import bisect
import contextlib
import statistics

from tilelang.errors import UserError

BACKENDS = ("event", "cupti", "cudagraph")
RETURN_MODES = ("min", "max", "mean", "median", "all")

# The name of the profiler range around each L2 flush: the cupti backend leaves its kernels out.
_FLUSH_MARK = "tilelang::l2_flush"
# CUDA graph replays timed by the cudagraph backend (each replays n_repeat calls).
_GRAPH_REPLAYS = 10


def do_bench(
    fn,
    warmup: float = 25,
    rep: float = 100,
    _n_warmup: int = 0,
    _n_repeat: int = 0,
    quantiles: list[float] | None = None,
    fast_flush: bool = True,
    backend: str = "event",
    return_mode: str = "mean",
    device=None,
    cache_size: int = 256,
    early_stop_baseline: float | None = None,
):
    """Time `fn()` on the GPU; milliseconds per run.

    Args:
        fn: launches the work on torch's current stream; called with no arguments.
        warmup, rep: milliseconds of untimed runs first (caches, clocks, lazy loading), then of
            timed runs.
        _n_warmup, _n_repeat: exact run counts when positive; each overrides its budget. (The
            leading underscore is public TileLang's spelling of these two arguments.)
        quantiles: e.g. [0.5, 0.9]: return these quantiles of the run times instead (a list; one
            float when a single quantile is asked for, as in public TileLang).
        fast_flush: flush the L2 by zeroing int32 words rather than bytes (same buffer size).
        backend: "event", "cupti" or "cudagraph" (see the module docstring).
        return_mode: "mean" (the default, as in public TileLang), "median", "min", "max", or
            "all" for the list of every run's time.
        device: the CUDA device to time on (index, "cuda:1" or torch.device); default: current.
        cache_size: MiB zeroed before each run to evict the inputs from L2 (50 MB on H100/H200);
            0 turns the flush off.
        early_stop_baseline: when the first estimate of `fn`'s time (five runs, CUDA events, the
            flush not counted) already exceeds this many milliseconds, return the estimate without
            timing further (the autotuner passes its best time so far, times a factor, to skip
            configurations that cannot win).

    Raises:
        UserError: for an unknown backend or return mode, a quantile outside [0, 1], no CUDA
            GPU, or the cupti backend where torch cannot trace CUDA activity.
    """
    _check_options(backend, return_mode, quantiles)
    if _is_cpu(device):
        return _summarize(_time_cpu(fn, warmup, rep, _n_warmup, _n_repeat, early_stop_baseline), quantiles, return_mode)
    _require_cuda(backend)
    with _device_scope(device):
        flush = _flush_buffer(cache_size, fast_flush)

        def one_run():
            flush.zero_()
            fn()

        fn()  # the first call may load the module and the cubin: not part of the estimate
        _synchronize()
        fn_ms, run_ms = _estimate_ms(fn, flush, 5)
        # Early stop compares fn's own time: the flush (tens of us) would stop every fast kernel.
        if early_stop_baseline is not None and fn_ms > early_stop_baseline:
            return _summarize([fn_ms], quantiles, return_mode)
        # The budgets count the flush too, so that they bound the wall time, not only fn's.
        run_ms = max(run_ms, 1e-4)
        n_warmup = _n_warmup if _n_warmup > 0 else max(1, int(warmup / run_ms))
        n_repeat = _n_repeat if _n_repeat > 0 else max(1, int(rep / run_ms))
        for _ in range(n_warmup):
            one_run()
        times = _TIMERS[backend](fn, flush, n_repeat)
    return _summarize(times, quantiles, return_mode)


def do_bench_in_turn(fns: dict, rounds: int = 3, **kwargs) -> dict:
    """Median over `rounds` of `do_bench(fn, **kwargs)` for each function of `fns` (name -> fn, or
    None for one that cannot run: nan), the functions timed in turn within each round. Each
    round's time is the median of its runs unless `return_mode` says otherwise."""
    kwargs.setdefault("return_mode", "median")
    times = {name: [] for name in fns}
    for _ in range(rounds):
        for name, fn in fns.items():
            times[name].append(do_bench(fn, **kwargs) if fn is not None else float("nan"))
    return {name: statistics.median(t) for name, t in times.items()}


# ---- checks ------------------------------------------------------------------------------------


def _check_options(backend, return_mode, quantiles) -> None:
    if backend not in BACKENDS:
        raise UserError(f"do_bench: unknown backend {backend!r}; the backends are {', '.join(map(repr, BACKENDS))}")
    if return_mode not in RETURN_MODES:
        raise UserError(
            f"do_bench: unknown return_mode {return_mode!r}; the modes are {', '.join(map(repr, RETURN_MODES))}"
        )
    if quantiles is not None:
        bad = [q for q in quantiles if not 0 <= q <= 1]
        if bad or not len(quantiles):
            raise UserError(f"do_bench: quantiles are fractions in [0, 1] (0.5 is the median), got {list(quantiles)}")


def available_backends() -> list[str]:
    """The backends this machine can time with: "event" and "cudagraph" with a CUDA GPU, and
    "cupti" where torch.profiler can trace CUDA activity."""
    import torch

    if not torch.cuda.is_available():
        return []
    found = ["event", "cudagraph"]
    if torch.profiler.ProfilerActivity.CUDA in torch.profiler.supported_activities():
        found.insert(1, "cupti")
    return found


def _require_cuda(backend: str) -> None:
    import torch

    if not torch.cuda.is_available():
        raise UserError(f"do_bench times work on a CUDA GPU, and torch sees none (torch {torch.__version__})")
    if backend not in available_backends():
        raise UserError(
            f"do_bench: the {backend!r} backend needs torch.profiler's CUDA activity (Kineto/CUPTI), which this "
            f"torch ({torch.__version__}) does not offer; the backends available here are "
            f"{', '.join(map(repr, available_backends()))}"
        )


# ---- the CPU ------------------------------------------------------------------------------------


def _is_cpu(device) -> bool:
    return device == "cpu" or getattr(device, "type", None) == "cpu"


def _time_cpu(fn, warmup, rep, n_warmup, n_repeat, early_stop_baseline) -> list[float]:
    """Wall-clock milliseconds of each timed run of `fn` (budgets and counts as on the GPU)."""
    import time

    def run() -> float:
        start = time.perf_counter()
        fn()
        return (time.perf_counter() - start) * 1e3

    run()  # the first call may load the library
    estimate = statistics.mean(run() for _ in range(5))
    if early_stop_baseline is not None and estimate > early_stop_baseline:
        return [estimate]
    estimate = max(estimate, 1e-4)
    for _ in range(n_warmup if n_warmup > 0 else max(1, int(warmup / estimate))):
        run()
    return [run() for _ in range(n_repeat if n_repeat > 0 else max(1, int(rep / estimate)))]


# ---- the GPU primitives (tests without a GPU replace these) ------------------------------------


@contextlib.contextmanager
def _device_scope(device):
    """Run the body on `device` (None: the current one; the CPU: nothing to select)."""
    if device is None or _is_cpu(device):
        yield
        return
    import torch

    if not isinstance(device, int):
        device = torch.device(device)
        if device.type != "cuda":
            raise UserError(f"do_bench: device must be a CUDA device, got {device}")
        device = device.index if device.index is not None else torch.cuda.current_device()
    with torch.cuda.device(device):
        yield


def _flush_buffer(cache_size: int, fast_flush: bool):
    """A buffer of `cache_size` MiB whose zeroing evicts the L2."""
    import torch

    n_bytes = int(cache_size) << 20
    if fast_flush:
        return torch.empty(n_bytes // 4, dtype=torch.int32, device="cuda")
    return torch.empty(n_bytes, dtype=torch.int8, device="cuda")


def _synchronize() -> None:
    import torch

    torch.cuda.synchronize()


def _estimate_ms(fn, flush, n: int) -> tuple[float, float]:
    """Over `n` back-to-back runs of a flush then `fn`: the mean time of `fn` alone, and of a whole
    run (flush included)."""
    import torch

    def event():
        return torch.cuda.Event(enable_timing=True)

    start, end = event(), event()
    marks = [(event(), event()) for _ in range(n)]
    start.record()
    for s, e in marks:
        flush.zero_()
        s.record()
        fn()
        e.record()
    end.record()
    torch.cuda.synchronize()
    return sum(s.elapsed_time(e) for s, e in marks) / n, start.elapsed_time(end) / n


# ---- the backends: each returns the time of every timed run, in ms ------------------------------


def _time_events(fn, flush, n_repeat: int) -> list[float]:
    import torch

    starts = [torch.cuda.Event(enable_timing=True) for _ in range(n_repeat)]
    ends = [torch.cuda.Event(enable_timing=True) for _ in range(n_repeat)]
    for s, e in zip(starts, ends):
        flush.zero_()
        s.record()
        fn()
        e.record()
    torch.cuda.synchronize()
    return [s.elapsed_time(e) for s, e in zip(starts, ends)]


def _time_cudagraph(fn, flush, n_repeat: int) -> list[float]:
    import torch

    stream = torch.cuda.Stream()
    with torch.cuda.stream(stream):
        graph = torch.cuda.CUDAGraph()
        try:
            with torch.cuda.graph(graph):
                for _ in range(n_repeat):
                    fn()
        except Exception as err:
            raise UserError(
                f"do_bench(backend='cudagraph'): the function could not be captured in a CUDA graph "
                f"({type(err).__name__}: {err}); time it with backend='event'"
            ) from err
        torch.cuda.synchronize()
        starts = [torch.cuda.Event(enable_timing=True) for _ in range(_GRAPH_REPLAYS)]
        ends = [torch.cuda.Event(enable_timing=True) for _ in range(_GRAPH_REPLAYS)]
        for s, e in zip(starts, ends):
            flush.zero_()
            s.record()
            graph.replay()
            e.record()
        torch.cuda.synchronize()
    return [s.elapsed_time(e) / n_repeat for s, e in zip(starts, ends)]


def _time_cupti(fn, flush, n_repeat: int) -> list[float]:
    import torch
    from torch.profiler import ProfilerActivity, profile, record_function

    # CPU activity too: Kineto projects the flush's record_function range onto the GPU only when
    # it sees the range on the host.
    with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA]) as prof:
        for _ in range(n_repeat):
            with record_function(_FLUSH_MARK):
                flush.zero_()
            fn()
        torch.cuda.synchronize()
    return kernel_times_per_run(prof.events(), n_repeat)


def kernel_times_per_run(events, n_repeat: int) -> list[float]:
    """The GPU time of each run, in ms, from a torch.profiler trace of `n_repeat` runs, each one
    an L2 flush inside a `_FLUSH_MARK` range followed by the timed function.

    Each GPU event (kernel, memset, memcpy) that is not a flush is added to the run whose flush
    range started last before it; gaps between kernels are not counted.
    """
    from torch.autograd import DeviceType

    on_gpu = [e for e in events if e.device_type == DeviceType.CUDA]
    marks = sorted(
        (e.time_range.start, e.time_range.end) for e in on_gpu if e.is_user_annotation and e.name == _FLUSH_MARK
    )
    work = [e for e in on_gpu if not e.is_user_annotation]
    if not work:
        raise RuntimeError(
            "do_bench(backend='cupti'): the profiler recorded no GPU activity (is CUPTI usable in this "
            "process?); time with backend='event' instead"
        )
    if len(marks) != n_repeat:
        raise RuntimeError(
            f"do_bench(backend='cupti'): found {len(marks)} L2-flush ranges on the GPU for {n_repeat} runs, so "
            "the flush cannot be told apart from the function's kernels; time with backend='event' instead"
        )
    starts = [m[0] for m in marks]
    per_run = [0.0] * n_repeat
    for e in work:
        begin, end = e.time_range.start, e.time_range.end
        k = bisect.bisect_right(starts, begin) - 1
        if k >= 0 and end <= marks[k][1]:
            continue  # the flush itself
        per_run[max(k, 0)] += end - begin
    return [us / 1000.0 for us in per_run]


_TIMERS = {"event": _time_events, "cupti": _time_cupti, "cudagraph": _time_cudagraph}


# ---- summary -----------------------------------------------------------------------------------


def _summarize(times: list[float], quantiles, return_mode: str):
    if quantiles is not None:
        values = [_quantile(times, q) for q in quantiles]
        return values[0] if len(values) == 1 else values
    if return_mode == "all":
        return list(times)
    if return_mode == "mean":
        return statistics.fmean(times)
    if return_mode == "median":
        # The lower middle value for an even count, as torch.median (public TileLang's) gives.
        return sorted(times)[(len(times) - 1) // 2]
    return min(times) if return_mode == "min" else max(times)


def _quantile(values: list[float], q: float) -> float:
    """Linear interpolation between the closest ranks (torch.quantile's default)."""
    ordered = sorted(values)
    pos = q * (len(ordered) - 1)
    low = int(pos)
    high = min(low + 1, len(ordered) - 1)
    return ordered[low] + (ordered[high] - ordered[low]) * (pos - low)

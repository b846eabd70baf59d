"""`do_bench`: the GPU time of a function, with CUDA events, warm-up, L2 flushed between runs, median.

As in public TileLang (and Triton), `warmup` and `rep` are budgets in milliseconds: a few timed
runs estimate the cost of one, and the run counts follow from it, so a 5 us kernel and a 50 ms
one both get a stable measurement in about the same wall time.

    ms = do_bench(lambda: kernel(a, b))                    # ~25 ms of warm-up, ~100 ms timed
    ms = do_bench(lambda: kernel(a, b), n_repeat=10)       # exactly 10 timed runs

To compare kernels, time them in turn (`do_bench_in_turn`): a GPU's clocks drift by several percent
between runs of a script (about 10% on the H200 used for the benchmarks), so timing one kernel
after another measures the drift as much as the kernels.

    ms = do_bench_in_turn({"ours": lambda: kernel(a, b), "cuBLAS": lambda: a @ b})
"""

from __future__ import annotations

import statistics

# Larger than the L2 of any current GPU (50 MB on H100/H200), so overwriting it evicts the inputs.
_FLUSH_BYTES = 256 << 20


def do_bench(
    fn,
    warmup: float = 25,
    rep: float = 100,
    flush_l2: bool = True,
    n_warmup: int | None = None,
    n_repeat: int | None = None,
) -> float:
    """Median time of `fn()` in milliseconds.

    Args:
        fn: launches the work on torch's current stream; called with no arguments.
        warmup: milliseconds of untimed runs first (caches, clocks, lazy loading).
        rep: milliseconds of timed runs.
        flush_l2: overwrite a 256 MiB buffer before each timed run, so inputs come from HBM as
            they would in a real model, not from an L2 warmed by the previous run.
        n_warmup, n_repeat: exact run counts; each overrides its time budget.
    """
    import torch

    flush = torch.empty(_FLUSH_BYTES, dtype=torch.int8, device="cuda") if flush_l2 else None

    def one_run():
        if flush is not None:
            flush.zero_()
        fn()

    one_run()  # the first call may load the module and the cubin: not part of the estimate
    torch.cuda.synchronize()
    if n_warmup is None or n_repeat is None:
        # The estimate includes the flush, so the budgets bound the wall time, not only fn's.
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        for _ in range(5):
            one_run()
        end.record()
        torch.cuda.synchronize()
        estimate = max(start.elapsed_time(end) / 5, 1e-3)
        n_warmup = max(1, int(warmup / estimate)) if n_warmup is None else n_warmup
        n_repeat = max(1, int(rep / estimate)) if n_repeat is None else n_repeat

    for _ in range(n_warmup):
        one_run()
    starts = [torch.cuda.Event(enable_timing=True) for _ in range(n_repeat)]
    ends = [torch.cuda.Event(enable_timing=True) for _ in range(n_repeat)]
    for s, e in zip(starts, ends):
        if flush is not None:
            flush.zero_()
        s.record()
        fn()
        e.record()
    torch.cuda.synchronize()
    return statistics.median(s.elapsed_time(e) for s, e in zip(starts, ends))


def do_bench_in_turn(fns: dict, rounds: int = 3, **kwargs) -> dict:
    """Median over `rounds` of `do_bench(fn, **kwargs)` for each function of `fns` (name -> fn, or
    None for one that cannot run: nan), the functions timed in turn within each round."""
    times = {name: [] for name in fns}
    for _ in range(rounds):
        for name, fn in fns.items():
            times[name].append(do_bench(fn, **kwargs) if fn is not None else float("nan"))
    return {name: statistics.median(t) for name, t in times.items()}

"""Timing GPU work: `do_bench` with CUDA events, warm-up, L2 flushed between runs, median.

Imported lazily by users; never by the compiler.
"""

from __future__ import annotations

import statistics


def do_bench(fn, warmup: int = 10, rep: int = 50, flush_l2: bool = True) -> float:
    """Median time of `fn()` in milliseconds, over `rep` runs after `warmup` runs.

    Each run is timed with CUDA events on the current stream; when `flush_l2`, a 256 MiB buffer is
    overwritten before each run so inputs are not served from L2.
    """
    import torch

    cache = torch.empty(256 << 20, dtype=torch.int8, device="cuda") if flush_l2 else None
    for _ in range(warmup):
        fn()
    torch.cuda.synchronize()
    starts = [torch.cuda.Event(enable_timing=True) for _ in range(rep)]
    ends = [torch.cuda.Event(enable_timing=True) for _ in range(rep)]
    for s, e in zip(starts, ends):
        if cache is not None:
            cache.zero_()
        s.record()
        fn()
        e.record()
    torch.cuda.synchronize()
    return statistics.median(s.elapsed_time(e) for s, e in zip(starts, ends))

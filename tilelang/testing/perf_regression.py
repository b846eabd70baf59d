"""Performance-regression helpers of the public TileLang: an example's `regression_*.py` file calls
`process_func` on its timed entry points and ends with `regression()`.

    def regression_example_gemm():
        tilelang.testing.process_func(example_gemm.run_regression_perf, M=1024)

    if __name__ == "__main__":
        tilelang.testing.regression()     # runs every regression_* function here, prints latencies

`process_func(func, name=None, /, **kwargs)` calls `func(**kwargs)`, which returns a latency (any
positive number: only ratios between runs matter), and records it under `name` (default: the
module defining `func`). `regression()` runs the calling module's `regression_*` functions in name
order and prints one `name: latency` line per record, or, with TL_PERF_REGRESSION_FORMAT=json, one
line `__TILELANG_PERF_RESULTS_JSON__=[...]` for a harness to parse. TL_PERF_REGRESSION_ONLY
(comma-separated names or shell patterns, or a JSON list) runs only the matching functions.
"""

from __future__ import annotations

import fnmatch
import inspect
import json
import logging
import time
import warnings
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from tilelang import env

RESULTS_JSON_PREFIX = "__TILELANG_PERF_RESULTS_JSON__="
_RETRIES = 5  # a latency of 0 or less (a timer hiccup) is measured again this many times


@dataclass(frozen=True)
class PerfResult:
    name: str
    latency: float
    case: str | None = None  # the regression_* function that recorded it (without the prefix)


_results: list[PerfResult] = []
_current_case: str | None = None


def results() -> list[PerfResult]:
    """The latencies recorded since the last `regression()` started."""
    return list(_results)


def _strip(name: str) -> str:
    return name[len("regression_") :] if name.startswith("regression_") else name


def process_func(func: Callable[..., float], name: str | None = None, /, **kwargs) -> None:
    """Call `func(**kwargs)` and record the latency it returns. A result of 0 or less is measured
    again (up to 5 times), then dropped with a RuntimeWarning."""
    result_name = _strip(getattr(func, "__module__", "<unknown>") if name is None else name)
    latency = float(func(**kwargs))
    for _ in range(_RETRIES):
        if latency > 0.0:
            break
        latency = float(func(**kwargs))
    if latency <= 0.0:
        warnings.warn(f"{result_name}: latency {latency} <= 0; check the timing", RuntimeWarning, stacklevel=2)
        return
    _results.append(PerfResult(result_name, latency, _current_case))


def _selected(name: str, patterns: Sequence[str]) -> bool:
    if not patterns:
        return True
    candidates = [name.lower(), _strip(name).lower()]
    return any(fnmatch.fnmatch(c, p.lower()) or p.lower() in c for p in patterns for c in candidates)


def _only_patterns() -> list[str]:
    text = env.perf_regression_only()
    if not text:
        return []
    try:
        value = json.loads(text)
    except json.JSONDecodeError:
        value = text.split(",")
    values = [value] if isinstance(value, str) else value if isinstance(value, list) else []
    return [str(v).strip() for v in values if str(v).strip()]


def regression(prefixes: Sequence[str] = ("regression_",), verbose: bool = True) -> None:
    """Run the calling module's functions whose names start with one of `prefixes` (sorted by
    name), then print what `process_func` recorded."""
    global _current_case
    caller = inspect.currentframe().f_back.f_globals
    patterns = _only_patterns()
    functions = sorted(
        (k, v) for k, v in caller.items() if callable(v) and k.startswith(tuple(prefixes)) and _selected(k, patterns)
    )
    _results.clear()
    for idx, (name, fn) in enumerate(functions, 1):
        _current_case = _strip(name)
        if verbose:
            print(f"  [{idx}/{len(functions)}] {_current_case}", end="", flush=True)
        start = time.perf_counter()
        try:
            # The benchmarks' own warnings and log lines would interleave with the table.
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                logging.disable(logging.WARNING)
                try:
                    fn()
                finally:
                    logging.disable(logging.NOTSET)
        finally:
            _current_case = None
        if verbose:
            print(f" ({time.perf_counter() - start:.2f}s)", flush=True)
    if env.perf_regression_format() == "json":
        items = [{"name": r.name, "latency": r.latency, **({"case": r.case} if r.case else {})} for r in _results]
        print(RESULTS_JSON_PREFIX + json.dumps(items, separators=(",", ":")))
    else:
        for r in _results:
            print(f"{r.name}: {r.latency}")

"""process_func / regression: an example's regression_* functions are run in name order and the
latencies they record are printed, as text lines or one JSON line."""

import json

import pytest

from tilelang.testing import perf_regression, process_func, regression


def _bench(ms=1.5):
    return ms


def regression_b_second():
    process_func(_bench, "gemm_big", ms=2.0)


def regression_a_first():
    process_func(_bench, ms=1.0)  # named after _bench's module


def test_regression_runs_the_callers_functions_in_order(capsys, monkeypatch):
    monkeypatch.delenv("TL_PERF_REGRESSION_FORMAT", raising=False)
    monkeypatch.delenv("TL_PERF_REGRESSION_ONLY", raising=False)
    regression()
    out = capsys.readouterr().out
    results = perf_regression.results()
    assert [(r.name, r.latency, r.case) for r in results] == [
        (__name__, 1.0, "a_first"),
        ("gemm_big", 2.0, "b_second"),
    ]
    assert out.index("[1/2] a_first") < out.index("[2/2] b_second")
    assert "gemm_big: 2.0" in out


def test_json_output_and_only_filter(capsys, monkeypatch):
    monkeypatch.setenv("TL_PERF_REGRESSION_FORMAT", "json")
    monkeypatch.setenv("TL_PERF_REGRESSION_ONLY", "b_*")
    regression(verbose=False)
    line = capsys.readouterr().out.strip().splitlines()[-1]
    assert line.startswith(perf_regression.RESULTS_JSON_PREFIX)
    assert json.loads(line[len(perf_regression.RESULTS_JSON_PREFIX) :]) == [
        {"name": "gemm_big", "latency": 2.0, "case": "b_second"}
    ]


def test_non_positive_latency_is_retried_then_dropped():
    calls = []

    def flaky():
        calls.append(1)
        return 0.0 if len(calls) < 3 else 4.0

    perf_regression._results.clear()
    process_func(flaky, "flaky")
    assert len(calls) == 3 and perf_regression.results()[-1].latency == 4.0

    with pytest.warns(RuntimeWarning, match="latency 0.0 <= 0"):
        process_func(lambda: 0.0, "never")
    assert all(r.name != "never" for r in perf_regression.results())

"""Test helpers shared by `testing/` and `examples/`: the GPU marker and a per-run kernel cache.

Used from the conftest.py files as pytest plugins; imports pytest lazily so the package does not
depend on it.
"""

from __future__ import annotations

import os

from tilelang import env

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def has_gpu() -> bool:
    try:
        import torch

        return torch.cuda.is_available()
    except ImportError:
        return False


def use_test_cache() -> None:
    """Compiled libraries go to one folder per checkout (shared by xdist workers): one nvcc per kernel."""
    os.environ.setdefault("TILELANG_CACHE_DIR", os.path.join(ROOT, "build", "test-cache"))


def skip_gpu_tests_without_gpu(items) -> None:
    """Mark tests carrying the `gpu` marker as skipped when no GPU is visible."""
    import pytest

    if has_gpu():
        return
    skip = pytest.mark.skip(reason="needs a CUDA GPU")
    for item in items:
        if "gpu" in item.keywords:
            item.add_marker(skip)


# CUDA errors after which the process's CUDA context is unusable: every later kernel launch fails.
_STICKY_CUDA_FAULTS = (
    "an illegal memory access",
    "misaligned address",
    "an illegal instruction",
    "unspecified launch failure",
    "device-side assert",
    "hardware stack error",
)


def end_process_after_cuda_fault(report) -> None:
    """After a test's kernel faulted on the GPU, end this test process: otherwise every later GPU
    test of the process fails with the same error, hiding which test caused it. Under pytest-xdist
    the worker exits once this report is sent and xdist starts a fresh one; a serial run stops.
    Call from `pytest_runtest_logreport` (trylast)."""
    if report.when != "call" or not report.failed or getattr(report, "node", None) is not None:
        return  # (an xdist controller sees the workers' reports with their `node`: it goes on)
    text = str(report.longrepr)
    if "CUDA error" not in text or not any(s in text for s in _STICKY_CUDA_FAULTS):
        return
    if env.in_xdist_worker():
        os._exit(3)
    import pytest

    pytest.exit(f"{report.nodeid} faulted on the GPU; later GPU tests of this process would all fail", returncode=1)

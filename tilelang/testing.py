"""Test helpers shared by `testing/` and `examples/`: the GPU marker and a per-run kernel cache.

Used from the conftest.py files as pytest plugins; imports pytest lazily so the package does not
depend on it.
"""

from __future__ import annotations

import os

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

"""Shared test setup: the GPU marker, a per-run kernel cache, fixed random seeds."""

import os
import sys

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)
sys.path.insert(0, os.path.join(ROOT, "testing", "python"))

# Compiled libraries are cached per test run (and shared by xdist workers): one nvcc per kernel.
os.environ.setdefault("TILELANG_CACHE_DIR", os.path.join(ROOT, "build", "test-cache"))


def _has_gpu() -> bool:
    try:
        import torch

        return torch.cuda.is_available()
    except ImportError:
        return False


HAS_GPU = _has_gpu()


def pytest_collection_modifyitems(config, items):
    skip = pytest.mark.skip(reason="needs a CUDA GPU")
    for item in items:
        if "gpu" in item.keywords and not HAS_GPU:
            item.add_marker(skip)


@pytest.fixture(autouse=True)
def _seed():
    import torch

    torch.manual_seed(0)

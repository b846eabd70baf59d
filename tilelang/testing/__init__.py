"""Test helpers: what the public TileLang's `tilelang.testing` offers its users' tests, and the
hooks this project's conftest.py files use.

For users' tests (the public TileLang's names and behaviour):

    import tilelang.testing

    @tilelang.testing.requires_cuda_compute_version_ge(9, 0)   # skipped below sm_90, or without a GPU
    def test_kernel():
        tilelang.testing.set_random_seed(0)
        ...

    if __name__ == "__main__":
        tilelang.testing.main()                                 # pytest on this file

The `requires_*` decorators only attach pytest marks: the decorated function stays an ordinary
function that runs when called directly (an example's `main` can carry one). They also carry the
`gpu` marker this project's conftest files skip without a GPU. `process_func` and `regression`
(perf_regression.py) time an example's `regression_*` functions.

For this project's conftest files: `use_test_cache`, `skip_gpu_tests_without_gpu`,
`end_process_after_cuda_fault`. pytest and torch are imported lazily: importing this module
needs neither.
"""

from __future__ import annotations

import functools
import importlib.util
import inspect
import os
import random
import sys

from tilelang import env
from tilelang.errors import UserError
from tilelang.testing.compare import assert_points_at, locations_shown, torch_assert_close
from tilelang.testing.perf_regression import process_func, regression

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

__all__ = [
    "assert_points_at",
    "locations_shown",
    "main",
    "process_func",
    "regression",
    "requires_cdna",
    "requires_cuda",
    "requires_cuda_compute_version",
    "requires_cuda_compute_version_eq",
    "requires_cuda_compute_version_ge",
    "requires_cuda_compute_version_gt",
    "requires_cuda_compute_version_le",
    "requires_cuda_compute_version_lt",
    "requires_cuda_or_cdna",
    "requires_gfx950",
    "requires_llvm",
    "requires_metal",
    "requires_package",
    "requires_rocm",
    "set_random_seed",
    "torch_assert_close",
]


def has_gpu() -> bool:
    try:
        import torch

        return torch.cuda.is_available()
    except ImportError:
        return False


@functools.cache
def compute_capability() -> tuple[int, int]:
    """(major, minor) of GPU 0 as torch reports it, or (0, 0) without a GPU."""
    if not has_gpu():
        return (0, 0)
    import torch

    return tuple(torch.cuda.get_device_capability(0))


def main() -> None:
    """Run the calling file's tests with pytest (`if __name__ == "__main__": tilelang.testing.main()`);
    extra command-line arguments go to pytest. Exits with pytest's status."""
    import pytest

    test_file = inspect.getsourcefile(sys._getframe(1))
    sys.exit(pytest.main([test_file, *sys.argv[1:]]))


def set_random_seed(seed: int = 42) -> None:
    """Seed Python's, numpy's and torch's random generators (torch's on every GPU too)."""
    import numpy as np
    import torch

    random.seed(seed)
    np.random.seed(seed)
    torch.manual_seed(seed)
    if torch.cuda.is_available():
        torch.cuda.manual_seed_all(seed)


class Requirement:
    """A test requirement: `@req` on a test (or any function) attaches `req.marks()` and returns
    the function itself, so it still runs when called directly. As in the public TileLang (which
    takes these from TVM's testing features), `marks()` lists the pytest marks.

    `met` and `reason` may be callables, evaluated when the marks are made (at decoration)."""

    def __init__(self, met, reason, gpu: bool = False):
        self._met, self._reason, self.gpu = met, reason, gpu

    def met(self) -> bool:
        return bool(self._met()) if callable(self._met) else bool(self._met)

    @property
    def reason(self) -> str:
        return self._reason() if callable(self._reason) else self._reason

    def marks(self) -> list:
        import pytest

        marks = [pytest.mark.skipif(not self.met(), reason=self.reason)]
        if self.gpu:
            marks.append(pytest.mark.gpu)
        return marks

    def __call__(self, func):
        for mark in reversed(self.marks()):
            func = mark(func)
        return func


requires_cuda = Requirement(has_gpu, "needs a CUDA GPU", gpu=True)
# The public TileLang's CUDA-or-CDNA tests: here CUDA is the only GPU platform.
requires_cuda_or_cdna = requires_cuda

# Platforms this tilelang does not target: their tests are skipped, as on a machine without them.
requires_rocm = Requirement(False, "needs ROCm, which this tilelang does not target (CUDA only)")
requires_cdna = Requirement(False, "needs an AMD CDNA GPU, which this tilelang does not target (CUDA only)")
requires_gfx950 = Requirement(False, "needs an AMD gfx950 GPU, which this tilelang does not target (CUDA only)")
requires_metal = Requirement(False, "needs Metal, which this tilelang does not target (CUDA only)")
requires_llvm = Requirement(False, "needs the LLVM CPU target, which this tilelang does not have (CUDA only)")

_COMPARE = {
    "ge": (">=", lambda have, want: have >= want),
    "gt": (">", lambda have, want: have > want),
    "le": ("<=", lambda have, want: have <= want),
    "lt": ("<", lambda have, want: have < want),
    "eq": ("==", lambda have, want: have == want),
}


def requires_cuda_compute_version(major_version: int, minor_version: int = 0, mode: str = "ge"):
    """Decorator: run the test only on a GPU whose compute capability compares to
    (major_version, minor_version) as `mode` says ("ge", "gt", "le", "lt", "eq"); without a GPU the
    test is skipped whatever the mode.

    Example: `@tilelang.testing.requires_cuda_compute_version(9, 0)` runs on sm_90 and newer.

    Raises: UserError for a mode other than those five.
    """
    if mode not in _COMPARE:
        raise UserError(f"requires_cuda_compute_version: mode {mode!r} is not one of {', '.join(_COMPARE)}")
    symbol, compare = _COMPARE[mode]
    want = (int(major_version), int(minor_version))

    def met():
        return has_gpu() and compare(compute_capability(), want)

    def reason():
        if not has_gpu():
            return "needs a CUDA GPU"
        have = compute_capability()
        return f"needs a GPU of compute capability {symbol} {want[0]}.{want[1]}, this one is {have[0]}.{have[1]}"

    return Requirement(met, reason, gpu=True)


def requires_cuda_compute_version_ge(major_version: int, minor_version: int = 0):
    return requires_cuda_compute_version(major_version, minor_version, mode="ge")


def requires_cuda_compute_version_gt(major_version: int, minor_version: int = 0):
    return requires_cuda_compute_version(major_version, minor_version, mode="gt")


def requires_cuda_compute_version_eq(major_version: int, minor_version: int = 0):
    return requires_cuda_compute_version(major_version, minor_version, mode="eq")


def requires_cuda_compute_version_lt(major_version: int, minor_version: int = 0):
    return requires_cuda_compute_version(major_version, minor_version, mode="lt")


def requires_cuda_compute_version_le(major_version: int, minor_version: int = 0):
    return requires_cuda_compute_version(major_version, minor_version, mode="le")


def requires_package(*packages: str) -> Requirement:
    """Decorator: skip the test unless every named package can be imported (found on the path;
    not imported here). Example: `@tilelang.testing.requires_package("einops")`."""

    def found(name: str) -> bool:
        try:
            return importlib.util.find_spec(name) is not None
        except (ImportError, ValueError):  # a parent package missing, or a broken one
            return False

    missing = [p for p in packages if not found(p)]
    return Requirement(not missing, f"needs the package(s) {', '.join(missing)}")


# ---- for this project's conftest.py files ----------------------------------------------------


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

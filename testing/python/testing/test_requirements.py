"""tilelang.testing's helpers for users' tests: the requires_* decorators mark a test to be skipped
(and leave the function callable), main() runs the calling file under pytest, set_random_seed
seeds every generator. The GPU's compute capability is faked: no GPU here."""

import os
import random
import subprocess
import sys
import textwrap

import numpy as np
import pytest
import torch

import tilelang.testing
from tilelang.errors import UserError

ROOT = os.path.join(os.path.dirname(__file__), "..", "..", "..")


def _skip_marks(func):
    return [m for m in getattr(func, "pytestmark", []) if m.name == "skipif"]


def _skipped(func) -> bool:
    return any(m.args[0] for m in _skip_marks(func))


@pytest.fixture
def gpu(monkeypatch):
    """Pretend a GPU of a given compute capability is present."""

    def fake(major, minor):
        monkeypatch.setattr(tilelang.testing, "has_gpu", lambda: True)
        monkeypatch.setattr(tilelang.testing, "compute_capability", lambda: (major, minor))

    return fake


def test_requires_cuda_marks_and_keeps_the_function_callable(monkeypatch):
    monkeypatch.setattr(tilelang.testing, "has_gpu", lambda: False)

    @tilelang.testing.requires_cuda
    def example_main(n):
        return n + 1

    assert _skipped(example_main) and "needs a CUDA GPU" in _skip_marks(example_main)[0].kwargs["reason"]
    assert any(m.name == "gpu" for m in example_main.pytestmark)
    assert example_main(1) == 2  # a decorated example main still runs when called
    assert [m.name for m in tilelang.testing.requires_cuda.marks()] == ["skipif", "gpu"]


@pytest.mark.parametrize(
    "decorator, have, runs",
    [
        (lambda: tilelang.testing.requires_cuda_compute_version(9, 0), (9, 0), True),
        (lambda: tilelang.testing.requires_cuda_compute_version(9, 0), (8, 9), False),
        (lambda: tilelang.testing.requires_cuda_compute_version_ge(8, 9), (9, 0), True),
        (lambda: tilelang.testing.requires_cuda_compute_version_gt(9, 0), (9, 0), False),
        (lambda: tilelang.testing.requires_cuda_compute_version_eq(9, 0), (9, 0), True),
        (lambda: tilelang.testing.requires_cuda_compute_version_eq(9, 0), (10, 0), False),
        (lambda: tilelang.testing.requires_cuda_compute_version_le(8, 9), (8, 0), True),
        (lambda: tilelang.testing.requires_cuda_compute_version_le(8, 9), (9, 0), False),
        (lambda: tilelang.testing.requires_cuda_compute_version_lt(11), (10, 0), True),
        (lambda: tilelang.testing.requires_cuda_compute_version_lt(11), (12, 0), False),
    ],
)
def test_compute_version_comparisons(gpu, decorator, have, runs):
    gpu(*have)

    @decorator()
    def test_x():
        pass

    assert _skipped(test_x) != runs
    if not runs:
        assert f"this one is {have[0]}.{have[1]}" in _skip_marks(test_x)[0].kwargs["reason"]


def test_compute_version_without_a_gpu_is_skipped_whatever_the_mode(monkeypatch):
    monkeypatch.setattr(tilelang.testing, "has_gpu", lambda: False)
    for mode in ("ge", "le", "lt"):

        @tilelang.testing.requires_cuda_compute_version(9, 0, mode=mode)
        def test_x():
            pass

        assert _skipped(test_x)


def test_compute_version_bad_mode_is_a_user_error():
    # raised at the call: the traceback shows the user's line
    with pytest.raises(UserError, match="mode 'ne' is not one of ge, gt, le, lt, eq"):
        tilelang.testing.requires_cuda_compute_version(9, 0, mode="ne")


def test_requires_package():
    @tilelang.testing.requires_package("numpy")
    def test_a():
        pass

    @tilelang.testing.requires_package("numpy", "no_such_package_xyz")
    def test_b():
        pass

    assert not _skipped(test_a)
    assert _skipped(test_b) and "no_such_package_xyz" in _skip_marks(test_b)[0].kwargs["reason"]


def test_other_platforms_are_skipped():
    for req in (tilelang.testing.requires_rocm, tilelang.testing.requires_cdna, tilelang.testing.requires_metal):

        @req
        def test_x():
            pass

        assert _skipped(test_x) and "CUDA only" in _skip_marks(test_x)[0].kwargs["reason"]


def test_set_random_seed_repeats_every_generator():
    draws = []
    for _ in range(2):
        tilelang.testing.set_random_seed(7)
        draws.append((random.random(), float(np.random.rand()), float(torch.rand(1))))
    assert draws[0] == draws[1]


def test_torch_assert_close_is_the_utils_one():
    from tilelang.utils.tensor import torch_assert_close

    assert tilelang.testing.torch_assert_close is torch_assert_close


def test_main_runs_the_calling_file_under_pytest(tmp_path):
    (tmp_path / "test_user.py").write_text(
        textwrap.dedent(
            f"""
            import sys
            sys.path.insert(0, {os.path.abspath(ROOT)!r})
            import tilelang.testing

            @tilelang.testing.requires_package("no_such_package_xyz")
            def test_skipped():
                raise AssertionError("must not run")

            def test_runs():
                assert 1 + 1 == 2

            if __name__ == "__main__":
                tilelang.testing.main()
            """
        )
    )
    env = {k: v for k, v in os.environ.items() if not k.startswith("PYTEST_XDIST")}
    proc = subprocess.run(
        [sys.executable, str(tmp_path / "test_user.py"), "-q", "-p", "no:cacheprovider"],
        capture_output=True,
        text=True,
        cwd=tmp_path,
        env=env,
        timeout=300,
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "1 passed, 1 skipped" in proc.stdout

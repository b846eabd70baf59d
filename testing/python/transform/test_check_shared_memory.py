"""Shared memory over the per-block limit is a clear error listing the kernel's tiles."""

import pytest

import tilelang
import tilelang.language as T
from tilelang.errors import UserError
from tilelang.testing import assert_points_at, locations_shown


def _kernel(rows):
    @T.prim_func
    def main(A: T.Tensor((rows, 256), "float32"), B: T.Tensor((rows, 256), "float32")):
        with T.Kernel(1, threads=256):
            big = T.alloc_shared((rows, 256), "float32")
            T.copy(A, big)
            T.copy(big, B)

    return main


def test_over_the_limit_names_the_tiles_and_the_limit():
    with pytest.raises(UserError) as info:
        tilelang.compile(_kernel(256), target="sm_90a")  # 256 KiB > 227 KiB
    assert_points_at(info, 'big = T.alloc_shared((rows, 256), "float32")')
    text = str(info.value)
    assert "256.0 KiB" in text and "227 KiB" in text and "big: [256, 256] float32" in text


def test_limits_differ_by_architecture():
    tilelang.compile(_kernel(128), target="sm_80")  # 128 KiB fits sm_80's 163 KiB
    with pytest.raises(UserError, match="sm_89 allows 99 KiB") as err:
        tilelang.compile(_kernel(128), target="sm_89")
    assert_points_at(err, 'big = T.alloc_shared((rows, 256), "float32")')


def test_an_internal_failure_is_a_compiler_error_naming_the_pass(monkeypatch):
    from tilelang.engine import pipeline
    from tilelang.errors import CompilerError

    def broken(func):
        raise KeyError("boom")

    monkeypatch.setattr(pipeline, "_tile_passes", lambda options, target: [("broken_pass", broken)])
    with pytest.raises(CompilerError, match="(?s)internal error in pass 'broken_pass'.*TILELANG_DUMP_IR"):
        tilelang.compile(_kernel(8), target="sm_80")


def _two_tiles():
    @T.prim_func
    def main(A: T.Tensor((256, 256), "float16"), B: T.Tensor((256, 256), "float16")):
        with T.Kernel(1, threads=128):
            X = T.alloc_shared((256, 256), "float16")  # the first tile
            Y = T.alloc_shared((256, 224), "float16")  # the second tile
            T.copy(A, X)
            T.copy(B[0:256, 0:224], Y)
            T.copy(X, B)
            T.copy(Y, A[0:256, 0:224])

    return main


def test_each_tile_is_listed_with_its_size_at_its_allocation_line():
    with pytest.raises(UserError) as info:
        tilelang.compile(_two_tiles(), target="sm_90a")  # 128 + 112 KiB live together > 227 KiB
    assert_points_at(info, 'X = T.alloc_shared((256, 256), "float16")  # the first tile')
    text = str(info.value)
    with open(__file__) as f:
        source = f.read().splitlines()
    markers = ("# the first tile", "# the second tile")
    lines = {m: k + 1 for k, line in enumerate(source) for m in markers if line.endswith(m)}
    assert "sm_90a allows 227 KiB per block" in text
    assert f"X: [256, 256] float16 = 128.0 KiB, allocated at\n --> {__file__}:{lines['# the first tile']}:" in text
    assert f"Y: [256, 224] float16 = 112.0 KiB, allocated at\n --> {__file__}:{lines['# the second tile']}:" in text
    assert locations_shown(text) == [
        (__file__, lines["# the first tile"], 'X = T.alloc_shared((256, 256), "float16")  # the first tile'),
        (__file__, lines["# the second tile"], 'Y = T.alloc_shared((256, 224), "float16")  # the second tile'),
    ]

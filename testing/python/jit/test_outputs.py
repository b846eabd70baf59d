"""out_idx checked against the kernel: an output it reads but never writes is an input listed by
mistake (UserError naming it and the line reading it); outputs written by stores, tile ops or
calls that may write (atomics) are fine."""

import pytest

import tilelang
import tilelang.language as T
from tilelang.errors import UserError
from tilelang.testing import assert_points_at


def add_one():
    @T.prim_func
    def main(A: T.Tensor((128,), "float32"), B: T.Tensor((128,), "float32")):
        with T.Kernel(1, threads=128):
            for i in T.Parallel(128):
                B[i] = A[i] + 1

    return main


def test_an_input_in_out_idx_is_named_at_its_read():
    with pytest.raises(UserError, match="out_idx lists parameter 'A', which the kernel reads but never writes") as e:
        tilelang.compile(add_one(), out_idx=[0], target="sm_80")
    assert_points_at(e, "B[i] = A[i] + 1")


def test_outputs_written_by_stores_tile_ops_or_atomics_pass():
    tilelang.compile(add_one(), out_idx=[1], target="sm_80")

    @T.prim_func
    def copied(A: T.Tensor((128,), "float32"), B: T.Tensor((128,), "float32"), C: T.Tensor((1,), "float32")):
        with T.Kernel(1, threads=128):
            s = T.alloc_shared((128,), "float32")
            T.copy(A, s)
            T.copy(s, B)  # a tile op writing B
            T.atomic_add(C[0], s[T.get_thread_binding()])  # may write C: not refused

    tilelang.compile(copied, out_idx=[1, 2], target="sm_80")

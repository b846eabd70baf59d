"""fold_tile_extents: a tile sliced between bound values (`Q[b, H0:H1, :]` with `H1 = H0 + 32`) has
the constant extent they differ by, so T.tma_copy accepts it (it was a UserError when traced: "the
tile's extents are not constants") and T.copy can become a TMA load; extents that stay dynamic are
a UserError at the user's T.tma_copy. CPU: the IR, the generated code, nvcc."""

import re

import pytest
from ir_testing import assert_ir_equal
from tvm import ir

import tilelang
import tilelang.language as T
from tilelang.codegen import cuda
from tilelang.errors import UserError
from tilelang.op import base
from tilelang.testing import assert_points_at
from tilelang.transform.fold_tile_extents import fold_tile_extents
from tilelang.utils.ir import collect, const_int


def heads_tma(rows=32, lens_bound=False):
    """O[b] = Q[b, h0:h1, :] * 2 for a block of `rows` heads starting at h0 = hb * rows, loaded with
    the user's T.tma_copy; with `lens_bound`, h1 is read from memory (a truly dynamic extent)."""

    @T.prim_func
    def main(
        Q: T.Tensor((2, 128, 64), "float16"),
        Lens: T.Tensor((4,), "int32"),
        O: T.Tensor((2, 128, 64), "float16"),
    ):
        with T.Kernel(128 // rows, 2, threads=128) as (hb, b):
            Q_s = T.alloc_shared((rows, 64), "float16")
            bar = T.alloc_barrier(arrive_count=128)
            h0 = hb * rows
            if lens_bound:
                h1 = h0 + Lens[hb]
            else:
                h1 = h0 + rows
            T.tma_copy(Q[b, h0:h1, :], Q_s, barrier=bar)
            T.barrier_arrive(bar)
            T.barrier_wait(bar, 0)
            for i, j in T.Parallel(rows, 64):
                O[b, h0 + i, j] = Q_s[i, j] * T.float16(2)

    return main


def heads_copy(rows=32):
    """The same tile loaded by a T.copy (which lower_tma_copies makes a TMA load on sm_90a)."""

    @T.prim_func
    def main(Q: T.Tensor((2, 128, 64), "float16"), O: T.Tensor((2, 128, 64), "float16")):
        with T.Kernel(128 // rows, 2, threads=128) as (hb, b):
            Q_s = T.alloc_shared((rows, 64), "float16")
            h0 = hb * rows
            h1 = h0 + rows
            T.copy(Q[b, h0:h1, :], Q_s)
            for i, j in T.Parallel(rows, 64):
                O[b, h0 + i, j] = Q_s[i, j] * T.float16(2)

    return main


def _extents(func, name):
    calls = [c for c in collect(func.body, ir.Call) if base.is_tile_op(c, name)]
    return [[const_int(e) for e in base.Region.from_ir(c.args[0]).extents] for c in calls]


def test_extents_between_bound_values_become_constants():
    func = heads_copy()
    assert _extents(func, "copy")[0][1] is None  # h1 - h0, as parsed
    assert _extents(fold_tile_extents(func), "copy") == [[1, 32, 64]]
    func = heads_tma()
    assert _extents(fold_tile_extents(func), "tma_copy") == [[1, 32, 64]]


def test_a_function_with_constant_extents_is_returned_as_is():
    @T.prim_func
    def main(A: T.Tensor((64, 64), "float16"), B: T.Tensor((64, 64), "float16")):
        with T.Kernel(1, threads=128):
            S = T.alloc_shared((64, 64), "float16")
            T.copy(A[0:64, 0:64], S)
            T.copy(S, B)

    assert_ir_equal(fold_tile_extents(main), main)
    assert fold_tile_extents(main).body.same_as(main.body)


def test_the_users_tma_copy_between_bound_values_compiles():
    k = tilelang.compile(heads_tma(), target="sm_90a")
    src = k.get_kernel_source()
    # One box of 64 fp16 columns x 32 rows at (0, h0, b): 4096 bytes announced on the barrier.
    assert "tl::mbarrier_expect_tx((&(bar_ptr[0])), (uint)4096)" in src
    load = "tl::tma_load(Q_tma0, (&(bar_ptr[0])), (&(Q_s_ptr[0])), 0, (((int)blockIdx.x) * 32), ((int)blockIdx.y))"
    assert load in src
    cuda.compile_object(src, k.target, host_src=k.host_source)


def test_a_copy_between_bound_values_becomes_a_tma_load():
    k = tilelang.compile(heads_copy(), target="sm_90a")
    src = k.get_kernel_source()
    assert len(re.findall(r"tl::tma_load\(Q_tma", src)) == 1
    cuda.compile_object(src, k.target, host_src=k.host_source)


def test_extents_that_stay_dynamic_are_an_error_at_the_users_line():
    with pytest.raises(UserError) as err:
        tilelang.compile(heads_tma(lens_bound=True), target="sm_90a")
    assert_points_at(err, "T.tma_copy(Q[b, h0:h1, :], Q_s, barrier=bar)")
    msg = str(err.value)
    assert "T.tma_copy of Q[" in msg and "the tile's extents are not constants" in msg
    assert "test_fold_tile_extents.py" in msg and "T.tma_copy(Q[b, h0:h1, :], Q_s, barrier=bar)" in msg

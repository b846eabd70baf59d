"""T.alloc_reducer / T.finalize_reducer (op/reducer.py) on the CPU: the layout the declaration fixes,
the all-reduce finalizing lowers to (shuffles in a warp, one shared round across warps), and the
errors at the user's line."""

import re

import pytest
from tvm import tirx

import tilelang
import tilelang.language as T
from tilelang.codegen import cuda
from tilelang.errors import UserError
from tilelang.op import base, reducer
from tilelang.utils.ir import collect


def _raises_at(message: str, line: str):
    return pytest.raises(UserError, match=rf"(?s){message}.*--> [^\n]*test_reducer\.py:\d+.*\|[^\n]*{re.escape(line)}")


def _ops(func):
    return [op for op in map(base.parse, collect(func.body, tirx.Evaluate)) if op is not None]


def column_max(n=8, threads=256, replication="all"):
    """Every thread folds the same values into its copy; finalizing combines identical copies."""

    @T.prim_func
    def main(X: T.Tensor((64, n), "float32"), Y: T.Tensor((64, n), "float32")):
        with T.Kernel(64, threads=threads) as bx:
            o = T.alloc_reducer((n,), "float32", op="max", replication=replication)
            T.fill(o, -T.infinity("float32"))
            for i in T.Parallel(n):
                o[i] = T.max(o[i], X[bx, i])
            T.finalize_reducer(o)
            T.copy(o, Y[bx, 0])

    return main


def gemv(M=256, N=256, block_M=64, block_N=64, threads=128):
    """TileLang's gemv_alloc_reducer: each thread adds its iterations into its own copy."""

    @T.prim_func
    def main(a: T.Tensor((M, N), "float16"), x: T.Tensor((N,), "float16"), o: T.Tensor((M,), "float32")):
        with T.Kernel(T.ceildiv(M, block_M), threads=threads) as bm:
            acc = T.alloc_reducer(block_M, "float32", replication="all")
            a_frag = T.alloc_fragment((block_M, block_N), "float16")
            x_frag = T.alloc_fragment(block_N, "float16")
            T.clear(acc)
            for bn in T.serial(T.ceildiv(N, block_N)):
                T.copy(a[bm * block_M, bn * block_N], a_frag)
                T.copy(x[bn * block_N], x_frag)
                for i, j in T.Parallel(block_M, block_N):
                    acc[i] += a_frag[i, j] * x_frag[j]
            T.finalize_reducer(acc)
            T.copy(acc, o[bm * block_M])

    return main


def test_the_declaration_fixes_the_layout():
    declare, *_, finalize = [op for op in _ops(column_max()) if type(op).__name__ in ("Reducer", "FinalizeReducer")]
    assert (declare.op, declare.replication, finalize.op) == ("max", "all", "max")
    (layout,) = declare.strict_layouts(None, 256, None)[0].values()
    assert layout.groups == [(1, 256)] and layout.replicate == 256 and layout.local_size == 8  # a full copy each
    assert declare.partial_fragments() == [declare.buffer]
    (none,) = _ops(column_max(replication="none"))[0].strict_layouts(None, 256, None)[0].values()
    assert not none.groups and none.local_size == 1  # one holder per element
    assert _ops(column_max(replication="none"))[0].partial_fragments() == []


@pytest.mark.parametrize("target", ["sm_80", "sm_90a"])
def test_finalizing_shuffles_then_one_round_across_warps(target):
    kernel = tilelang.compile(column_max(), target=target)
    src = kernel.get_kernel_source()
    assert [int(m) for m in re.findall(r"tl::shfl_xor\(o_local_ptr\[0\], (\d+)\)", src)] == [1, 2, 4, 8, 16]
    assert "% 32) == 0)" in src  # lane 0 of each of the 8 warps publishes its warp's values
    assert "for (int d = 1; d < 8; ++d)" in src  # the other 7 warps' values after the first's
    cuda.compile_object(src, kernel.target)


def test_finalizing_one_holder_per_element_is_nothing():
    src = tilelang.compile(column_max(replication="none"), target="sm_80").get_kernel_source()
    assert "shfl_xor" not in src


def test_a_gemv_accumulates_into_a_replicated_reducer():
    kernel = tilelang.compile(gemv(), target="sm_80")
    src = kernel.get_kernel_source()
    assert "tl::shfl_xor(acc_local_ptr[s], 16)" in src
    cuda.compile_object(src, kernel.target)


def test_errors_at_the_users_line():
    with _raises_at(r"op must be one of \['sum', 'max', 'min'\]", 'T.alloc_reducer((4,), "float32", op="prod")'):

        @T.prim_func
        def bad_op(X: T.Tensor((4,), "float32")):
            with T.Kernel(1, threads=32):
                T.alloc_reducer((4,), "float32", op="prod")

    with _raises_at(r"replication must be 'all', 'none' or None", 'T.alloc_reducer(4, "float32", replication="some")'):

        @T.prim_func
        def bad_replication(X: T.Tensor((4,), "float32")):
            with T.Kernel(1, threads=32):
                T.alloc_reducer(4, "float32", replication="some")

    with _raises_at(r"'f' is not a reducer; allocate it with T.alloc_reducer", "T.finalize_reducer(f)"):

        @T.prim_func
        def not_a_reducer(X: T.Tensor((4,), "float32")):
            with T.Kernel(1, threads=32):
                f = T.alloc_fragment((4,), "float32")
                T.clear(f)
                T.finalize_reducer(f)

    with _raises_at(r"batch must be a positive integer", "T.finalize_reducer(r, batch=0)"):

        @T.prim_func
        def bad_batch(X: T.Tensor((4,), "float32")):
            with T.Kernel(1, threads=32):
                r = T.alloc_reducer(4, "float32")
                T.clear(r)
                T.finalize_reducer(r, batch=0)


def test_batch_must_divide_each_threads_elements():
    @T.prim_func
    def main(X: T.Tensor((64, 8), "float32"), Y: T.Tensor((64, 8), "float32")):
        with T.Kernel(64, threads=64) as bx:
            o = T.alloc_reducer((8,), "float32", op="max", replication="all")
            T.fill(o, -T.infinity("float32"))
            for i in T.Parallel(8):
                o[i] = T.max(o[i], X[bx, i])
            T.finalize_reducer(o, batch=3)
            T.copy(o, Y[bx, 0])

    with _raises_at(r"batch=3 must divide the 8 elements each thread holds", "T.finalize_reducer(o, batch=3)"):
        tilelang.compile(main, target="sm_80")
    assert reducer.OPS == ("sum", "max", "min")

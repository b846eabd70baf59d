from ir_testing import assert_ir_equal

import tilelang.language as T
from tilelang.transform.expand_elementwise_ops import expand_elementwise_ops


def test_copy_and_fill_become_parallel_loops():
    @T.prim_func
    def before(A: T.Tensor((1000, 64), "float16"), C: T.Tensor((1000, 64), "float32")):
        with T.Kernel(1, 8, threads=128) as (bx, by):
            s = T.alloc_shared((128, 64), "float16")
            f = T.alloc_fragment((128, 64), "float32")
            T.copy(A[by * 128, 0], s)
            T.fill(f, 1.0)
            T.copy(f, C[by * 128 : by * 128 + 128, 0:64])

    @T.prim_func
    def expected(A: T.Tensor((1000, 64), "float16"), C: T.Tensor((1000, 64), "float32")):
        with T.Kernel(1, 8, threads=128) as (bx, by):
            s = T.alloc_shared((128, 64), "float16")
            f = T.alloc_fragment((128, 64), "float32")
            for i0, i1 in T.Parallel(128, 64):
                s[i0, i1] = A[by * 128 + i0, i1]
            for i0, i1 in T.Parallel(128, 64):
                f[i0, i1] = T.float32(1.0)
            for i0, i1 in T.Parallel(128, 64):
                C[by * 128 + i0, i1] = f[i0, i1]  # same dtype: no cast

    assert_ir_equal(expand_elementwise_ops(before), expected)


def test_copy_with_unit_dimensions_and_cast():
    @T.prim_func
    def before(Q: T.Tensor((2, 64, 4, 32), "float16")):
        with T.Kernel(1, threads=128) as bx:
            f = T.alloc_fragment((64, 32), "float32")
            T.copy(Q[bx, 0:64, 3, :], f)

    @T.prim_func
    def expected(Q: T.Tensor((2, 64, 4, 32), "float16")):
        with T.Kernel(1, threads=128) as bx:
            f = T.alloc_fragment((64, 32), "float32")
            for i0, i1 in T.Parallel(64, 32):
                f[i0, i1] = T.Cast("float32", Q[bx, i0, 3, i1])

    assert_ir_equal(expand_elementwise_ops(before), expected)


def test_other_statements_untouched():
    @T.prim_func
    def before(A: T.Tensor((64,), "float32")):
        with T.Kernel(1, threads=64):
            for i in T.Parallel(64):
                A[i] = A[i] + 1.0

    assert_ir_equal(expand_elementwise_ops(before), before)

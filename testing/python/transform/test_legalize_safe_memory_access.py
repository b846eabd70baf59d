from ir_testing import assert_ir_equal

import tilelang.language as T
from tilelang.transform.legalize_safe_memory_access import legalize_safe_memory_access


def test_partial_tile_is_guarded():
    @T.prim_func
    def before(A: T.Tensor((1000, 64), "float16"), C: T.Tensor((1000, 64), "float16")):
        with T.Kernel(8, threads=128) as bx:
            s = T.alloc_shared((128, 64), "float16")
            for i, j in T.Parallel(128, 64):
                s[i, j] = A[bx * 128 + i, j]
            for i, j in T.Parallel(128, 64):
                C[bx * 128 + i, j] = s[i, j] + A[bx * 128 + i, j]

    @T.prim_func
    def expected(A: T.Tensor((1000, 64), "float16"), C: T.Tensor((1000, 64), "float16")):
        with T.Kernel(8, threads=128) as bx:
            s = T.alloc_shared((128, 64), "float16")
            for i, j in T.Parallel(128, 64):
                s[i, j] = T.if_then_else(bx * 128 + i < 1000, A[bx * 128 + i, j], T.float16(0))
            for i, j in T.Parallel(128, 64):
                if bx * 128 + i < 1000:  # the store's guard already covers the load of A
                    C[bx * 128 + i, j] = s[i, j] + A[bx * 128 + i, j]

    assert_ir_equal(legalize_safe_memory_access(before), expected)


def test_in_bounds_tiles_are_untouched():
    @T.prim_func
    def before(A: T.Tensor((1024, 64), "float16"), C: T.Tensor((1024, 64), "float16")):
        with T.Kernel(8, threads=128) as bx:
            for i, j in T.Parallel(128, 64):
                C[bx * 128 + i, j] = A[bx * 128 + i, j]

    assert_ir_equal(legalize_safe_memory_access(before), before)


def test_shared_and_fragment_accesses_are_not_guarded():
    @T.prim_func
    def before(A: T.Tensor((1000,), "float32")):
        with T.Kernel(8, threads=128):
            s = T.alloc_shared((256,), "float32")
            for i in T.Parallel(128):
                s[i + 128] = s[i]

    assert_ir_equal(legalize_safe_memory_access(before), before)

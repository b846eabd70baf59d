from ir_testing import assert_ir_equal
from tvm import tirx

import tilelang.language as T
from tilelang.transform.legalize_safe_memory_access import legalize_safe_memory_access
from tilelang.utils.ir import collect


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


def test_dynamic_extent_guards_the_tail():
    M = T.dynamic("m")

    @T.prim_func
    def before(A: T.Tensor((M, 64), "float16"), C: T.Tensor((M, 64), "float16")):
        with T.Kernel(T.ceildiv(M, 128), threads=128) as bx:
            s = T.alloc_shared((128, 64), "float16")
            for i, j in T.Parallel(128, 64):
                s[i, j] = A[bx * 128 + i, j]
            for i, j in T.Parallel(128, 64):
                C[bx * 128 + i, j] = s[i, j]

    @T.prim_func
    def expected(A: T.Tensor((M, 64), "float16"), C: T.Tensor((M, 64), "float16")):
        with T.Kernel(T.ceildiv(M, 128), threads=128) as bx:
            s = T.alloc_shared((128, 64), "float16")
            for i, j in T.Parallel(128, 64):
                s[i, j] = T.if_then_else(bx * 128 + i < M, A[bx * 128 + i, j], T.float16(0))
            for i, j in T.Parallel(128, 64):
                if bx * 128 + i < M:
                    C[bx * 128 + i, j] = s[i, j]

    assert_ir_equal(legalize_safe_memory_access(before), expected)


def test_int64_dynamic_extent_is_guarded_in_int64():
    N = T.dynamic("n", "int64")

    @T.prim_func
    def before(A: T.Tensor((N,), "float32")):
        with T.Kernel(T.ceildiv(N, 128), threads=128) as bx:
            for i in T.Parallel(128):
                A[bx * 128 + i] = 1.0

    out = legalize_safe_memory_access(before)
    (guard,) = collect(out.body, tirx.IfThenElse)
    assert str(guard.condition.b) == "n" and str(guard.condition.a.ty.dtype) == "int64"


def test_loops_over_a_dynamic_extent_are_in_bounds_already():
    M = T.dynamic("m")

    @T.prim_func
    def before(A: T.Tensor((M, 64), "float32"), C: T.Tensor((64,), "float32")):
        with T.Kernel(1, threads=64):
            for r in T.serial(M):
                for j in T.Parallel(64):
                    C[j] = C[j] + A[r, j]
            for i in T.Parallel(M):
                A[M - 1 - i, 0] = 0.0

    assert_ir_equal(legalize_safe_memory_access(before), before)


def test_loads_in_bindings_conditions_and_indices_are_guarded():
    M = T.dynamic("m")

    @T.prim_func
    def before(A: T.Tensor((M,), "float32"), I: T.Tensor((M,), "int32"), C: T.Tensor((M,), "float32")):
        with T.Kernel(T.ceildiv(M, 128), threads=128) as bx:
            for i in T.Parallel(128):
                v = A[bx * 128 + i]
                if A[bx * 128 + i] > 0:
                    C[bx * 128 + i] = v
                C[bx * 128 + i] = A[I[bx * 128 + i]]

    @T.prim_func
    def expected(A: T.Tensor((M,), "float32"), I: T.Tensor((M,), "int32"), C: T.Tensor((M,), "float32")):
        with T.Kernel(T.ceildiv(M, 128), threads=128) as bx:
            for i in T.Parallel(128):
                v = T.if_then_else(bx * 128 + i < M, A[bx * 128 + i], T.float32(0))
                if T.if_then_else(bx * 128 + i < M, A[bx * 128 + i], T.float32(0)) > T.float32(0):
                    if bx * 128 + i < M:
                        C[bx * 128 + i] = v
                if bx * 128 + i < M:  # the gathered index is in bounds under the store's guard
                    C[bx * 128 + i] = T.if_then_else(
                        I[bx * 128 + i] < M and I[bx * 128 + i] >= 0, A[I[bx * 128 + i]], T.float32(0)
                    )

    assert_ir_equal(legalize_safe_memory_access(before), expected)


def test_guards_the_kernel_writes_itself_are_not_repeated():
    M = T.dynamic("m")

    @T.prim_func
    def before(A: T.Tensor((M,), "float32"), C: T.Tensor((M,), "float32")):
        with T.Kernel(T.ceildiv(M, 128), threads=128) as bx:
            for i in T.Parallel(128):
                if bx * 128 + i < M:
                    C[bx * 128 + i] = A[bx * 128 + i] * 2.0
                if bx * 128 + i < M:
                    C[bx * 128 + i] = T.if_then_else(bx * 128 + i < M, A[bx * 128 + i], 1.0)

    assert_ir_equal(legalize_safe_memory_access(before), before)


def test_element_atomic_target_index_is_guarded():
    M = T.dynamic("m")

    @T.prim_func
    def before(I: T.Tensor((M,), "int32"), C: T.Tensor((64,), "float32")):
        with T.Kernel(T.ceildiv(M, 128), threads=128) as bx:
            for i in T.Parallel(128):
                T.atomic_add(C[I[bx * 128 + i]], 1.0)

    out = legalize_safe_memory_access(before)
    (guard,) = collect(out.body, tirx.IfThenElse)
    text = str(guard.condition)
    # The index is read only for rows that exist, and the element it names must exist.
    assert "bx * 128 + i < m" in text and "< 64" in text and ">= 0" in text

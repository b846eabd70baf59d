"""fold_accumulator_clear: zeroing right before a gemm becomes the gemm's clear flag, also under a
uniform branch; anything between that touches the accumulator, or a partial zeroing, stops it."""

import pytest
from ir_testing import assert_ir_equal

import tilelang
import tilelang.language as T
from tilelang.codegen import cuda
from tilelang.transform.fold_accumulator_clear import fold_accumulator_clear

SHAPE = (64, 64)


def test_clear_before_gemm_becomes_its_flag():
    @T.prim_func
    def before(A: T.Tensor(SHAPE, "float16"), B: T.Tensor(SHAPE, "float16"), C: T.Tensor(SHAPE, "float32")):
        with T.Kernel(4, threads=128):
            a = T.alloc_shared(SHAPE, "float16")
            b = T.alloc_shared(SHAPE, "float16")
            c = T.alloc_fragment(SHAPE, "float32")
            T.copy(A, a)
            T.clear(c)
            T.copy(B, b)  # does not touch c
            T.gemm(a, b, c)
            T.copy(c, C)

    @T.prim_func
    def expected(A: T.Tensor(SHAPE, "float16"), B: T.Tensor(SHAPE, "float16"), C: T.Tensor(SHAPE, "float32")):
        with T.Kernel(4, threads=128):
            a = T.alloc_shared(SHAPE, "float16")
            b = T.alloc_shared(SHAPE, "float16")
            c = T.alloc_fragment(SHAPE, "float32")
            T.copy(A, a)
            T.copy(B, b)
            T.gemm(a, b, c, clear_accum=True)
            T.copy(c, C)

    assert_ir_equal(fold_accumulator_clear(before), expected)


def test_clear_under_a_branch_becomes_a_run_time_flag():
    @T.prim_func
    def before(A: T.Tensor(SHAPE, "float16"), C: T.Tensor(SHAPE, "float32")):
        with T.Kernel(4, threads=128) as bx:
            a = T.alloc_shared(SHAPE, "float16")
            c = T.alloc_fragment(SHAPE, "float32")
            T.copy(A, a)
            if bx > 0:
                T.clear(c)
            else:
                for i, j in T.Parallel(64, 64):
                    c[i, j] = T.if_then_else(i < j, -T.infinity("float32"), 0)
            T.gemm(a, a, c)
            T.copy(c, C)

    @T.prim_func
    def expected(A: T.Tensor(SHAPE, "float16"), C: T.Tensor(SHAPE, "float32")):
        with T.Kernel(4, threads=128) as bx:
            a = T.alloc_shared(SHAPE, "float16")
            c = T.alloc_fragment(SHAPE, "float32")
            T.copy(A, a)
            if not bx > 0:
                for i, j in T.Parallel(64, 64):
                    c[i, j] = T.if_then_else(i < j, -T.infinity("float32"), 0)
            T.gemm(a, a, c, clear_accum=bx > 0)
            T.copy(c, C)

    assert_ir_equal(fold_accumulator_clear(before), expected)


@pytest.mark.parametrize("what", ["read between", "not zero", "part of the tile", "gemm into another tile"])
def test_left_as_written(what):
    @T.prim_func
    def read_between(A: T.Tensor(SHAPE, "float16"), C: T.Tensor(SHAPE, "float32")):
        with T.Kernel(4, threads=128):
            a = T.alloc_shared(SHAPE, "float16")
            c = T.alloc_fragment(SHAPE, "float32")
            T.copy(A, a)
            T.clear(c)
            T.copy(c, C)
            T.gemm(a, a, c)
            T.copy(c, C)

    @T.prim_func
    def not_zero(A: T.Tensor(SHAPE, "float16"), C: T.Tensor(SHAPE, "float32")):
        with T.Kernel(4, threads=128):
            a = T.alloc_shared(SHAPE, "float16")
            c = T.alloc_fragment(SHAPE, "float32")
            T.copy(A, a)
            T.fill(c, 1.0)
            T.gemm(a, a, c)
            T.copy(c, C)

    @T.prim_func
    def part(A: T.Tensor(SHAPE, "float16"), C: T.Tensor(SHAPE, "float32")):
        with T.Kernel(4, threads=128):
            a = T.alloc_shared(SHAPE, "float16")
            c = T.alloc_fragment(SHAPE, "float32")
            T.copy(A, a)
            T.clear(c[0:32, 0:64])
            T.gemm(a, a, c)
            T.copy(c, C)

    @T.prim_func
    def other(A: T.Tensor(SHAPE, "float16"), C: T.Tensor(SHAPE, "float32")):
        with T.Kernel(4, threads=128):
            a = T.alloc_shared(SHAPE, "float16")
            c = T.alloc_fragment(SHAPE, "float32")
            d = T.alloc_fragment(SHAPE, "float32")
            T.copy(A, a)
            T.clear(c)
            T.gemm(a, a, d)
            T.copy(d, c)
            T.copy(c, C)

    func = {
        "read between": read_between,
        "not zero": not_zero,
        "part of the tile": part,
        "gemm into another tile": other,
    }[what]
    assert_ir_equal(fold_accumulator_clear(func), func)


@pytest.mark.parametrize("target", ["sm_80", "sm_90a"])
def test_run_time_flag_reaches_the_gemm_call(target):
    @T.prim_func
    def main(A: T.Tensor((256, 64), "float16"), C: T.Tensor((256, 64), "float32")):
        with T.Kernel(4, threads=128) as bx:
            a = T.alloc_shared(SHAPE, "float16")
            c = T.alloc_fragment(SHAPE, "float32")
            T.copy(A[bx * 64, 0], a)
            for i, j in T.Parallel(64, 64):
                c[i, j] = T.if_then_else(bx * 64 + i < j, -T.infinity("float32"), 0)
            T.gemm(a, a, c, transpose_B=True)
            T.copy(c, C[bx * 64, 0])

    kernel = tilelang.compile(main, target=target)
    src = kernel.get_kernel_source()
    # The mask is uniform for blocks 1-3 (zero): the gemm clears there, block 0 masks.
    call = next(line for line in src.splitlines() if "tl::gemm_ss<" in line or "tl::wgmma_ss<" in line)
    assert call.endswith(", (1 <= ((int)blockIdx.x)));"), call
    assert "-CUDART_INF_F" in src
    cuda.compile_object(src, kernel.target)


def test_a_condition_reading_memory_is_left_as_written():
    @T.prim_func
    def main(A: T.Tensor(SHAPE, "float16"), F: T.Tensor((4,), "int32"), C: T.Tensor(SHAPE, "float32")):
        with T.Kernel(4, threads=128) as bx:
            a = T.alloc_shared(SHAPE, "float16")
            c = T.alloc_fragment(SHAPE, "float32")
            T.copy(A, a)
            if F[bx] > 0:
                T.clear(c)
            else:
                T.fill(c, 1.0)
            T.gemm(a, a, c)
            T.copy(c, C)

    assert_ir_equal(fold_accumulator_clear(main), main)

"""Kernels with scalar (`n: T.int32`, `s: T.float32`) and pointer (`p: T.ptr(...)`) parameters, shared by
the CPU and GPU tests of testing/python/jit/test_scalar_params*.py."""

import tilelang.language as T


def scale_prefix(N=1024, block=128):
    """B[:n] = A[:n] * s, for `n` and `s` given per call (B past n untouched)."""

    @T.prim_func
    def main(A: T.Tensor((N,), T.float32), B: T.Tensor((N,), T.float32), n: T.int32, s: T.float32):
        with T.Kernel(T.ceildiv(n, block), threads=block) as bx:
            for i in T.Parallel(block):
                if bx * block + i < n:
                    B[bx * block + i] = A[bx * block + i] * s

    return main


def double_through_pointer(N=1024, block=128):
    """B = 2 * A, where A arrives as a pointer parameter and is viewed with T.make_tensor."""

    @T.prim_func
    def main(a_ptr: T.ptr(T.float32), B: T.Tensor((N,), T.float32)):
        A = T.make_tensor(a_ptr, (N,), T.float32)
        with T.Kernel(T.ceildiv(N, block), threads=block) as bx:
            for i in T.Parallel(block):
                B[bx * block + i] = A[bx * block + i] * 2

    return main

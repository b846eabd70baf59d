"""Kernels with dynamic shapes, shared by the generated-code tests (CPU) and the GPU tests."""

import os
import sys

import tilelang.language as T

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "examples", "gemm"))
import example_gemm  # noqa: E402


def vector_add(block=1024, threads=256, symbol_dtype="int32"):
    """C = A + B over a dynamic length n."""
    N = T.dynamic("n", symbol_dtype)

    @T.prim_func
    def main(A: T.Tensor((N,), "float32"), B: T.Tensor((N,), "float32"), C: T.Tensor((N,), "float32")):
        with T.Kernel(T.ceildiv(N, block), threads=threads) as bx:
            for i in T.Parallel(block):
                C[bx * block + i] = A[bx * block + i] + B[bx * block + i]

    return main


def matmul(M, N, K, block_M=128, block_N=128, block_K=32, num_stages=3, dtype="float16", accum="float"):
    """examples/gemm/example_gemm.py's kernel over any mix of static and dynamic M, N, K."""
    return example_gemm.matmul.factory(M, N, K, block_M, block_N, block_K, dtype, accum, 128, num_stages)

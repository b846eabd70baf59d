"""tilelang.tools.Analyzer: FLOPs of every T.gemm and bytes of every T.copy with a global side,
times the loops around them and the blocks of the grid."""

import types

import pytest

import tilelang.language as T
from tilelang.errors import UserError
from tilelang.tools import Analyzer

H100 = types.SimpleNamespace(bandwidth=[750, 12080], compute_capability="90", compute_max_core=132)


def matmul(M, N, K, block_M=128, block_N=128, block_K=32):
    @T.prim_func
    def main(A: T.Tensor((M, K), "float16"), B: T.Tensor((N, K), "float16"), C: T.Tensor((M, N), "float16")):
        with T.Kernel(T.ceildiv(N, block_N), T.ceildiv(M, block_M), threads=128) as (bx, by):
            A_shared = T.alloc_shared((block_M, block_K), "float16")
            B_shared = T.alloc_shared((block_N, block_K), "float16")
            C_local = T.alloc_fragment((block_M, block_N), "float32")
            T.clear(C_local)
            for k in T.Pipelined(T.ceildiv(K, block_K), num_stages=3):
                T.copy(A[by * block_M, k * block_K], A_shared)
                T.copy(B[bx * block_N, k * block_K], B_shared)
                T.gemm(A_shared, B_shared, C_local, transpose_B=True)
            T.copy(C_local, C[by * block_M, bx * block_N])

    return main


def test_gemm_counts():
    M = N = K = 1024
    result = Analyzer.analysis(matmul(M, N, K), H100)
    assert result.total_flops == 2 * M * N * K
    # A and B tiles once per K step per block, C once per block: 2 * M*K*(N/128) + M*N halves.
    assert result.total_global_bytes == 2 * (M * K * (N // 128) + N * K * (M // 128) + M * N)
    assert result.expected_bandwidth_GBps == 12.08
    assert result.expected_tflops == round(132 * 128 * 1.98 * 2 / 1e3, 1)
    assert result.estimated_time == max(result.total_global_bytes / 12.08e9, result.total_flops / 66.9e12)


def test_unknown_architecture_has_no_peak():
    dev = types.SimpleNamespace(bandwidth=[750, 12080], compute_capability="75", compute_max_core=40)
    result = Analyzer.analysis(matmul(256, 256, 256), dev)
    assert result.expected_tflops is None and result.estimated_time == result.total_global_bytes / 12.08e9


def test_dynamic_sizes_are_refused():
    with pytest.raises(UserError, match="not a constant"):  # raised at the call: the traceback shows the user's line
        Analyzer.analysis(matmul(T.dynamic("m"), 256, 256), H100)


def test_not_a_kernel():
    # raised at the call: the traceback shows the user's line
    with pytest.raises(UserError, match="expected a prim_func or an IRModule"):
        Analyzer.analysis("main", H100)

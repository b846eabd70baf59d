"""Dynamic shapes on the GPU: one compiled kernel serves every size and matches torch (skipped without a
GPU). Outputs with a dynamic dimension are allocated from the inputs' sizes."""

import dynamic_kernels
import pytest
import torch

import tilelang
import tilelang.language as T

pytestmark = pytest.mark.gpu


vector_add = tilelang.jit(out_idx=[-1])(dynamic_kernels.vector_add)


@pytest.mark.parametrize("n", [0, 1, 1000, 1024, 1000003])
def test_one_elementwise_kernel_serves_every_size(n):
    kernel = vector_add()
    a, b = torch.randn(n, device="cuda"), torch.randn(n, device="cuda")
    torch.testing.assert_close(kernel(a, b), a + b)
    assert vector_add() is kernel  # no size among the compile-time arguments: compiled once


def test_int64_symbol():
    a, b = torch.randn(5000, device="cuda"), torch.randn(5000, device="cuda")
    torch.testing.assert_close(vector_add(symbol_dtype="int64")(a, b), a + b)


def test_tensors_sharing_a_symbol_must_agree():
    with pytest.raises(ValueError) as info:
        vector_add()(torch.randn(1000, device="cuda"), torch.randn(999, device="cuda"))
    text = str(info.value)
    assert "'A'" in text and "'B'" in text and "'n'" in text and "1000" in text and "999" in text


def test_host_launcher_rejects_a_mismatched_output_with_a_clear_error():
    kernel = tilelang.compile(vector_add.factory(), out_idx=None)  # every tensor passed by the caller
    a, b = torch.randn(1000, device="cuda"), torch.randn(1000, device="cuda")
    c = torch.empty(1001, device="cuda")
    with pytest.raises(ValueError) as info:
        kernel(a, b, c)
    text = str(info.value)
    assert "parameters 'A' and 'C' share the dynamic dimension 'n'" in text and "n = 1001" in text
    kernel(a, b, c[:1000])
    torch.testing.assert_close(c[:1000], a + b)


@tilelang.jit(out_idx=[-1])
def matmul_dynamic_m(N, K, block_M=128, block_N=128, block_K=32, num_stages=3, dtype="float16", accum="float"):
    """examples/gemm/example_gemm.py's kernel with a dynamic M."""
    return dynamic_kernels.matmul(T.dynamic("m"), N, K, block_M, block_N, block_K, num_stages, dtype, accum)


@pytest.mark.parametrize("M", [1, 127, 4096])
def test_dynamic_m_gemm_matches_torch(M):
    kernel = matmul_dynamic_m(1024, 512)
    A = torch.randn(M, 512, device="cuda", dtype=torch.float16)
    B = torch.randn(512, 1024, device="cuda", dtype=torch.float16)
    C = kernel(A, B)
    assert C.shape == (M, 1024)
    torch.testing.assert_close(C, (A.float() @ B.float()).half(), rtol=1e-2, atol=1e-1)


def test_dynamic_m_gemm_writes_no_row_past_m():
    kernel = tilelang.compile(matmul_dynamic_m.factory(256, 64), out_idx=None)
    A = torch.randn(100, 64, device="cuda", dtype=torch.float16)
    B = torch.randn(64, 256, device="cuda", dtype=torch.float16)
    rows = torch.full((128, 256), 7.0, device="cuda", dtype=torch.float16)  # the whole last tile
    kernel(A, B, rows[:100])
    torch.testing.assert_close(rows[:100], (A.float() @ B.float()).half(), rtol=1e-2, atol=1e-1)
    assert torch.all(rows[100:] == 7.0)


def test_dynamic_m_gemm_rejects_a_mismatched_k():
    with pytest.raises(ValueError, match=r"parameter 'A'.*shape \[64, 100\] instead of \[m, 512\]"):
        matmul_dynamic_m(1024, 512)(
            torch.randn(64, 100, device="cuda", dtype=torch.float16),
            torch.randn(512, 1024, device="cuda", dtype=torch.float16),
        )


@tilelang.jit(out_idx=[-1])
def copy_all(threads=128):
    """One block copies a whole (m, 64) tensor: a T.Parallel over a dynamic extent, in rounds."""
    M = T.dynamic("m")

    @T.prim_func
    def main(A: T.Tensor((M, 64), "float16"), C: T.Tensor((M, 64), "float16")):
        with T.Kernel(1, threads=threads):
            T.copy(A, C)

    return main


@pytest.mark.parametrize("m", [1, 3, 1000])
def test_copy_of_a_whole_dynamic_tensor(m):
    A = torch.randn(m, 64, device="cuda", dtype=torch.float16)
    assert torch.equal(copy_all()(A), A)


@tilelang.jit(out_idx=[-1])
def matmul_all_dynamic(block_M=64, block_N=64, block_K=32, num_stages=2):
    return dynamic_kernels.matmul(*T.dynamic("m, n, k"), block_M, block_N, block_K, num_stages)


@pytest.mark.parametrize("M,N,K", [(1, 1, 1), (65, 130, 33), (256, 192, 512)])
def test_gemm_with_every_dimension_dynamic(M, N, K):
    A = torch.randn(M, K, device="cuda", dtype=torch.float16)
    B = torch.randn(K, N, device="cuda", dtype=torch.float16)
    torch.testing.assert_close(matmul_all_dynamic()(A, B), (A.float() @ B.float()).half(), rtol=1e-2, atol=1e-1)

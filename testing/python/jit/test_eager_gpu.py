"""Users' code in the eager and prim_func styles runs on the GPU and matches torch (skipped without one)."""

import time

import pytest
import torch

import tilelang
import tilelang.language as T

pytestmark = pytest.mark.gpu


@tilelang.jit
def matmul(A, B, block_M=128, block_N=128, block_K=32, dtype=T.float16, accum_dtype=T.float32):
    M, N, K = T.const("M, N, K")
    A: T.Tensor((M, K), dtype)
    B: T.Tensor((K, N), dtype)
    C = T.empty((M, N), dtype)
    with T.Kernel(T.ceildiv(N, block_N), T.ceildiv(M, block_M), threads=128) as (bx, by):
        A_shared = T.alloc_shared((block_M, block_K), dtype)
        B_shared = T.alloc_shared((block_K, block_N), dtype)
        C_local = T.alloc_fragment((block_M, block_N), accum_dtype)
        T.clear(C_local)
        for k in T.Pipelined(T.ceildiv(K, block_K), num_stages=3):
            T.copy(A[by * block_M, k * block_K], A_shared)
            T.copy(B[k * block_K, bx * block_N], B_shared)
            T.gemm(A_shared, B_shared, C_local)
        T.copy(C_local, C[by * block_M, bx * block_N])
    return C


@pytest.mark.parametrize("M,N,K", [(512, 256, 128), (256, 512, 256)])
def test_eager_gemm(M, N, K):
    a = torch.randn(M, K, device="cuda", dtype=torch.float16)
    b = torch.randn(K, N, device="cuda", dtype=torch.float16)
    c = matmul(a, b)
    torch.testing.assert_close(c, (a.float() @ b.float()).half(), rtol=1e-2, atol=1e-2)
    assert matmul(a, b, block_M=64, block_N=64).shape == (M, N)
    kernel = matmul.compile(M=M, N=N, K=K)
    torch.testing.assert_close(kernel(a, b), c)


@tilelang.jit
def add_and_scale(X, Y, factor: T.float32 = 2.0):
    """Two outputs; a dynamic number of rows."""
    M = T.dynamic("m")
    N = T.const("N")
    X: T.Tensor[(M, N), T.float32]
    Y: T.Tensor[(M, N), T.float32]
    S = T.empty((M, N), T.float32)
    P = T.empty((M, N), T.float32)
    with T.Kernel(T.ceildiv(M, 4), threads=128) as bx:
        for i, j in T.Parallel(4, N):
            S[bx * 4 + i, j] = X[bx * 4 + i, j] + Y[bx * 4 + i, j]
            P[bx * 4 + i, j] = X[bx * 4 + i, j] * factor
    return S, P


@pytest.mark.parametrize("rows", [64, 77, 1000])
def test_eager_two_outputs_dynamic_rows(rows):
    x, y = torch.randn(rows, 128, device="cuda"), torch.randn(rows, 128, device="cuda")
    s, p = add_and_scale(x, y)
    torch.testing.assert_close(s, x + y)
    torch.testing.assert_close(p, x * 2.0)
    assert add_and_scale.compile(x, y) is add_and_scale.compile(torch.randn(5, 128, device="cuda"), y[:5])


def test_eager_wrong_tensor_on_the_gpu():
    a = torch.randn(256, 128, device="cuda", dtype=torch.float16)
    b = torch.randn(128, 256, device="cuda", dtype=torch.float16)
    matmul(a, b)
    with pytest.raises(ValueError, match=r"parameter 'A' \(argument #0\).*dtype float32 instead of float16"):
        matmul(a.float(), b)
    with pytest.raises(ValueError, match=r"parameter 'B' \(argument #1\).*shape \[64, 256\] instead of \[128, 256\]"):
        matmul(a, b[:64])


@tilelang.jit(out_idx=-1)
@T.prim_func
def doubled(A: T.Tensor((1024,), "float32"), B: T.Tensor((1024,), "float32")):
    with T.Kernel(8, threads=128) as bx:
        for i in T.Parallel(128):
            B[bx * 128 + i] = A[bx * 128 + i] * 2.0


def test_jit_out_idx_on_a_prim_func():
    a = torch.randn(1024, device="cuda")
    torch.testing.assert_close(doubled(a), a * 2)
    torch.testing.assert_close(doubled()(a), a * 2)


def test_disable_cache_still_compiles_and_runs():
    tilelang.disable_cache()
    try:

        @tilelang.jit
        def negate(A):
            N = T.const("N")
            A: T.Tensor((N,), T.float32)
            B = T.empty((N,), T.float32)
            with T.Kernel(T.ceildiv(N, 128), threads=128) as bx:
                for i in T.Parallel(128):
                    B[bx * 128 + i] = -A[bx * 128 + i]
            return B

        a = torch.randn(4096, device="cuda")
        torch.testing.assert_close(negate(a), -a)
    finally:
        tilelang.enable_cache()


def _gemm_prim_func(M, N, K):
    @T.prim_func
    def main(A: T.Tensor((M, K), "float16"), B: T.Tensor((K, N), "float16"), C: T.Tensor((M, N), "float16")):
        with T.Kernel(T.ceildiv(N, 128), T.ceildiv(M, 128), threads=128) as (bx, by):
            A_shared = T.alloc_shared((128, 32), "float16")
            B_shared = T.alloc_shared((32, 128), "float16")
            C_local = T.alloc_fragment((128, 128), "float32")
            T.clear(C_local)
            for k in T.Pipelined(T.ceildiv(K, 32), num_stages=3):
                T.copy(A[by * 128, k * 32], A_shared)
                T.copy(B[k * 32, bx * 128], B_shared)
                T.gemm(A_shared, B_shared, C_local)
            T.copy(C_local, C[by * 128, bx * 128])

    return main


class Linear(torch.nn.Module):
    """Compiles its kernel on every forward, as users' modules do."""

    def __init__(self, K, N):
        super().__init__()
        self.weight = torch.nn.Parameter(torch.randn(K, N, device="cuda", dtype=torch.float16), requires_grad=False)
        self.func = _gemm_prim_func(1024, N, K)

    def forward(self, x):
        kernel = tilelang.compile(self.func, out_idx=[-1])
        return kernel(x, self.weight)


def test_compile_on_every_forward_is_cheap():
    model = Linear(512, 1024)
    x = torch.randn(1024, 512, device="cuda", dtype=torch.float16)
    y = model(x)
    torch.testing.assert_close(y, (x.float() @ model.weight.float()).half(), rtol=1e-2, atol=1e-2)
    torch.cuda.synchronize()
    times = []
    for _ in range(10):
        start = time.perf_counter()
        model(x)
        times.append(time.perf_counter() - start)
    torch.cuda.synchronize()
    assert min(times) < 3e-3, f"a forward took {min(times) * 1e3:.2f} ms"

"""Kernels run on the GPU and match torch on random inputs (skipped without a GPU)."""

import pytest
import torch

import tilelang
import tilelang.language as T

pytestmark = pytest.mark.gpu


@tilelang.jit(out_idx=[-1])
def copy_2d(M, N, block_M, block_N, threads, dtype, via):
    @T.prim_func
    def main(A: T.Tensor((M, N), dtype), B: T.Tensor((M, N), dtype)):
        with T.Kernel(T.ceildiv(N, block_N), T.ceildiv(M, block_M), threads=threads) as (bx, by):
            if via == "shared":
                tile = T.alloc_shared((block_M, block_N), dtype)
            elif via == "fragment":
                tile = T.alloc_fragment((block_M, block_N), dtype)
            T.copy(A[by * block_M, bx * block_N], tile)
            T.copy(tile, B[by * block_M, bx * block_N])

    return main


@pytest.mark.parametrize("via", ["shared", "fragment"])
@pytest.mark.parametrize("dtype", ["float16", "bfloat16", "float32", "int8", "float8_e4m3fn"])
@pytest.mark.parametrize("M,N", [(256, 256), (1000, 777), (33, 130)])
def test_copy_roundtrip(via, dtype, M, N):
    A = torch.randn(M, N, device="cuda").mul(8).to(getattr(torch, dtype))
    B = copy_2d(M, N, 64, 64, 128, dtype, via)(A)
    assert torch.equal(
        B.view(torch.uint8) if dtype.startswith("float8") else B,
        A.view(torch.uint8) if dtype.startswith("float8") else A,
    )


@tilelang.jit(out_idx=[-1])
def big_shared(rows):
    @T.prim_func
    def main(A: T.Tensor((rows, 128), "float32"), B: T.Tensor((rows, 128), "float32")):
        with T.Kernel(1, threads=256):
            s = T.alloc_shared((rows, 128), "float32")
            t = T.alloc_shared((rows, 128), "float32")
            T.copy(A, s)
            for i, j in T.Parallel(rows, 128):
                t[i, j] = s[rows - 1 - i, j] * 2.0
            T.copy(t, B)

    return main


def test_more_than_48kb_of_shared_memory():
    A = torch.randn(160, 128, device="cuda")  # 2 x 80 KiB
    torch.testing.assert_close(big_shared(160)(A), A.flip(0) * 2)


@tilelang.jit(out_idx=[-1])
def two_kernels(N):
    @T.prim_func
    def main(A: T.Tensor((N,), "float32"), Tmp: T.Tensor((N,), "float32"), B: T.Tensor((N,), "float32")):
        with T.Kernel(T.ceildiv(N, 256), threads=(64, 4)) as bx:
            for i in T.Parallel(256):
                Tmp[bx * 256 + i] = T.exp2(A[bx * 256 + i])
        with T.Kernel(T.ceildiv(N, 128), threads=128) as bx:
            for i in T.Parallel(128):
                B[bx * 128 + i] = Tmp[N - 1 - (bx * 128 + i)] + 1.0

    return main


def test_two_kernels_and_thread_tuple():
    A = torch.randn(5000, device="cuda")
    tmp = torch.empty_like(A)
    B = two_kernels(5000)(A, tmp)
    torch.testing.assert_close(B, torch.exp2(A).flip(0) + 1)


@tilelang.jit(out_idx=[-1])
def scalars(N):
    @T.prim_func
    def main(A: T.Tensor((N,), "float32"), S: T.Tensor((4,), "float32"), B: T.Tensor((N,), "float32")):
        with T.Kernel(T.ceildiv(N, 128), threads=128) as bx:
            acc = T.alloc_var("float32", init=0)
            loc = T.alloc_local((4,), "float32")
            for k in T.serial(4):
                acc = acc + S[k]
            for k in T.unroll(4):
                loc[k] = S[k] * 2.0
            for i in T.Parallel(128):
                y = bx * 128 + i
                B[y] = T.if_then_else(A[y] > 0, A[y] * acc, loc[3])

    return main


def test_alloc_var_local_and_if_then_else():
    A = torch.randn(1000, device="cuda")
    S = torch.randn(4, device="cuda")
    ref = torch.where(A > 0, A * S.sum(), S[3] * 2)
    torch.testing.assert_close(scalars(1000)(A, S), ref)


def test_runs_on_torch_current_stream_and_in_cuda_graphs():
    A = torch.randn(256, 256, device="cuda", dtype=torch.float16)
    kernel = copy_2d(256, 256, 64, 64, 128, "float16", "shared")
    B = torch.empty_like(A)
    kernel(A)  # warm up outside the capture (loads the module)
    stream = torch.cuda.Stream()
    with torch.cuda.stream(stream):
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph, stream=stream):  # launching on another stream would fail capture
            out = kernel(A)
            B.copy_(out)
    A.copy_(torch.randn_like(A))
    graph.replay()
    torch.cuda.synchronize()
    assert torch.equal(B, A)


def test_wrong_device_tensor_is_rejected_before_launch():
    kernel = copy_2d(64, 64, 64, 64, 128, "float16", "shared")
    with pytest.raises(ValueError, match="instead of a CUDA device"):
        kernel(torch.randn(64, 64, dtype=torch.float16))

"""The 20-line GEMM: C = A @ B on tensor cores, checked against torch.

Tiles of A and B are staged through shared memory; each block accumulates its C tile in registers
(a fragment laid out for mma.sync) and writes it back once.
"""

import argparse

import torch

import tilelang
import tilelang.language as T


@tilelang.jit(out_idx=[-1])
def matmul(
    M, N, K, block_M, block_N, block_K, dtype="float16", accum_dtype="float", threads=128, num_stages=3, rasterize=0
):
    @T.prim_func
    def main(A: T.Tensor((M, K), dtype), B: T.Tensor((K, N), dtype), C: T.Tensor((M, N), dtype)):
        with T.Kernel(T.ceildiv(N, block_N), T.ceildiv(M, block_M), threads=threads) as (bx, by):
            A_shared = T.alloc_shared((block_M, block_K), dtype)
            B_shared = T.alloc_shared((block_K, block_N), dtype)
            C_local = T.alloc_fragment((block_M, block_N), accum_dtype)
            # Visit blocks in panels of `rasterize` grid rows, so that neighbours share A and B in L2
            # (without the call, the compiler picks panels for a GEMM like this one itself).
            if rasterize > 0:
                T.use_swizzle(panel_size=rasterize)
            T.clear(C_local)
            for k in T.Pipelined(T.ceildiv(K, block_K), num_stages=num_stages):
                T.copy(A[by * block_M, k * block_K], A_shared)
                T.copy(B[k * block_K, bx * block_N], B_shared)
                T.gemm(A_shared, B_shared, C_local)
            T.copy(C_local, C[by * block_M, bx * block_N])

    return main


def main(M=1024, N=1024, K=1024, block_M=128, block_N=128, block_K=32, device=None):
    device = device or ("cuda" if torch.cuda.is_available() else "cpu")
    with tilelang.use_target(device):  # the kernels compile for where the tensors live
        A = torch.randn(M, K, device=device, dtype=torch.float16)
        B = torch.randn(K, N, device=device, dtype=torch.float16)
        C = matmul(M, N, K, block_M, block_N, block_K)(A, B)
        torch.testing.assert_close(C, A @ B, rtol=1e-2, atol=1e-1)
        print("gemm: all checks passed")


if __name__ == "__main__":
    parser = argparse.ArgumentParser()
    parser.add_argument("--m", type=int, default=1024)
    parser.add_argument("--n", type=int, default=1024)
    parser.add_argument("--k", type=int, default=1024)
    parser.add_argument("--device", choices=["cuda", "cpu"], help="default: cuda when torch sees a GPU, else cpu")
    args = parser.parse_args()
    main(args.m, args.n, args.k, device=args.device)

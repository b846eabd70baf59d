"""Element-wise kernels: a vector add, and a fused multiply-add with ReLU, checked against torch.

Sizes need not be multiples of the tile: the compiler predicates the last tile's accesses.
"""

import argparse

import torch

import tilelang
import tilelang.language as T


@tilelang.jit(out_idx=[-1])
def vector_add(N, block=1024, threads=256, dtype="float32"):
    @T.prim_func
    def main(A: T.Tensor((N,), dtype), B: T.Tensor((N,), dtype), C: T.Tensor((N,), dtype)):
        with T.Kernel(T.ceildiv(N, block), threads=threads) as bx:
            for i in T.Parallel(block):
                C[bx * block + i] = A[bx * block + i] + B[bx * block + i]

    return main


@tilelang.jit(out_idx=[-1])
def fused_scale_add_relu(M, N, block_M=32, block_N=128, threads=128, dtype="float16"):
    """C = relu(A * scale[None, :] + B), in tiles staged through shared memory and registers."""

    @T.prim_func
    def main(
        A: T.Tensor((M, N), dtype), B: T.Tensor((M, N), dtype), scale: T.Tensor((N,), dtype), C: T.Tensor((M, N), dtype)
    ):
        with T.Kernel(T.ceildiv(N, block_N), T.ceildiv(M, block_M), threads=threads) as (bx, by):
            A_shared = T.alloc_shared((block_M, block_N), dtype)
            C_local = T.alloc_fragment((block_M, block_N), "float32")
            T.copy(A[by * block_M, bx * block_N], A_shared)
            for i, j in T.Parallel(block_M, block_N):
                y = by * block_M + i
                x = bx * block_N + j
                v = T.Cast("float32", A_shared[i, j]) * T.Cast("float32", scale[x]) + T.Cast("float32", B[y, x])
                C_local[i, j] = T.max(v, T.float32(0))
            T.copy(C_local, C[by * block_M, bx * block_N])

    return main


def main(N=1000003, M=1000, K=1000, target="auto", device=None):
    device = device or ("cuda" if torch.cuda.is_available() else "cpu")
    with tilelang.use_target(device):  # the kernels compile for where the tensors live
        a = torch.randn(N, device=device)
        b = torch.randn(N, device=device)
        c = vector_add(N)(a, b)
        torch.testing.assert_close(c, a + b)

        A = torch.randn(M, K, device=device, dtype=torch.float16)
        B = torch.randn(M, K, device=device, dtype=torch.float16)
        s = torch.randn(K, device=device, dtype=torch.float16)
        C = fused_scale_add_relu(M, K)(A, B, s)
        ref = torch.relu(A.float() * s.float()[None, :] + B.float()).half()
        torch.testing.assert_close(C, ref, rtol=1e-2, atol=1e-2)
        print("elementwise: all checks passed")


if __name__ == "__main__":
    parser = argparse.ArgumentParser()
    parser.add_argument("--n", type=int, default=1000003)
    parser.add_argument("--device", choices=["cuda", "cpu"], help="default: cuda when torch sees a GPU, else cpu")
    args = parser.parse_args()
    main(N=args.n, device=args.device)

"""RMSNorm over rows: B = A / sqrt(mean(A^2) + eps) * W, checked against torch.

Each block normalizes `blk_m` rows held in registers: one read of A, a row reduction (in-thread,
warp shuffles, then across warps), one write of B.
"""

import argparse

import torch

import tilelang
import tilelang.language as T


@tilelang.jit(out_idx=[-1])
def rms_norm(M, N, blk_m=1, threads=256, eps=1e-6, dtype="float16"):
    @T.prim_func
    def main(A: T.Tensor((M, N), dtype), W: T.Tensor((N,), dtype), B: T.Tensor((M, N), dtype)):
        with T.Kernel(T.ceildiv(M, blk_m), threads=threads) as bx:
            A_local = T.alloc_fragment((blk_m, N), "float32")
            A_pow = T.alloc_fragment((blk_m, N), "float32")
            A_powsum = T.alloc_fragment((blk_m,), "float32")
            T.copy(A[bx * blk_m : (bx + 1) * blk_m, :], A_local)
            for i, j in T.Parallel(blk_m, N):
                A_pow[i, j] = A_local[i, j] * A_local[i, j]
            T.reduce_sum(A_pow, A_powsum, dim=1)
            for i in T.Parallel(blk_m):
                A_powsum[i] = T.rsqrt(A_powsum[i] / N + eps)
            for i, j in T.Parallel(blk_m, N):
                B[bx * blk_m + i, j] = A_local[i, j] * A_powsum[i] * W[j]

    return main


def ref_rms_norm(A, W, eps=1e-6):
    a = A.float()
    return (a * torch.rsqrt(a.pow(2).mean(-1, keepdim=True) + eps) * W.float()).to(A.dtype)


def main(M=1000, N=4096, blk_m=1, device=None):
    device = device or ("cuda" if torch.cuda.is_available() else "cpu")
    with tilelang.use_target(device):  # the kernels compile for where the tensors live
        A = torch.randn(M, N, device=device, dtype=torch.float16)
        W = torch.randn(N, device=device, dtype=torch.float16)
        B = rms_norm(M, N, blk_m)(A, W)
        torch.testing.assert_close(B, ref_rms_norm(A, W), rtol=1e-2, atol=1e-2)
        print("rms_norm: all checks passed")


if __name__ == "__main__":
    parser = argparse.ArgumentParser()
    parser.add_argument("--m", type=int, default=1000)
    parser.add_argument("--n", type=int, default=4096)
    parser.add_argument("--device", choices=["cuda", "cpu"], help="default: cuda when torch sees a GPU, else cpu")
    args = parser.parse_args()
    main(args.m, args.n, device=args.device)

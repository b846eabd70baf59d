"""2-D transpose through shared memory, checked against torch.

Each block loads a tile of A into shared memory with coalesced, vectorized reads, then writes the
transposed tile to B, again coalesced along B's rows. Sizes need not be multiples of the tile.
"""

import argparse

import torch

import tilelang
import tilelang.language as T


@tilelang.jit(out_idx=[-1])
def transpose(M, N, block_M=64, block_N=64, threads=256, dtype="float16"):
    @T.prim_func
    def main(A: T.Tensor((M, N), dtype), B: T.Tensor((N, M), dtype)):
        with T.Kernel(T.ceildiv(N, block_N), T.ceildiv(M, block_M), threads=threads) as (bx, by):
            tile = T.alloc_shared((block_M, block_N), dtype)
            T.copy(A[by * block_M, bx * block_N], tile)
            for i, j in T.Parallel(block_N, block_M):
                B[bx * block_N + i, by * block_M + j] = tile[j, i]

    return main


def main(M=1000, N=777, dtype="float16", device=None):
    device = device or ("cuda" if torch.cuda.is_available() else "cpu")
    with tilelang.use_target(device):  # the kernels compile for where the tensors live
        A = torch.randn(M, N, device=device).to(getattr(torch, dtype))
        B = transpose(M, N, dtype=dtype)(A)
        torch.testing.assert_close(B, A.t().contiguous(), rtol=0, atol=0)
        print("transpose: all checks passed")


if __name__ == "__main__":
    parser = argparse.ArgumentParser()
    parser.add_argument("--m", type=int, default=1000)
    parser.add_argument("--n", type=int, default=777)
    parser.add_argument("--device", choices=["cuda", "cpu"], help="default: cuda when torch sees a GPU, else cpu")
    args = parser.parse_args()
    main(args.m, args.n, device=args.device)

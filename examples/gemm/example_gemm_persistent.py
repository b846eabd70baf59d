"""A persistent GEMM: one block per SM walks over the C tiles, checked against torch.

The kernel of example_gemm.py inside a loop over tiles. On Hopper the producer warpgroup runs on
into the next tile while the consumers write this one's C, so the pipeline does not drain and
refill between tiles. Tiles are visited in groups of `group_m` tile rows (neighbours share A and B
in L2).
"""

import argparse
import os

import torch

import tilelang
import tilelang.language as T


@tilelang.jit(out_idx=[-1])
def matmul_persistent(
    M, N, K, block_M, block_N, block_K, num_sms, dtype="float16", accum_dtype="float", threads=256, num_stages=4,
    group_m=8,
):  # fmt: skip
    tiles_m, tiles_n = T.ceildiv(M, block_M), T.ceildiv(N, block_N)
    total = tiles_m * tiles_n

    @T.prim_func
    def main(A: T.Tensor((M, K), dtype), B: T.Tensor((K, N), dtype), C: T.Tensor((M, N), dtype)):
        with T.Kernel(num_sms, threads=threads) as sm:
            A_shared = T.alloc_shared((block_M, block_K), dtype)
            B_shared = T.alloc_shared((block_K, block_N), dtype)
            C_local = T.alloc_fragment((block_M, block_N), accum_dtype)
            for t in T.serial(T.ceildiv(total, num_sms)):
                tile = t * num_sms + sm
                if tile < total:
                    # Groups of `group_m` tile rows, column by column inside a group.
                    first_m = tile // (group_m * tiles_n) * group_m
                    rows = T.min(tiles_m - first_m, group_m)
                    by = first_m + tile % (group_m * tiles_n) % rows
                    bx = tile % (group_m * tiles_n) // rows
                    T.clear(C_local)
                    for k in T.Pipelined(T.ceildiv(K, block_K), num_stages=num_stages):
                        T.copy(A[by * block_M, k * block_K], A_shared)
                        T.copy(B[k * block_K, bx * block_N], B_shared)
                        T.gemm(A_shared, B_shared, C_local)
                    T.copy(C_local, C[by * block_M, bx * block_N])

    return main


def main(M=1024, N=1024, K=1024, block_M=128, block_N=256, block_K=64, threads=256, num_stages=4, device=None):
    device = device or ("cuda" if torch.cuda.is_available() else "cpu")
    with tilelang.use_target(device):  # the kernels compile for where the tensors live
        # One block per SM (per core on the CPU), each walking its share of the tiles.
        num_sms = torch.cuda.get_device_properties(0).multi_processor_count if device == "cuda" else os.cpu_count()
        A = torch.randn(M, K, device=device, dtype=torch.float16)
        B = torch.randn(K, N, device=device, dtype=torch.float16)
        kernel = matmul_persistent(M, N, K, block_M, block_N, block_K, num_sms, threads=threads, num_stages=num_stages)
        torch.testing.assert_close(kernel(A, B), A @ B, rtol=1e-2, atol=1e-1)
        print("persistent gemm: all checks passed")


if __name__ == "__main__":
    parser = argparse.ArgumentParser()
    parser.add_argument("--m", type=int, default=1024)
    parser.add_argument("--n", type=int, default=1024)
    parser.add_argument("--k", type=int, default=1024)
    parser.add_argument("--device", choices=["cuda", "cpu"], help="default: cuda when torch sees a GPU, else cpu")
    args = parser.parse_args()
    main(args.m, args.n, args.k, device=args.device)

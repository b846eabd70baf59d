"""fp8 GEMM with DeepSeek-V3 block scales (as DeepGEMM computes it), checked against torch.

A (M x K, activations) has one scale per row and 128-wide K block (1 x 128), B (N x K, weights)
one per 128 x 128 block, both e4m3 and K-major. The K loop steps one scale block (block_K = 128)
at a time: the block's partial product runs on the tensor cores into a fresh fp32 fragment, which
is then multiplied by its row's A scale and its column's B scale and added into a second fp32
accumulator on the CUDA cores. Hopper's fp8 wgmma keeps only about 14 bits of mantissa while it
accumulates, so promoting every 128 deep keeps the sum's precision as well as applying the scales
("2x accumulation"); the tensor cores accumulate at most 4 instructions deep. On Hopper the
compiler has the two consumer warpgroups of a 128-row block take turns at the tensor cores, so
that one's promotion runs while the other's product does.

The A scales arrive K-block-major, (ceildiv(K, 128), M), as DeepGEMM stores them: a block's
block_M scales are contiguous, one TMA load per stage beside the A and B tiles. The B scales of a
block's columns for the whole K are loaded once, before the loop.
"""

import argparse

import torch
from fp8_quant import BLOCK, assert_close, blocky_randn, quantize_1x128, quantize_128x128, reference_blockscale

import tilelang
import tilelang.language as T
from tilelang.profiler import do_bench


@tilelang.jit(out_idx=[-1])
def gemm_fp8_blockscale(
    M, N, K, block_M=128, block_N=128, out_dtype="bfloat16", threads=256, num_stages=4, rasterize=8,
    in_dtype="float8_e4m3fn",
):  # fmt: skip
    # A block's columns must share their B scales' rows: block_N divides 128 or is a multiple of it.
    assert BLOCK % block_N == 0 or block_N % BLOCK == 0, f"block_N = {block_N} straddles a 128-row B scale block"
    block_K = BLOCK
    k_blocks = T.ceildiv(K, block_K)
    sb_rows = T.ceildiv(block_N, BLOCK)  # B scale rows a block of columns reads

    @T.prim_func
    def main(
        A: T.Tensor((M, K), in_dtype),
        B: T.Tensor((N, K), in_dtype),
        scales_a: T.Tensor((k_blocks, M), "float32"),
        scales_b: T.Tensor((T.ceildiv(N, BLOCK), k_blocks), "float32"),
        C: T.Tensor((M, N), out_dtype),
    ):
        with T.Kernel(T.ceildiv(N, block_N), T.ceildiv(M, block_M), threads=threads) as (bx, by):
            A_shared = T.alloc_shared((block_M, block_K), in_dtype)
            B_shared = T.alloc_shared((block_N, block_K), in_dtype)
            scale_a_shared = T.alloc_shared((block_M,), "float32")
            scale_b_shared = T.alloc_shared((sb_rows, k_blocks), "float32")
            C_block = T.alloc_fragment((block_M, block_N), "float32")  # one K block's product
            C_local = T.alloc_fragment((block_M, block_N), "float32")  # the scaled sum
            C_shared = T.alloc_shared((block_M, block_N), out_dtype)
            if rasterize > 0:
                T.use_swizzle(panel_size=rasterize)
            first_sb = bx * block_N // BLOCK
            T.copy(scales_b[first_sb, 0], scale_b_shared)
            T.clear(C_local)
            for k in T.Pipelined(k_blocks, num_stages=num_stages):
                T.copy(A[by * block_M, k * block_K], A_shared)
                T.copy(B[bx * block_N, k * block_K], B_shared)
                T.copy(scales_a[k, by * block_M], scale_a_shared)
                T.gemm(A_shared, B_shared, C_block, transpose_B=True, clear_accum=True)
                for i, j in T.Parallel(block_M, block_N):
                    sb = scale_b_shared[(bx * block_N + j) // BLOCK - first_sb, k]
                    C_local[i, j] += C_block[i, j] * (scale_a_shared[i] * sb)
            # Through shared memory: the rows leave in 16-byte vectors (C_local is not a gemm
            # accumulator, which the compiler would stage by itself).
            T.copy(C_local, C_shared)
            T.copy(C_shared, C[by * block_M, bx * block_N])

    return main


def main(M=4096, N=4096, K=4096, block_M=128, block_N=128, threads=256, num_stages=4, out_dtype="bfloat16",
         device=None):  # fmt: skip
    device = device or ("cuda" if torch.cuda.is_available() else "cpu")
    with tilelang.use_target(device):  # the kernels compile for where the tensors live
        a_fp8, scales_a = quantize_1x128(blocky_randn(M, K, 1, BLOCK, device))
        b_fp8, scales_b = quantize_128x128(blocky_randn(N, K, BLOCK, BLOCK, device))
        scales_a_t = scales_a.T.contiguous()  # (K blocks, M): the kernel's layout
        kernel = gemm_fp8_blockscale(M, N, K, block_M, block_N, out_dtype, threads, num_stages)
        c = kernel(a_fp8, b_fp8, scales_a_t, scales_b)
        assert c.dtype == getattr(torch, out_dtype)
        assert_close(c, reference_blockscale(a_fp8, scales_a, b_fp8, scales_b))
        ms = do_bench(lambda: kernel(a_fp8, b_fp8, scales_a_t, scales_b), return_mode="median", device=device)
        print(f"fp8 gemm, 1x128 / 128x128 block scales, {M} x {N} x {K}: {2 * M * N * K / ms / 1e9:.0f} TFLOP/s")
        print("fp8 gemm, block scales: all checks passed")


if __name__ == "__main__":
    parser = argparse.ArgumentParser()
    parser.add_argument("--m", type=int, default=4096)
    parser.add_argument("--n", type=int, default=4096)
    parser.add_argument("--k", type=int, default=4096)
    parser.add_argument("--out-dtype", default="bfloat16", choices=["bfloat16", "float16"])
    parser.add_argument("--device", choices=["cuda", "cpu"], help="default: cuda when torch sees a GPU, else cpu")
    args = parser.parse_args()
    main(args.m, args.n, args.k, out_dtype=args.out_dtype, device=args.device)

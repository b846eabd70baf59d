"""fp8 GEMM with per-tensor scales: C = (A @ B^T) * scale_a * scale_b, checked against torch.

A (M x K) and B (N x K) are e4m3, both K-major ("TN", the layout cuBLASLt's fp8 GEMM takes, and
the one Hopper's fp8 wgmma reads from shared memory); each block accumulates its C tile in fp32
registers, multiplies it by the two scales (float32 tensors of one element, as torch._scaled_mm
takes them, so a scale computed on the GPU needs no copy to the host) and writes it as bf16/fp16.
On sm_90a the gemm is a wgmma fed by TMA from a producer warpgroup; on sm_89 an fp8 mma.sync.
`gemm_fp8_persistent` is the same GEMM with one block per SM walking the tiles (`--persistent`).
`in_dtype="float8_e5m2"` runs the same way (A and B share the one fp8 type).
"""

import argparse
import os

import torch
from fp8_quant import assert_close, quantize_per_tensor, reference_per_tensor

import tilelang
import tilelang.language as T
from tilelang.profiler import do_bench


@tilelang.jit(out_idx=[-1])
def gemm_fp8(
    M, N, K, block_M=128, block_N=256, block_K=128, out_dtype="bfloat16", threads=256, num_stages=3, rasterize=8,
    in_dtype="float8_e4m3fn",
):  # fmt: skip
    @T.prim_func
    def main(
        A: T.Tensor((M, K), in_dtype),
        B: T.Tensor((N, K), in_dtype),
        scale_a: T.Tensor((1,), "float32"),
        scale_b: T.Tensor((1,), "float32"),
        C: T.Tensor((M, N), out_dtype),
    ):
        with T.Kernel(T.ceildiv(N, block_N), T.ceildiv(M, block_M), threads=threads) as (bx, by):
            # 128-byte rows of fp8 (block_K = 128): the widest shared-memory swizzle wgmma reads.
            A_shared = T.alloc_shared((block_M, block_K), in_dtype)
            B_shared = T.alloc_shared((block_N, block_K), in_dtype)
            C_local = T.alloc_fragment((block_M, block_N), "float32")
            if rasterize > 0:
                T.use_swizzle(panel_size=rasterize)
            T.clear(C_local)
            for k in T.Pipelined(T.ceildiv(K, block_K), num_stages=num_stages):
                T.copy(A[by * block_M, k * block_K], A_shared)
                T.copy(B[bx * block_N, k * block_K], B_shared)
                T.gemm(A_shared, B_shared, C_local, transpose_B=True)
            # Per-tensor scales factor out of the sum: applied once, to the fp32 result.
            for i, j in T.Parallel(block_M, block_N):
                C_local[i, j] = C_local[i, j] * (scale_a[0] * scale_b[0])
            T.copy(C_local, C[by * block_M, bx * block_N])

    return main


@tilelang.jit(out_idx=[-1])
def gemm_fp8_persistent(
    M, N, K, num_sms, block_M=128, block_N=256, block_K=128, out_dtype="bfloat16", threads=256, num_stages=4,
    group_m=8, in_dtype="float8_e4m3fn",
):  # fmt: skip
    """The same GEMM with one block per SM walking over the C tiles (as examples/gemm's persistent
    kernel): on Hopper the producer warpgroup loads the next tile's stages while the consumers
    scale and write this one, so the pipeline does not drain between tiles. Tiles go in groups of
    `group_m` tile rows, column by column inside a group (neighbours share A and B in L2)."""
    tiles_m, tiles_n = T.ceildiv(M, block_M), T.ceildiv(N, block_N)
    total = tiles_m * tiles_n

    @T.prim_func
    def main(
        A: T.Tensor((M, K), in_dtype),
        B: T.Tensor((N, K), in_dtype),
        scale_a: T.Tensor((1,), "float32"),
        scale_b: T.Tensor((1,), "float32"),
        C: T.Tensor((M, N), out_dtype),
    ):
        with T.Kernel(num_sms, threads=threads) as sm:
            A_shared = T.alloc_shared((block_M, block_K), in_dtype)
            B_shared = T.alloc_shared((block_N, block_K), in_dtype)
            C_local = T.alloc_fragment((block_M, block_N), "float32")
            for t in T.serial(T.ceildiv(total, num_sms)):
                tile = t * num_sms + sm
                if tile < total:
                    first_m = tile // (group_m * tiles_n) * group_m
                    rows = T.min(tiles_m - first_m, group_m)
                    by = first_m + tile % (group_m * tiles_n) % rows
                    bx = tile % (group_m * tiles_n) // rows
                    T.clear(C_local)
                    for k in T.Pipelined(T.ceildiv(K, block_K), num_stages=num_stages):
                        T.copy(A[by * block_M, k * block_K], A_shared)
                        T.copy(B[bx * block_N, k * block_K], B_shared)
                        T.gemm(A_shared, B_shared, C_local, transpose_B=True)
                    for i, j in T.Parallel(block_M, block_N):
                        C_local[i, j] = C_local[i, j] * (scale_a[0] * scale_b[0])
                    T.copy(C_local, C[by * block_M, bx * block_N])

    return main


def main(M=4096, N=4096, K=4096, block_M=128, block_N=256, block_K=128, threads=256, num_stages=3,
         out_dtype="bfloat16", persistent=False, device=None):  # fmt: skip
    device = device or ("cuda" if torch.cuda.is_available() else "cpu")
    with tilelang.use_target(device):  # the kernels compile for where the tensors live
        a_fp8, scale_a = quantize_per_tensor(torch.randn(M, K, device=device))
        b_fp8, scale_b = quantize_per_tensor(torch.randn(N, K, device=device))
        if persistent:
            cpu = device == "cpu"  # one block per SM (per core on the CPU)
            num_sms = os.cpu_count() if cpu else torch.cuda.get_device_properties(0).multi_processor_count
            kernel = gemm_fp8_persistent(M, N, K, num_sms, block_M, block_N, block_K, out_dtype, threads, num_stages)
        else:
            kernel = gemm_fp8(M, N, K, block_M, block_N, block_K, out_dtype, threads, num_stages)
        c = kernel(a_fp8, b_fp8, scale_a, scale_b)
        assert c.dtype == getattr(torch, out_dtype)
        assert_close(c, reference_per_tensor(a_fp8, scale_a, b_fp8, scale_b), tensor_core_depth=K)
        ms = do_bench(lambda: kernel(a_fp8, b_fp8, scale_a, scale_b), return_mode="median", device=device)
        what = "fp8 gemm, per-tensor scales" + (", persistent" if persistent else "")
        print(f"{what}, {M} x {N} x {K}: {2 * M * N * K / ms / 1e9:.0f} TFLOP/s")
        print(f"{what}: all checks passed")


if __name__ == "__main__":
    parser = argparse.ArgumentParser()
    parser.add_argument("--m", type=int, default=4096)
    parser.add_argument("--n", type=int, default=4096)
    parser.add_argument("--k", type=int, default=4096)
    parser.add_argument("--out-dtype", default="bfloat16", choices=["bfloat16", "float16"])
    parser.add_argument("--persistent", action="store_true", help="one block per SM walking the tiles")
    parser.add_argument("--device", choices=["cuda", "cpu"], help="default: cuda when torch sees a GPU, else cpu")
    args = parser.parse_args()
    main(args.m, args.n, args.k, out_dtype=args.out_dtype, persistent=args.persistent, device=args.device)

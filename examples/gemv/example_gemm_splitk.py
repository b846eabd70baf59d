"""Split-K GEMM, C = A @ B for skinny M (a few decode tokens, M = 16..64), checked against torch.

With M = 32 and N = 4096, a GEMM cut into 32 x 64 tiles of C has 64 tiles: one block each would
leave half of the H200's 132 SMs idle while the busy ones walk all of K, and this GEMM is bound by
reading B (2 * K * N bytes, versus 2 * M * K for A), which needs every SM's loads in flight. Split-K
cuts K into `split_k` ranges as well, so tiles * split_k blocks share the work; each block multiplies
its range into an fp32 tile, and the partial tiles are added up:

- "atomic": a first kernel zeroes C (fp32), then each block adds its tile with `T.atomic_add`
  (one atomic per element, done in L2; M * N * split_k of them, small beside the B traffic). The
  order of the additions varies from run to run, so the last bits of C do too.
- "reduce": each block writes its tile to a workspace (`T.alloc_global`, split_k x M x N fp32), and
  a second kernel sums the split_k tiles of each element in a fixed order and writes C in fp16:
  deterministic, for one more (small) pass over the partials.

The block's own loop is the plain GEMM's (examples/gemm): on sm_90a a 64-row tile runs on wgmma fed
by TMA from a producer warpgroup, smaller ones (too few rows for wgmma) on mma.sync fed by cp.async.
`choose_split_k` picks the largest split that still runs in one wave; benchmark/gemv compares
splits on the GPU.
"""

import argparse
import math

import torch
from skinny_common import PEAK_HBM_GBS, gbs, num_sms, randn, ref_matmul, time_ms

import tilelang
import tilelang.language as T


@tilelang.jit(out_idx=[-1])
def matmul_splitk(
    M,
    N,
    K,
    block_M,
    block_N,
    block_K,
    split_k,
    combine="atomic",
    threads=128,
    num_stages=4,
    dtype="float16",
    accum_dtype="float",
):
    assert combine in ("atomic", "reduce"), f"combine is 'atomic' or 'reduce', not {combine!r}"
    # K blocks per split, rounded up: the last split's loads past K read zeros (and add nothing).
    k_steps = math.ceil(math.ceil(K / block_K) / split_k)
    num_stages = min(num_stages, k_steps)  # (a deeper pipeline than the loop overlaps nothing more)
    grid_n, grid_m = T.ceildiv(N, block_N), T.ceildiv(M, block_M)

    @T.macro
    def multiply_range(A, B, bx, by, bz, C_local):
        """C_local = A[by tile, split bz's K range] @ B[same K range, bx tile], in fp32."""
        A_shared = T.alloc_shared((block_M, block_K), dtype)
        B_shared = T.alloc_shared((block_K, block_N), dtype)
        T.clear(C_local)
        for k in T.Pipelined(k_steps, num_stages=num_stages):
            T.copy(A[by * block_M, (bz * k_steps + k) * block_K], A_shared)
            T.copy(B[(bz * k_steps + k) * block_K, bx * block_N], B_shared)
            T.gemm(A_shared, B_shared, C_local)

    @T.prim_func
    def main_atomic(A: T.Tensor((M, K), dtype), B: T.Tensor((K, N), dtype), C: T.Tensor((M, N), accum_dtype)):
        # Kernels of one function run in order on the stream: C is zero before any block adds to it.
        with T.Kernel(grid_n, grid_m, threads=threads) as (bx, by):
            zero = T.alloc_fragment((block_M, block_N), accum_dtype)
            T.clear(zero)
            T.copy(zero, C[by * block_M, bx * block_N])
        with T.Kernel(grid_n, grid_m, split_k, threads=threads) as (bx, by, bz):
            C_local = T.alloc_fragment((block_M, block_N), accum_dtype)
            multiply_range(A, B, bx, by, bz, C_local)
            T.atomic_add(C[by * block_M, bx * block_N], C_local)

    @T.prim_func
    def main_reduce(A: T.Tensor((M, K), dtype), B: T.Tensor((K, N), dtype), C: T.Tensor((M, N), dtype)):
        partial = T.alloc_global((split_k, M, N), accum_dtype)
        with T.Kernel(grid_n, grid_m, split_k, threads=threads) as (bx, by, bz):
            C_local = T.alloc_fragment((block_M, block_N), accum_dtype)
            multiply_range(A, B, bx, by, bz, C_local)
            T.copy(C_local, partial[bz, by * block_M, bx * block_N])
        # The sum over splits: 8 x 128 elements per block (8 consecutive per thread, two 128-bit
        # loads per split), small blocks so that many read the partials, which are still in L2.
        with T.Kernel(T.ceildiv(N, 128), T.ceildiv(M, 8), threads=128) as (bx, by):
            acc = T.alloc_fragment((8, 128), accum_dtype)
            T.clear(acc)
            for s in T.serial(split_k):
                for i, j in T.Parallel(8, 128):
                    acc[i, j] += partial[s, by * 8 + i, bx * 128 + j]
            T.copy(acc, C[by * 8, bx * 128])

    return main_atomic if combine == "atomic" else main_reduce


def choose_split_k(M, N, K, block_M, block_N, block_K, sms, blocks_per_sm=2, min_steps=4):
    """The largest split whose blocks all run at once (one wave: a second, partial wave would leave
    most SMs idle at the end), keeping `min_steps` K blocks per split (fewer, and the pipeline's
    prologue and the partial tiles' traffic outweigh the gain). Two blocks per SM: with 32 x 64 x 128
    tiles, a block's 4 stages take 96 KiB of shared memory, and two fit an SM of sm_80 or sm_90 (a
    warp-specialized 64-row block on sm_90a takes the SM's registers alone: two waves, still whole)."""
    tiles = math.ceil(M / block_M) * math.ceil(N / block_N)
    split = sms * blocks_per_sm // tiles
    return max(1, min(split, math.ceil(K / block_K) // min_steps))


def default_block_m(M):
    """M rounded up to the 16 rows of an mma tile, at most 64: one tile row covers a decode batch."""
    return min(64, 16 * math.ceil(M / 16))


def default_stages(block_M, block_N, block_K, smem_per_block=96 * 1024):
    """As many pipeline stages (at most 4) as fit `smem_per_block`, so that two blocks share an SM."""
    stage_bytes = 2 * (block_M * block_K + block_K * block_N)
    return max(2, min(4, smem_per_block // stage_bytes))


def main(M=32, N=4096, K=8192, block_N=64, block_K=128, split_k=None, combine="atomic", device=None):
    device = device or ("cuda" if torch.cuda.is_available() else "cpu")
    with tilelang.use_target(device):  # the kernels compile for where the tensors live
        block_M = default_block_m(M)
        stages = default_stages(block_M, block_N, block_K)
        sms = num_sms(device)
        if split_k is None:
            split_k = choose_split_k(M, N, K, block_M, block_N, block_K, sms)
        kernel = matmul_splitk(M, N, K, block_M, block_N, block_K, split_k, combine, num_stages=stages)
        A, B = randn(M, K, device=device), randn(K, N, device=device)
        C = kernel(A, B)
        assert C.dtype == (torch.float32 if combine == "atomic" else torch.float16)
        # Results are ~sqrt(K) in size: the tolerance covers fp16's rounding of C ("reduce") and fp32
        # sums taken in another order than torch's.
        ref = ref_matmul(A, B)
        torch.testing.assert_close(C.float(), ref, rtol=1e-2, atol=5e-2)
        unsplit = matmul_splitk(M, N, K, block_M, block_N, block_K, 1, combine, num_stages=stages)
        torch.testing.assert_close(unsplit(A, B).float(), ref, rtol=1e-2, atol=5e-2)
        ms, ms_unsplit = time_ms(lambda: kernel(A, B), device), time_ms(lambda: unsplit(A, B), device)
        tiles = math.ceil(M / block_M) * math.ceil(N / block_N)
        moved = 2 * (M * K + K * N) + C.element_size() * M * N
        print(
            f"split-K gemm ({combine}) M={M} N={N} K={K}: {tiles} tiles for {sms} SMs; "
            f"split 1: {ms_unsplit * 1e3:.1f} us, split {split_k}: {ms * 1e3:.1f} us, {gbs(moved, ms):.0f} GB/s "
            f"(H200 peak {PEAK_HBM_GBS}); all checks passed"
        )


if __name__ == "__main__":
    parser = argparse.ArgumentParser()
    parser.add_argument("--m", type=int, default=32)
    parser.add_argument("--n", type=int, default=4096)
    parser.add_argument("--k", type=int, default=8192)
    parser.add_argument("--split_k", type=int, default=None, help="default: choose_split_k for this GPU")
    parser.add_argument("--combine", choices=["atomic", "reduce"], default="atomic")
    parser.add_argument("--device", choices=["cuda", "cpu"], help="default: cuda when torch sees a GPU, else cpu")
    args = parser.parse_args()
    main(args.m, args.n, args.k, split_k=args.split_k, combine=args.combine, device=args.device)

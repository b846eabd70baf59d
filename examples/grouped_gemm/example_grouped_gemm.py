"""Grouped GEMM for a mixture-of-experts layer: C[rows of e] = A[rows of e] @ B[e]^T for every expert e,
fp16 in, fp32 accumulation, fp16 out, checked against one torch.matmul per expert.

The router has sorted the tokens by expert, so A [total_tokens, K] holds expert 0's rows, then
expert 1's, ...; `offsets` (int32 [E + 1], cu_seqlens-style, offsets[E] = total_tokens) says where each
expert's rows start. Sizes change from call to call and some are zero, so the M tiles of a plain
GEMM would mix two experts' rows. Instead each expert's rows are cut into tiles of their own, and:

- A first, tiny kernel writes a per-tile table: tile t's expert and first row. The offsets live on
  the GPU (the router wrote them), so a schedule made on the host would cost a device-to-host copy
  and a sync every call (and rule out CUDA graphs); built once per call, the table spares each of a
  tile's N / block_N blocks a walk over the E offsets before its first load.
- The main kernel runs over (N tiles, table entries). There are at most ceil(total / block_M) + E
  tiles (each expert adds at most one partial tile), a bound known at launch; entries past the real
  tiles hold expert -1 and their blocks do nothing. Blocks launch along N first: the blocks of an M
  tile share its A rows, and the few M tiles in flight share their expert's B in L2.
- B is [E, N, K]: each expert's weight as nn.Linear stores it ([out_features, in_features]), K-major
  like A, so both operands' tiles are rows of K loaded the same way (TMA or cp.async), and
  T.gemm(transpose_B=True) reads it as B[e]^T (wgmma and ldmatrix take a K-major B as it is).
  torch._grouped_mm takes this memory as B.transpose(1, 2).
- A partial tile (an expert's last rows) still loads and multiplies block_M rows: those past the
  expert's end are the next expert's tokens (or, past the end of A, zeros that T.copy fills in), and
  their results are not stored. Masking the load would give up whole-tile TMA loads for nothing; only
  the store is masked, row by row, straight from the accumulator's registers (staging it through
  shared memory for wider stores needs a block barrier under `if e >= 0`, which the compiler refuses
  for now: it cannot tell that a table written by the first kernel is read-only in the second).
- Tiles of 128 x 256 x 64, 4 stages, 256 threads: two consumer warpgroups of wgmma on sm_90a, 192 KiB
  of shared memory for the stages (the H200's best plain-GEMM tile, benchmark/matmul). An expert
  wastes up to block_M - 1 rows of its last tile: with many small experts (E = 64 of ~64 tokens)
  block_M = 64 halves that (benchmark/grouped_gemm tries both).
"""

import argparse
import math

import torch
from grouped_common import edge_sizes, group_sizes, make_inputs, ref_grouped_matmul, tflops, time_ms

import tilelang
import tilelang.language as T


@tilelang.jit(out_idx=[-1])
def grouped_gemm(
    E, N, K, block_M=128, block_N=256, block_K=64, threads=256, num_stages=4, dtype="float16", accum_dtype="float"
):
    num_stages = min(num_stages, math.ceil(K / block_K))  # (a deeper pipeline than the loop overlaps nothing more)
    M = T.dynamic("total_tokens")  # one compiled kernel for every token count
    max_tiles = T.ceildiv(M, block_M) + E
    table_threads = 128

    @T.prim_func
    def main(
        A: T.Tensor((M, K), dtype),
        B: T.Tensor((E, N, K), dtype),
        offsets: T.Tensor((E + 1,), "int32"),
        C: T.Tensor((M, N), dtype),
    ):
        tile_expert = T.alloc_global((max_tiles,), "int32")
        tile_row = T.alloc_global((max_tiles,), "int32")

        # The table: entry t of a block's `table_threads` goes with one thread, and the block walks the
        # experts' tile counts once (E steps of scalar work on offsets that stay in L1: nothing beside
        # the GEMM); the entry whose tile falls in expert e's range takes e and its first row.
        with T.Kernel(T.ceildiv(max_tiles, table_threads), threads=table_threads) as bt:
            expert = T.alloc_fragment((table_threads,), "int32")
            row = T.alloc_fragment((table_threads,), "int32")
            first = T.alloc_var("int32", init=0)  # the first tile of expert e
            T.fill(expert, -1)
            T.fill(row, 0)
            for e in T.serial(E):
                tiles = T.ceildiv(offsets[e + 1] - offsets[e], block_M)
                for i in T.Parallel(table_threads):
                    t = bt * table_threads + i
                    if first <= t and t < first + tiles:
                        expert[i] = e
                        row[i] = offsets[e] + (t - first) * block_M
                first = first + tiles
            for i in T.Parallel(table_threads):
                if bt * table_threads + i < max_tiles:
                    tile_expert[bt * table_threads + i] = expert[i]
                    tile_row[bt * table_threads + i] = row[i]

        # Kernels of one function run in order on the stream: the table is complete here.
        with T.Kernel(T.ceildiv(N, block_N), max_tiles, threads=threads) as (bx, by):
            A_shared = T.alloc_shared((block_M, block_K), dtype)
            B_shared = T.alloc_shared((block_N, block_K), dtype)
            C_local = T.alloc_fragment((block_M, block_N), accum_dtype)
            e = tile_expert[by]
            row0 = tile_row[by]
            if e >= 0:
                rows = offsets[e + 1] - row0  # the tile's rows that are expert e's (may exceed block_M)
                T.clear(C_local)
                for k in T.Pipelined(T.ceildiv(K, block_K), num_stages=num_stages):
                    T.copy(A[row0, k * block_K], A_shared)
                    T.copy(B[e, bx * block_N, k * block_K], B_shared)
                    T.gemm(A_shared, B_shared, C_local, transpose_B=True)
                for i, j in T.Parallel(block_M, block_N):
                    if i < rows:
                        C[row0 + i, bx * block_N + j] = C_local[i, j]

    return main


def main(E=8, N=4096, K=4096, total_tokens=8192, skew=1.0, empty=1, block_M=128, block_N=256, device=None):
    device = device or ("cuda" if torch.cuda.is_available() else "cpu")
    with tilelang.use_target(device):  # the kernels compile for where the tensors live
        kernel = grouped_gemm(E, N, K, block_M, block_N)
        # Each element sums K products of unit normals (~sqrt(K) in size): the tolerance covers fp16's
        # rounding of C (a relative 2^-11) and fp32 sums taken in another order than torch's.
        tolerance = dict(rtol=1e-2, atol=5e-2)
        # Sizes at the edges of the masking (empty, 1 row, a tile but one, a tile, a tile and one, ...),
        # then a skewed split: one compiled kernel serves both, sizes are read at call time.
        for sizes in (edge_sizes(E, block_M), group_sizes(E, total_tokens, skew, empty)):
            A, B, offsets = make_inputs(sizes, N, K, device)
            torch.testing.assert_close(kernel(A, B, offsets), ref_grouped_matmul(A, B, offsets).half(), **tolerance)
        bounds = offsets.tolist()  # (the loop needs the sizes on the host: copied once, outside the timing)
        ms = time_ms(lambda: kernel(A, B, offsets), device)
        ms_loop = time_ms(lambda: ref_grouped_matmul(A, B, bounds, torch.float16), device)
        print(
            f"grouped gemm E={E} N={N} K={K} tokens={total_tokens} (sizes {min(sizes)}..{max(sizes)}, "
            f"{sizes.count(0)} empty): {ms * 1e3:.1f} us, {tflops(total_tokens, N, K, ms):.1f} TFLOPS; loop of "
            f"torch.matmul {ms_loop * 1e3:.1f} us ({ms_loop / ms:.2f}x); all checks passed"
        )


if __name__ == "__main__":
    parser = argparse.ArgumentParser()
    parser.add_argument("--experts", type=int, default=8)
    parser.add_argument("--n", type=int, default=4096)
    parser.add_argument("--k", type=int, default=4096)
    parser.add_argument("--tokens", type=int, default=8192, help="total tokens over all experts")
    parser.add_argument("--skew", type=float, default=1.0, help="0: even sizes; 1: Zipf-like popularity")
    parser.add_argument("--empty", type=int, default=1, help="experts that get no token")
    parser.add_argument("--block_m", type=int, default=128)
    parser.add_argument("--block_n", type=int, default=256)
    parser.add_argument("--device", choices=["cuda", "cpu"], help="default: cuda when torch sees a GPU, else cpu")
    args = parser.parse_args()
    sizes = dict(E=args.experts, N=args.n, K=args.k, total_tokens=args.tokens, skew=args.skew, empty=args.empty)
    main(**sizes, block_M=args.block_m, block_N=args.block_n, device=args.device)

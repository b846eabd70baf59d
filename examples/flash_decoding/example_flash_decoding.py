"""Flash decoding: one new query token per sequence attends to its paged KV cache, with grouped-query
attention (H = H_kv * group query heads), split over the sequence and combined; checked against torch.

Decode reads every K and V element of every sequence once and uses it in `group` multiply-adds (one
per query head sharing it): a few FLOPs per byte against the H200's ~200 per byte of HBM, so the
kernel is bound by HBM bandwidth, and what matters is keeping the SMs busy reading:

- Why split KV: one block per (sequence, KV head) gives B * H_kv blocks, 8 for B=1 and a Llama-3-8B
  shape, far from the H200's 132 SMs. Cutting each sequence into `num_splits` contiguous ranges of
  pages gives B * H_kv * num_splits blocks; each writes its partial output and log-sum-exp (fp32), and
  a second kernel merges the splits, weighting split s by 2^(lse_s - lse). `choose_num_splits` picks
  enough splits to fill the SMs about twice, no more (each split costs a partial output and a
  combine step), and never cuts a sequence into splits of fewer than 4 steps.
- GQA: a block takes all `group` query heads of its KV head, so each K/V byte is loaded once for the
  group. The group's rows are padded to `block_H` (16: the smallest mma.sync tile) with zero rows.
- Paged cache: page p of sequence b is K_cache[block_table[b, p]], page_size tokens of every KV head.
  A step of the loop is block_N = 64 tokens, one page of 64 (or more) tokens or several smaller ones:
  each page's physical index is read from the table and the page gathered into shared memory by the
  same pipelined copy (cp.async, issued a step ahead) as a dense tile (for pages of 64 tokens or more;
  smaller pages are copied in a loop, which the compiler does not pipeline yet).
- Lengths: the last step of a sequence masks the scores of tokens past cache_seqlens[b] to -inf. A
  split covers ceil(steps / num_splits) steps, so only a prefix of splits is used: a sequence shorter
  than the split count (or whose steps run out early) leaves the last splits empty; they write
  nothing and the combine stops at the used ones. Lengths are at least 1.
- Scores are [block_H, block_N] for 4 warps: `FullCol` gives each warp a column slice of the scores,
  then P goes through shared memory to be the A operand of P·V (each warp needs whole rows). With
  block_H = 64 on Hopper both products are one warpgroup's wgmma and the compiler adds a TMA producer
  warpgroup, which reads the page index from the table and uses it as a tile coordinate; 16 rows
  (mma.sync, cp.async) waste fewer tensor-core cycles on padding (benchmark/flash_decoding has both).
"""

import argparse
import math

import torch
from decode_common import PEAK_HBM_GBS, gbs, kv_bytes, make_inputs, num_sms, ref_decode, time_ms

import tilelang
import tilelang.language as T


def choose_num_splits(batch, kv_heads, max_seqlen, sms, block_N=64, min_steps=4, max_splits=64):
    """Splits of each sequence so that batch * kv_heads * splits blocks fill the SMs about twice (two
    blocks per SM hide each other's page loads), with at least `min_steps` steps of block_N tokens
    per split of the longest sequence (a split's fixed costs: its Q load, output and combine step)."""
    splits = math.ceil(2 * sms / (batch * kv_heads))
    return max(1, min(splits, max_splits, math.ceil(max_seqlen / (block_N * min_steps))))


@tilelang.jit(out_idx=[-1])
def flash_decoding(batch, heads, kv_heads, dim, page_size, num_blocks, max_pages, num_splits, block_H=16,
                   block_N=64, threads=128, num_stages=2, dtype="float16"):  # fmt: skip
    scale = (1.0 / dim) ** 0.5 * 1.44269504  # 1/sqrt(d), times log2(e) for exp2
    accum_dtype = "float"
    group = heads // kv_heads
    assert heads % kv_heads == 0 and group <= block_H, "a block holds all the query heads of one KV head"
    cache_shape = [num_blocks, page_size, kv_heads, dim]
    # A step of the loop is block_N tokens: one page, or several small pages (16-token pages would
    # give 16-column score tiles, too narrow for 4 warps of mma, and 4 KiB copies).
    block_N = max(block_N, page_size)
    assert block_N % page_size == 0, "a step holds whole pages"
    pages_per_step = block_N // page_size

    @T.prim_func
    def main(
        Q: T.Tensor([batch, heads, dim], dtype),
        K_cache: T.Tensor(cache_shape, dtype),
        V_cache: T.Tensor(cache_shape, dtype),
        block_table: T.Tensor([batch, max_pages], "int32"),
        cache_seqlens: T.Tensor([batch], "int32"),
        Output: T.Tensor([batch, heads, dim], dtype),
    ):
        partial = T.alloc_global([batch, heads, num_splits, dim], accum_dtype)
        lse = T.alloc_global([batch, heads, num_splits], accum_dtype)

        with T.Kernel(batch, kv_heads, num_splits, threads=threads) as (b, hk, s):
            Q_shared = T.alloc_shared([block_H, dim], dtype)
            K_shared = T.alloc_shared([block_N, dim], dtype)
            V_shared = T.alloc_shared([block_N, dim], dtype)
            P_shared = T.alloc_shared([block_H, block_N], dtype)
            acc_s = T.alloc_fragment([block_H, block_N], accum_dtype)
            acc_o = T.alloc_fragment([block_H, dim], accum_dtype)
            scores_max = T.alloc_fragment([block_H], accum_dtype)
            scores_max_prev = T.alloc_fragment([block_H], accum_dtype)
            scores_scale = T.alloc_fragment([block_H], accum_dtype)
            scores_sum = T.alloc_fragment([block_H], accum_dtype)
            logsum = T.alloc_fragment([block_H], accum_dtype)

            seqlen = cache_seqlens[b]
            steps = T.ceildiv(seqlen, block_N)
            per_split = T.ceildiv(steps, num_splits)
            first = s * per_split  # this split's steps: [first, first + count)
            count = T.max(T.min(per_split, steps - first), 0)

            # The group's query heads; the padding rows are zeros (their scores are 0, never NaN).
            for i, d in T.Parallel(block_H, dim):
                Q_shared[i, d] = T.if_then_else(i < group, Q[b, hk * group + i, d], 0)
            T.fill(acc_o, 0)
            T.fill(logsum, 0)
            T.fill(scores_max, -T.infinity(accum_dtype))
            for k in T.Pipelined(count, num_stages=num_stages):
                # Gather: each page's physical index from the table, then the whole page of this KV
                # head. A step's pages past the sequence's end are masked below (table entries past
                # max_pages or pool indices past num_blocks, such as -1, load zeros: T.copy's bounds).
                if pages_per_step == 1:
                    T.copy(K_cache[block_table[b, first + k], :, hk, :], K_shared)
                    T.copy(V_cache[block_table[b, first + k], :, hk, :], V_shared)
                else:
                    # (The compiler does not pipeline copies inside a loop yet: these loads are
                    # synchronous, issued when the step starts. Pages of 64+ tokens keep cp.async.)
                    for p in T.unroll(pages_per_step):
                        page = block_table[b, (first + k) * pages_per_step + p]
                        T.copy(K_cache[page, :, hk, :], K_shared[p * page_size : (p + 1) * page_size, :])
                        T.copy(V_cache[page, :, hk, :], V_shared[p * page_size : (p + 1) * page_size, :])
                T.gemm(Q_shared, K_shared, acc_s, transpose_B=True, clear_accum=True, policy=T.GemmWarpPolicy.FullCol)
                # Tokens past the sequence's end (only in its last step) weigh nothing. Every step of
                # the loop holds at least one real token, so a row's max stays finite.
                for i, j in T.Parallel(block_H, block_N):
                    acc_s[i, j] = T.if_then_else(
                        (first + k) * block_N + j < seqlen, acc_s[i, j], -T.infinity(accum_dtype)
                    )
                # Online softmax: running row max (clear=False keeps the old one in) and row sum.
                T.copy(scores_max, scores_max_prev)
                T.reduce_max(acc_s, scores_max, dim=1, clear=False)
                for i in T.Parallel(block_H):
                    scores_scale[i] = T.exp2(scores_max_prev[i] * scale - scores_max[i] * scale)
                for i, j in T.Parallel(block_H, block_N):
                    acc_s[i, j] = T.exp2(acc_s[i, j] * scale - scores_max[i] * scale)
                T.reduce_sum(acc_s, scores_sum, dim=1)
                for i in T.Parallel(block_H):
                    logsum[i] = logsum[i] * scores_scale[i] + scores_sum[i]
                T.copy(acc_s, P_shared)
                for i, d in T.Parallel(block_H, dim):
                    acc_o[i, d] *= scores_scale[i]
                T.gemm(P_shared, V_shared, acc_o, policy=T.GemmWarpPolicy.FullCol)
            # The split's normalized output and log2 of its softmax denominator; empty splits (and
            # the padding rows) write nothing.
            if count > 0:
                for i, d in T.Parallel(block_H, dim):
                    if i < group:
                        partial[b, hk * group + i, s, d] = acc_o[i, d] / logsum[i]
                for i in T.Parallel(block_H):
                    if i < group:
                        lse[b, hk * group + i, s] = T.log2(logsum[i]) + scores_max[i] * scale

        # Combine: one block per (query head, sequence), a thread per output column. Kernels of one
        # function run in order on the stream: every split has been written here.
        with T.Kernel(heads, batch, threads=dim) as (h, b):
            o = T.alloc_fragment([dim], accum_dtype)
            lse_max = T.alloc_var(accum_dtype)
            lse_sum = T.alloc_var(accum_dtype)
            steps = T.ceildiv(cache_seqlens[b], block_N)
            used = T.ceildiv(steps, T.ceildiv(steps, num_splits))  # the splits that hold steps
            lse_max = -T.infinity(accum_dtype)
            for k in T.serial(used):
                lse_max = T.max(lse_max, lse[b, h, k])
            lse_sum = 0.0
            for k in T.serial(used):
                lse_sum += T.exp2(lse[b, h, k] - lse_max)
            T.clear(o)
            for k in T.serial(used):
                for d in T.Parallel(dim):
                    o[d] += T.exp2(lse[b, h, k] - lse_max) / lse_sum * partial[b, h, k, d]
            for d in T.Parallel(dim):
                Output[b, h, d] = o[d]

    return main


def main(seqlens=(1000, 1, 64, 4097), heads=32, kv_heads=8, dim=128, page_size=64, num_splits=None, block_H=16,
         device=None):  # fmt: skip
    device = device or ("cuda" if torch.cuda.is_available() else "cpu")
    seqlens = list(seqlens)
    with tilelang.use_target(device):  # the kernels compile for where the tensors live
        q, k_cache, v_cache, block_table, cache_seqlens = make_inputs(seqlens, heads, kv_heads, dim, page_size, device)
        max_pages = block_table.shape[1]
        if num_splits is None:
            num_splits = choose_num_splits(len(seqlens), kv_heads, max(seqlens), num_sms(device))
        kernel = flash_decoding(len(seqlens), heads, kv_heads, dim, page_size, k_cache.shape[0], max_pages,
                                num_splits, block_H)  # fmt: skip
        out = kernel(q, k_cache, v_cache, block_table, cache_seqlens)
        # Outputs are weighted means of unit normals (|o| < ~1 except for the shortest sequences, up
        # to ~3): fp16 P in P·V (a relative 2^-11 per weight) and fp16 rounding of the output set it.
        torch.testing.assert_close(out.float(), ref_decode(q, k_cache, v_cache, block_table, cache_seqlens),
                                   rtol=1e-2, atol=1e-2)  # fmt: skip
        ms = time_ms(lambda: kernel(q, k_cache, v_cache, block_table, cache_seqlens), device)
        bandwidth = gbs(kv_bytes(cache_seqlens, kv_heads, dim), ms)
        print(
            f"flash decoding B={len(seqlens)} lengths {min(seqlens)}..{max(seqlens)} H={heads} H_kv={kv_heads} "
            f"D={dim} page {page_size} num_splits={num_splits}: {ms * 1e3:.1f} us, KV read at {bandwidth:.0f} GB/s "
            f"({bandwidth / PEAK_HBM_GBS:.0%} of the H200's {PEAK_HBM_GBS} GB/s); all checks passed"
        )


if __name__ == "__main__":
    parser = argparse.ArgumentParser()
    parser.add_argument("--seqlens", type=int, nargs="+", default=[4096, 16384, 65536, 4096, 1000, 1, 8191, 16384])
    parser.add_argument("--heads", type=int, default=32)
    parser.add_argument("--kv_heads", type=int, default=8)
    parser.add_argument("--dim", type=int, default=128)
    parser.add_argument("--page_size", type=int, default=64)
    parser.add_argument("--num_splits", type=int, default=None, help="default: choose_num_splits for this GPU")
    parser.add_argument("--device", choices=["cuda", "cpu"], help="default: cuda when torch sees a GPU, else cpu")
    args = parser.parse_args()
    main(args.seqlens, args.heads, args.kv_heads, args.dim, args.page_size, args.num_splits, device=args.device)

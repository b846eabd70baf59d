"""Native sparse attention (DeepSeek NSA), the selected-block branch, forward; checked against torch.

Each query token attends, per key/value head, to `S` blocks of `block_size` keys chosen for it:
block_indices [batch, seq, kv_heads, S] (int32) holds their block numbers, distinct within a slot
row. A slot is unused when it holds -1 or a block that starts after the token (any number >= seq
does); attention is causal, so in the block holding the token the keys after it are masked. Tensors
are (batch, seq, heads, dim) with grouped-query attention: `heads // kv_heads` query heads share a
key/value head.

One block of the kernel, one warp, owns one token and one key/value head. Its `group` query heads are
the M dimension of both gemms (padded with zero rows to `block_H`, 16 at least: the smallest mma
tile), so each selected block of K and V is loaded once for the whole group. The loop over the S
slots skips an unused slot, gathers the block's keys and values into shared memory (issued a slot
ahead by the pipeline) and runs FlashAttention's step: S = Q·Kᵀ, online softmax (exp2), O += P·V
with P kept in registers. One warp holds whole rows of the scores, so the row max and sum stay in
registers too. A token with no used slot gives zeros.
"""

import argparse

import torch

import tilelang
import tilelang.language as T


@tilelang.jit(out_idx=[4], pass_configs={tilelang.PassConfigKey.TL_ENABLE_FAST_MATH: True})
def nsa_fwd(batch, heads, kv_heads, seq_len, dim, selected_blocks, block_size=64, block_H=16, num_stages=2,
            threads=32, dtype="float16"):  # fmt: skip
    scale = (1.0 / dim) ** 0.5 * 1.44269504  # 1/sqrt(d), times log2(e) for exp2
    group = heads // kv_heads
    assert heads % kv_heads == 0, "heads must be a multiple of kv_heads"
    assert group <= block_H, f"the {group} query heads of a key/value head must fit in block_H={block_H} rows"
    q_shape = [batch, seq_len, heads, dim]
    kv_shape = [batch, seq_len, kv_heads, dim]
    accum_dtype = "float"

    @T.prim_func
    def main(
        Q: T.Tensor(q_shape, dtype),
        K: T.Tensor(kv_shape, dtype),
        V: T.Tensor(kv_shape, dtype),
        BlockIndices: T.Tensor([batch, seq_len, kv_heads, selected_blocks], "int32"),
        Output: T.Tensor(q_shape, dtype),
    ):
        with T.Kernel(seq_len, kv_heads, batch, threads=threads) as (t, hk, b):
            Q_shared = T.alloc_shared([block_H, dim], dtype)
            K_shared = T.alloc_shared([block_size, dim], dtype)
            V_shared = T.alloc_shared([block_size, dim], dtype)
            acc_s = T.alloc_fragment([block_H, block_size], accum_dtype)
            acc_s_cast = T.alloc_fragment([block_H, block_size], dtype)
            acc_o = T.alloc_fragment([block_H, dim], accum_dtype)
            scores_max = T.alloc_fragment([block_H], accum_dtype)
            scores_max_prev = T.alloc_fragment([block_H], accum_dtype)
            scores_scale = T.alloc_fragment([block_H], accum_dtype)
            scores_sum = T.alloc_fragment([block_H], accum_dtype)
            logsum = T.alloc_fragment([block_H], accum_dtype)

            # The group's query heads; the padding rows are zeros (their scores are 0, never NaN).
            for i, d in T.Parallel(block_H, dim):
                Q_shared[i, d] = T.if_then_else(i < group, Q[b, t, hk * group + i, d], 0)
            T.fill(acc_o, 0)
            T.fill(logsum, 0)
            T.fill(scores_max, -T.infinity(accum_dtype))

            for s in T.Pipelined(selected_blocks, num_stages=num_stages):
                # A used slot's block starts at or before the token, so its first key is attended and
                # every row's max is finite from the first used slot on. (Block numbers are compared,
                # not block * block_size, so a large sentinel cannot overflow int32.)
                if (BlockIndices[b, t, hk, s] >= 0) & (BlockIndices[b, t, hk, s] <= t // block_size):
                    T.copy(K[b, BlockIndices[b, t, hk, s] * block_size : (BlockIndices[b, t, hk, s] + 1) * block_size,
                             hk, :], K_shared)  # fmt: skip
                    T.gemm(Q_shared, K_shared, acc_s, transpose_B=True, clear_accum=True)
                    # Causal: in the block holding the token, the keys after it weigh nothing.
                    for i, j in T.Parallel(block_H, block_size):
                        acc_s[i, j] = T.if_then_else(
                            BlockIndices[b, t, hk, s] * block_size + j <= t, acc_s[i, j], -T.infinity(accum_dtype)
                        )
                    # Online softmax: running row max (clear=False keeps the old one in) and row sum.
                    T.copy(scores_max, scores_max_prev)
                    T.reduce_max(acc_s, scores_max, dim=1, clear=False)
                    for i in T.Parallel(block_H):
                        scores_scale[i] = T.exp2(scores_max_prev[i] * scale - scores_max[i] * scale)
                    for i, j in T.Parallel(block_H, block_size):
                        acc_s[i, j] = T.exp2(acc_s[i, j] * scale - scores_max[i] * scale)
                    T.reduce_sum(acc_s, scores_sum, dim=1)
                    for i in T.Parallel(block_H):
                        logsum[i] = logsum[i] * scores_scale[i] + scores_sum[i]
                    T.copy(acc_s, acc_s_cast)
                    for i, d in T.Parallel(block_H, dim):
                        acc_o[i, d] *= scores_scale[i]
                    T.copy(V[b, BlockIndices[b, t, hk, s] * block_size : (BlockIndices[b, t, hk, s] + 1) * block_size,
                             hk, :], V_shared)  # fmt: skip
                    T.gemm(acc_s_cast, V_shared, acc_o)
            # A token with no used slot has logsum 0 (and acc_o 0): its output is 0.
            for i, d in T.Parallel(block_H, dim):
                if i < group:
                    Output[b, t, hk * group + i, d] = T.if_then_else(logsum[i] > 0, acc_o[i, d] / logsum[i], 0)

    return main


def random_block_indices(batch, seq_len, kv_heads, selected_blocks, block_size, unused=0.25, device="cpu"):
    """Distinct random blocks per (batch, token, key/value head), int32; about `unused` of the slots hold
    -1 or seq_len (both mean unused), and random picks after the token are ignored by causality."""
    num_blocks = -(-seq_len // block_size)
    picks = torch.rand(batch, seq_len, kv_heads, num_blocks, device=device).argsort(dim=-1)[..., :selected_blocks]
    if picks.shape[-1] < selected_blocks:  # fewer blocks than slots: the rest unused
        picks = torch.cat([picks, picks.new_full((*picks.shape[:-1], selected_blocks - num_blocks), -1)], dim=-1)
    r = torch.rand(picks.shape, device=device)
    picks = torch.where(r < unused / 2, -1, torch.where(r < unused, seq_len, picks))
    return picks.to(torch.int32)


def ref_program(Q, K, V, block_indices, block_size):
    """Attention in float32 with a token-level mask built slot by slot from block_indices; a token with
    no key attended gives zeros."""
    batch, seq_len, heads, dim = Q.shape
    kv_heads = K.shape[2]
    num_blocks = -(-seq_len // block_size)
    # Block-level mask [batch, kv_heads, token, block]; unused slots land in an extra last column.
    block_mask = torch.zeros(batch, kv_heads, seq_len, num_blocks + 1, dtype=torch.bool, device=Q.device)
    indices = block_indices.long().permute(0, 2, 1, 3)  # -> (batch, kv_heads, token, slot)
    for s in range(indices.shape[-1]):
        block = indices[..., s]
        used = (block >= 0) & (block < num_blocks)
        block_mask.scatter_(-1, torch.where(used, block, num_blocks).unsqueeze(-1), True)
    mask = block_mask[..., :num_blocks].repeat_interleave(block_size, dim=-1)[..., :seq_len]
    mask &= torch.ones(seq_len, seq_len, dtype=torch.bool, device=Q.device).tril()  # causal
    mask = mask.repeat_interleave(heads // kv_heads, dim=1)  # each query head of a group
    q = Q.float().transpose(1, 2)  # -> (batch, heads, seq, dim)
    k, v = (x.float().transpose(1, 2).repeat_interleave(heads // kv_heads, dim=1) for x in (K, V))
    scores = (q @ k.transpose(-1, -2) / dim**0.5).masked_fill(~mask, float("-inf"))
    out = torch.softmax(scores, dim=-1).nan_to_num(0.0) @ v
    return out.transpose(1, 2).to(Q.dtype)


def main(batch=1, heads=16, kv_heads=1, seq_len=256, dim=64, selected_blocks=4, block_size=32, unused=0.25,
         block_H=16, num_stages=2, threads=32, dtype="float16", device=None):  # fmt: skip
    device = device or ("cuda" if torch.cuda.is_available() else "cpu")
    with tilelang.use_target(device):  # the kernels compile for where the tensors live
        kernel = nsa_fwd(batch, heads, kv_heads, seq_len, dim, selected_blocks, block_size, block_H, num_stages,
                         threads, dtype)  # fmt: skip
        torch_dtype = getattr(torch, dtype)
        Q = torch.randn(batch, seq_len, heads, dim, device=device, dtype=torch_dtype)
        K, V = (torch.randn(batch, seq_len, kv_heads, dim, device=device, dtype=torch_dtype) for _ in range(2))
        block_indices = random_block_indices(batch, seq_len, kv_heads, selected_blocks, block_size, unused, device)
        out = kernel(Q, K, V, block_indices)
        torch.testing.assert_close(out, ref_program(Q, K, V, block_indices, block_size), rtol=1e-2, atol=1e-2)
        print(f"native sparse attention, selected blocks ({selected_blocks} of {block_size}): all checks passed")


if __name__ == "__main__":
    parser = argparse.ArgumentParser()
    parser.add_argument("--batch", type=int, default=2)
    parser.add_argument("--heads", type=int, default=64)
    parser.add_argument("--kv_heads", type=int, default=4)
    parser.add_argument("--seq_len", type=int, default=8192)
    parser.add_argument("--dim", type=int, default=128)
    parser.add_argument("--selected_blocks", type=int, default=16)
    parser.add_argument("--block_size", type=int, default=64)
    parser.add_argument("--device", choices=["cuda", "cpu"], help="default: cuda when torch sees a GPU, else cpu")
    args = parser.parse_args()
    main(args.batch, args.heads, args.kv_heads, args.seq_len, args.dim, args.selected_blocks, args.block_size,
         device=args.device)  # fmt: skip

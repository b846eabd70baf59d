"""Block-sparse attention forward, tensors in (batch, heads, seq, dim) layout, checked against torch.

A boolean block mask [batch, heads, seq / block_M, seq / block_N] says which blocks of keys each block
of queries attends to. The kernel takes it as lists (`block_indices`, built once per mask): for each
query block, its kept key blocks in order and how many there are. One block of the kernel owns
`block_M` query rows of one head and walks its kept key blocks as FlashAttention does (S = Q·Kᵀ,
online softmax with exp2, O += P·V): the loop has one trip per kept block, so the time follows the
mask's density, and its body has no condition, so it is pipelined as the dense one is. Causal
attention (optional) is applied on top, token by token: blocks past the diagonal are dropped from
the lists and the keys after each query are masked inside. A query row that attends to no key gives
zeros.
"""

import argparse

import torch

import tilelang
import tilelang.language as T

# The running row max starts at a finite floor instead of -inf: a row whose first attended block (or
# all of them) masks it entirely then subtracts a finite max, and exp2 of its -inf scores is 0, never
# the NaN of -inf - -inf. Any real score is far above it.
MAX_FLOOR = -1e30


@tilelang.jit(out_idx=[5], pass_configs={tilelang.PassConfigKey.TL_ENABLE_FAST_MATH: True})
def blocksparse_attention(batch, heads, seq_len, dim, is_causal, block_M=64, block_N=64, num_stages=1, threads=128,
                          dtype="float16"):  # fmt: skip
    scale = (1.0 / dim) ** 0.5 * 1.44269504  # 1/sqrt(d), times log2(e) for exp2
    shape = [batch, heads, seq_len, dim]
    q_blocks, k_blocks = (seq_len + block_M - 1) // block_M, (seq_len + block_N - 1) // block_N
    accum_dtype = "float"

    @T.prim_func
    def main(
        Q: T.Tensor(shape, dtype),
        K: T.Tensor(shape, dtype),
        V: T.Tensor(shape, dtype),
        BlockIndices: T.Tensor([batch, heads, q_blocks, k_blocks], "int32"),
        BlockCounts: T.Tensor([batch, heads, q_blocks], "int32"),
        Output: T.Tensor(shape, dtype),
    ):
        with T.Kernel(T.ceildiv(seq_len, block_M), heads, batch, threads=threads) as (bx, by, bz):
            Q_shared = T.alloc_shared([block_M, dim], dtype)
            K_shared = T.alloc_shared([block_N, dim], dtype)
            V_shared = T.alloc_shared([block_N, dim], dtype)
            O_shared = T.alloc_shared([block_M, dim], dtype)
            acc_s = T.alloc_fragment([block_M, block_N], accum_dtype)
            acc_s_cast = T.alloc_fragment([block_M, block_N], dtype)
            acc_o = T.alloc_fragment([block_M, dim], accum_dtype)
            scores_max = T.alloc_fragment([block_M], accum_dtype)
            scores_max_prev = T.alloc_fragment([block_M], accum_dtype)
            scores_scale = T.alloc_fragment([block_M], accum_dtype)
            scores_sum = T.alloc_fragment([block_M], accum_dtype)
            logsum = T.alloc_fragment([block_M], accum_dtype)

            T.copy(Q[bz, by, bx * block_M : (bx + 1) * block_M, :], Q_shared)
            T.fill(acc_o, 0)
            T.fill(logsum, 0)
            T.fill(scores_max, MAX_FLOOR)

            # Only the kept key blocks: the loop runs BlockCounts times, each trip on the next kept
            # block, so the time follows the density (no trip for a block the mask leaves out).
            for t in T.Pipelined(BlockCounts[bz, by, bx], num_stages=num_stages):
                k = BlockIndices[bz, by, bx, t]
                T.copy(K[bz, by, k * block_N : (k + 1) * block_N, :], K_shared)
                if is_causal:
                    for i, j in T.Parallel(block_M, block_N):
                        acc_s[i, j] = T.if_then_else(
                            (bx * block_M + i < k * block_N + j) | (k * block_N + j >= seq_len),
                            -T.infinity(accum_dtype),
                            0,
                        )
                elif seq_len % block_N != 0:
                    for i, j in T.Parallel(block_M, block_N):
                        acc_s[i, j] = T.if_then_else(k * block_N + j >= seq_len, -T.infinity(accum_dtype), 0)
                else:
                    T.clear(acc_s)
                T.gemm(Q_shared, K_shared, acc_s, transpose_B=True, policy=T.GemmWarpPolicy.FullRow)

                T.copy(scores_max, scores_max_prev)
                T.reduce_max(acc_s, scores_max, dim=1, clear=False)
                for i in T.Parallel(block_M):
                    scores_scale[i] = T.exp2(scores_max_prev[i] * scale - scores_max[i] * scale)
                for i, j in T.Parallel(block_M, block_N):
                    acc_s[i, j] = T.exp2(acc_s[i, j] * scale - scores_max[i] * scale)
                T.reduce_sum(acc_s, scores_sum, dim=1)
                for i in T.Parallel(block_M):
                    logsum[i] = logsum[i] * scores_scale[i] + scores_sum[i]
                T.copy(acc_s, acc_s_cast)
                for i, j in T.Parallel(block_M, dim):
                    acc_o[i, j] *= scores_scale[i]

                T.copy(V[bz, by, k * block_N : (k + 1) * block_N, :], V_shared)
                T.gemm(acc_s_cast, V_shared, acc_o, policy=T.GemmWarpPolicy.FullRow)
            # A row that attended to no key has logsum 0 (and acc_o 0): its output is 0.
            for i, j in T.Parallel(block_M, dim):
                acc_o[i, j] = T.if_then_else(logsum[i] > 0, acc_o[i, j] / logsum[i], 0)
            T.copy(acc_o, O_shared)
            T.copy(O_shared, Output[bz, by, bx * block_M : (bx + 1) * block_M, :])

    return main


def random_block_mask(batch, heads, seq_len, block_M, block_N, density, device):
    """Each (query block, key block) pair kept with probability `density`."""
    shape = (batch, heads, -(-seq_len // block_M), -(-seq_len // block_N))
    return torch.rand(shape, device=device) < density


def block_indices(block_mask, is_causal, block_M, block_N):
    """The kernel's view of a block mask: per query block, the kept key blocks in order (BlockIndices,
    padded with the rest) and how many there are (BlockCounts). Causal: key blocks entirely after a
    query block's last row are dropped. Built once per mask, as a model reuses it across layers."""
    if is_causal:
        q_last = (torch.arange(block_mask.shape[2], device=block_mask.device) + 1) * block_M - 1
        k_first = torch.arange(block_mask.shape[3], device=block_mask.device) * block_N
        block_mask = block_mask & (k_first[None, :] <= q_last[:, None])
    order = torch.sort((~block_mask).to(torch.int8), dim=-1, stable=True).indices  # kept blocks first
    return order.to(torch.int32).contiguous(), block_mask.sum(-1, dtype=torch.int32).contiguous()


def ref_program(Q, K, V, block_mask, is_causal, block_M, block_N):
    """Dense attention in float32 with the block mask expanded to tokens (and causal); rows that attend
    to no key give zeros."""
    seq_len = Q.shape[2]
    mask = block_mask.repeat_interleave(block_M, dim=2).repeat_interleave(block_N, dim=3)[..., :seq_len, :seq_len]
    if is_causal:
        mask = mask & torch.ones(seq_len, seq_len, dtype=torch.bool, device=Q.device).tril()
    scores = Q.float() @ K.float().transpose(-1, -2) / Q.shape[-1] ** 0.5
    probs = torch.softmax(scores.masked_fill(~mask, float("-inf")), dim=-1).nan_to_num(0.0)
    return (probs @ V.float()).to(Q.dtype)


def main(batch=1, heads=4, seq_len=256, dim=64, density=0.3, is_causal=False, block_M=64, block_N=64, num_stages=1,
         threads=128, dtype="float16", device=None):  # fmt: skip
    device = device or ("cuda" if torch.cuda.is_available() else "cpu")
    with tilelang.use_target(device):  # the kernels compile for where the tensors live
        kernel = blocksparse_attention(batch, heads, seq_len, dim, is_causal, block_M, block_N, num_stages, threads,
                                       dtype)  # fmt: skip
        torch_dtype = getattr(torch, dtype)
        Q, K, V = (torch.randn(batch, heads, seq_len, dim, device=device, dtype=torch_dtype) for _ in range(3))
        block_mask = random_block_mask(batch, heads, seq_len, block_M, block_N, density, device)
        out = kernel(Q, K, V, *block_indices(block_mask, is_causal, block_M, block_N))
        ref = ref_program(Q, K, V, block_mask, is_causal, block_M, block_N)
        torch.testing.assert_close(out, ref, rtol=1e-2, atol=1e-2)
        print(f"block-sparse attention (density {density}): all checks passed")


if __name__ == "__main__":
    parser = argparse.ArgumentParser()
    parser.add_argument("--batch", type=int, default=8)
    parser.add_argument("--heads", type=int, default=32)
    parser.add_argument("--seq_len", type=int, default=4096)
    parser.add_argument("--dim", type=int, default=128)
    parser.add_argument("--density", type=float, default=0.25)
    parser.add_argument("--is_causal", action="store_true")
    parser.add_argument("--device", choices=["cuda", "cpu"], help="default: cuda when torch sees a GPU, else cpu")
    args = parser.parse_args()
    main(args.batch, args.heads, args.seq_len, args.dim, args.density, args.is_causal, 128, 64, 2, 256,
         device=args.device)  # fmt: skip

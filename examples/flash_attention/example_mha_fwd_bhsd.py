"""FlashAttention forward, tensors in (batch, heads, seq, dim) layout, with separate query and key
lengths (queries aligned to the end of the keys when causal, as in decoding with a cache).

The same algorithm as example_mha_fwd_bshd.py, written without macros: per block of `block_M`
queries, S = Q·Kᵀ, online softmax in registers (exp2, log2(e) folded into the scale), O += P·V.
"""

import argparse

import torch
import torch.nn.functional as F

import tilelang
import tilelang.language as T


@tilelang.jit(out_idx=[3], pass_configs={tilelang.PassConfigKey.TL_ENABLE_FAST_MATH: True})
def flashattn(batch, heads, seq_q, seq_kv, dim, is_causal, block_M=64, block_N=64, num_stages=1, threads=128):
    scale = (1.0 / dim) ** 0.5 * 1.44269504  # 1/sqrt(d), times log2(e) for exp2
    q_shape = [batch, heads, seq_q, dim]
    kv_shape = [batch, heads, seq_kv, dim]
    dtype = "float16"
    accum_dtype = "float"
    past_len = seq_kv - seq_q  # query i sees keys up to past_len + i
    assert past_len >= 0, "causal attention here needs seq_kv >= seq_q"

    @T.prim_func
    def main(
        Q: T.Tensor(q_shape, dtype),
        K: T.Tensor(kv_shape, dtype),
        V: T.Tensor(kv_shape, dtype),
        Output: T.Tensor(q_shape, dtype),
    ):
        with T.Kernel(T.ceildiv(seq_q, block_M), heads, batch, threads=threads) as (bx, by, bz):
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
            T.fill(scores_max, -T.infinity(accum_dtype))

            loop_range = (
                T.min(T.ceildiv(seq_kv, block_N), T.ceildiv(past_len + (bx + 1) * block_M, block_N))
                if is_causal
                else T.ceildiv(seq_kv, block_N)
            )
            # Hopper: Q·Kᵀ of block k, the rescale and P·V of block k - 1 (stage 1), then the softmax
            # of block k beside the tensor cores' P·V. Groups: K copy, Q·Kᵀ, softmax, rescale, V copy, P·V.
            for k in T.Pipelined(
                loop_range,
                num_stages=num_stages,
                order=[-1, 0, 3, 1, -1, 2],
                stage=[-1, 0, 0, 1, -1, 1],
                group=[[0], [1, 2], [3, 4, 5, 6, 7, 8, 9], [10], [11], [12]],
            ):
                T.copy(K[bz, by, k * block_N : (k + 1) * block_N, :], K_shared)
                if is_causal:
                    for i, j in T.Parallel(block_M, block_N):
                        acc_s[i, j] = T.if_then_else(
                            (past_len + bx * block_M + i < k * block_N + j) | (k * block_N + j >= seq_kv),
                            -T.infinity(accum_dtype),
                            0,
                        )
                else:
                    for i, j in T.Parallel(block_M, block_N):
                        acc_s[i, j] = T.if_then_else(k * block_N + j >= seq_kv, -T.infinity(accum_dtype), 0)
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
            for i, j in T.Parallel(block_M, dim):
                acc_o[i, j] /= logsum[i]
            T.copy(acc_o, O_shared)
            T.copy(O_shared, Output[bz, by, bx * block_M : (bx + 1) * block_M, :])

    return main


def ref_program(Q, K, V, is_causal):
    """Attention in float32; causal keeps key j for query i when j <= i + (seq_kv - seq_q)."""
    seq_q, seq_kv = Q.shape[2], K.shape[2]
    mask = None
    if is_causal:
        i = torch.arange(seq_q, device=Q.device)[:, None]
        j = torch.arange(seq_kv, device=Q.device)[None, :]
        mask = j <= i + (seq_kv - seq_q)
    return F.scaled_dot_product_attention(Q.float(), K.float(), V.float(), attn_mask=mask).to(Q.dtype)


def main(batch=1, heads=4, seq_q=256, seq_kv=256, dim=64, is_causal=False, block_M=64, block_N=64, num_stages=1,
         threads=128, device=None):  # fmt: skip
    device = device or ("cuda" if torch.cuda.is_available() else "cpu")
    with tilelang.use_target(device):  # the kernels compile for where the tensors live
        kernel = flashattn(batch, heads, seq_q, seq_kv, dim, is_causal, block_M, block_N, num_stages, threads)
        Q = torch.randn(batch, heads, seq_q, dim, device=device, dtype=torch.float16)
        K, V = (torch.randn(batch, heads, seq_kv, dim, device=device, dtype=torch.float16) for _ in range(2))
        torch.testing.assert_close(kernel(Q, K, V), ref_program(Q, K, V, is_causal), rtol=1e-2, atol=1e-2)
        print("flash attention (bhsd): all checks passed")


if __name__ == "__main__":
    parser = argparse.ArgumentParser()
    parser.add_argument("--batch", type=int, default=8)
    parser.add_argument("--heads", type=int, default=32)
    parser.add_argument("--seq_q", type=int, default=4096)
    parser.add_argument("--seq_kv", type=int, default=4096)
    parser.add_argument("--dim", type=int, default=128)
    parser.add_argument("--is_causal", action="store_true")
    parser.add_argument("--device", choices=["cuda", "cpu"], help="default: cuda when torch sees a GPU, else cpu")
    args = parser.parse_args()
    main(args.batch, args.heads, args.seq_q, args.seq_kv, args.dim, args.is_causal, 128, 64, 2, 256, device=args.device)

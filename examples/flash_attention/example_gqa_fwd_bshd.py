"""Grouped-query attention forward (GQA): `heads` query heads share `groups = heads // head_kv` key
and value heads; tensors in (batch, seq, heads, dim) layout, checked against torch.

One block owns `block_M` query rows of one query head and reads the key/value head of its group.
It walks the keys `block_N` at a time: S = Q·Kᵀ on tensor cores, an online softmax in registers
(running row max and row sum, exp2 with log2(e) folded into the scale), then O += P·V with P kept
in registers as the gemm's A operand. Causal attention stops at the diagonal block and masks inside
it; sequence lengths that are not a multiple of the block are masked the same way.
"""

import argparse

import torch
import torch.nn.functional as F

import tilelang
import tilelang.language as T


@tilelang.jit(out_idx=[3], pass_configs={tilelang.PassConfigKey.TL_ENABLE_FAST_MATH: True})
def flashattn(batch, heads, head_kv, seq_len, dim, is_causal, block_M=64, block_N=64, num_stages=1, threads=128):
    scale = (1.0 / dim) ** 0.5 * 1.44269504  # 1/sqrt(d), times log2(e) for exp2
    groups = heads // head_kv
    shape = [batch, seq_len, heads, dim]
    kv_shape = [batch, seq_len, head_kv, dim]
    dtype = "float16"
    accum_dtype = "float"

    @T.macro
    def MMA0(
        K: T.Tensor(kv_shape, dtype),
        Q_shared: T.SharedBuffer([block_M, dim], dtype),
        K_shared: T.SharedBuffer([block_N, dim], dtype),
        acc_s: T.FragmentBuffer([block_M, block_N], accum_dtype),
        k: T.int32,
        bx: T.int32,
        by: T.int32,
        bz: T.int32,
    ):
        T.copy(K[bz, k * block_N : (k + 1) * block_N, by // groups, :], K_shared)
        # Scores start at 0, or at -inf where the key is masked: after the query (causal) or past
        # the end of the sequence (when seq_len is not a multiple of block_N).
        if is_causal:
            for i, j in T.Parallel(block_M, block_N):
                acc_s[i, j] = T.if_then_else(
                    (bx * block_M + i < k * block_N + j) | (k * block_N + j >= seq_len), -T.infinity(accum_dtype), 0
                )
        elif seq_len % block_N != 0:
            for i, j in T.Parallel(block_M, block_N):
                acc_s[i, j] = T.if_then_else(k * block_N + j >= seq_len, -T.infinity(accum_dtype), 0)
        else:
            T.clear(acc_s)
        T.gemm(Q_shared, K_shared, acc_s, transpose_B=True, policy=T.GemmWarpPolicy.FullRow)

    @T.macro
    def MMA1(
        V: T.Tensor(kv_shape, dtype),
        V_shared: T.SharedBuffer([block_N, dim], dtype),
        acc_s_cast: T.FragmentBuffer([block_M, block_N], dtype),
        acc_o: T.FragmentBuffer([block_M, dim], accum_dtype),
        k: T.int32,
        by: T.int32,
        bz: T.int32,
    ):
        T.copy(V[bz, k * block_N : (k + 1) * block_N, by // groups, :], V_shared)
        T.gemm(acc_s_cast, V_shared, acc_o, policy=T.GemmWarpPolicy.FullRow)

    @T.macro
    def Softmax(
        acc_s: T.FragmentBuffer([block_M, block_N], accum_dtype),
        acc_s_cast: T.FragmentBuffer([block_M, block_N], dtype),
        scores_max: T.FragmentBuffer([block_M], accum_dtype),
        scores_max_prev: T.FragmentBuffer([block_M], accum_dtype),
        scores_scale: T.FragmentBuffer([block_M], accum_dtype),
        scores_sum: T.FragmentBuffer([block_M], accum_dtype),
        logsum: T.FragmentBuffer([block_M], accum_dtype),
    ):
        # Running row max: the max so far and this block's (clear=False keeps the old value in). A
        # row this block masks entirely keeps its max, so no -inf - -inf appears below.
        T.copy(scores_max, scores_max_prev)
        T.reduce_max(acc_s, scores_max, dim=1, clear=False)
        # exp2(x * scale - max * scale): one fused multiply-add per score.
        for i in T.Parallel(block_M):
            scores_scale[i] = T.exp2(scores_max_prev[i] * scale - scores_max[i] * scale)
        for i, j in T.Parallel(block_M, block_N):
            acc_s[i, j] = T.exp2(acc_s[i, j] * scale - scores_max[i] * scale)
        T.reduce_sum(acc_s, scores_sum, dim=1)
        for i in T.Parallel(block_M):
            logsum[i] = logsum[i] * scores_scale[i] + scores_sum[i]
        T.copy(acc_s, acc_s_cast)

    @T.macro
    def Rescale(
        acc_o: T.FragmentBuffer([block_M, dim], accum_dtype),
        scores_scale: T.FragmentBuffer([block_M], accum_dtype),
    ):
        for i, j in T.Parallel(block_M, dim):
            acc_o[i, j] *= scores_scale[i]

    @T.prim_func
    def main(
        Q: T.Tensor(shape, dtype),
        K: T.Tensor(kv_shape, dtype),
        V: T.Tensor(kv_shape, dtype),
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

            T.copy(Q[bz, bx * block_M : (bx + 1) * block_M, by, :], Q_shared)
            T.fill(acc_o, 0)
            T.fill(logsum, 0)
            T.fill(scores_max, -T.infinity(accum_dtype))

            loop_range = (
                T.min(T.ceildiv(seq_len, block_N), T.ceildiv((bx + 1) * block_M, block_N))
                if is_causal
                else T.ceildiv(seq_len, block_N)
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
                MMA0(K, Q_shared, K_shared, acc_s, k, bx, by, bz)
                Softmax(acc_s, acc_s_cast, scores_max, scores_max_prev, scores_scale, scores_sum, logsum)
                Rescale(acc_o, scores_scale)
                MMA1(V, V_shared, acc_s_cast, acc_o, k, by, bz)
            for i, j in T.Parallel(block_M, dim):
                acc_o[i, j] /= logsum[i]
            T.copy(acc_o, O_shared)
            T.copy(O_shared, Output[bz, bx * block_M : (bx + 1) * block_M, by, :])

    return main


def ref_program(Q, K, V, is_causal):
    """softmax(Q·Kᵀ / sqrt(d)) · V in float32 with each key/value head repeated for its group."""
    groups = Q.shape[2] // K.shape[2]
    K, V = (x.repeat_interleave(groups, dim=2) for x in (K, V))
    q, k, v = (x.transpose(1, 2).float() for x in (Q, K, V))  # -> (batch, heads, seq, dim)
    out = F.scaled_dot_product_attention(q, k, v, is_causal=is_causal)
    return out.transpose(1, 2).to(Q.dtype)


def main(batch=1, heads=8, head_kv=2, seq_len=256, dim=64, is_causal=False, block_M=64, block_N=64, num_stages=1,
         threads=128, device=None):  # fmt: skip
    device = device or ("cuda" if torch.cuda.is_available() else "cpu")
    with tilelang.use_target(device):  # the kernels compile for where the tensors live
        kernel = flashattn(batch, heads, head_kv, seq_len, dim, is_causal, block_M, block_N, num_stages, threads)
        Q = torch.randn(batch, seq_len, heads, dim, device=device, dtype=torch.float16)
        K, V = (torch.randn(batch, seq_len, head_kv, dim, device=device, dtype=torch.float16) for _ in range(2))
        torch.testing.assert_close(kernel(Q, K, V), ref_program(Q, K, V, is_causal), rtol=1e-2, atol=1e-2)
        print("grouped-query attention (bshd): all checks passed")


if __name__ == "__main__":
    parser = argparse.ArgumentParser()
    parser.add_argument("--batch", type=int, default=8)
    parser.add_argument("--heads", type=int, default=32)
    parser.add_argument("--head_kv", type=int, default=8)
    parser.add_argument("--seq_len", type=int, default=4096)
    parser.add_argument("--dim", type=int, default=128)
    parser.add_argument("--is_causal", action="store_true")
    parser.add_argument("--device", choices=["cuda", "cpu"], help="default: cuda when torch sees a GPU, else cpu")
    args = parser.parse_args()
    main(args.batch, args.heads, args.head_kv, args.seq_len, args.dim, args.is_causal, 128, 64, 2, 256,
         device=args.device)  # fmt: skip

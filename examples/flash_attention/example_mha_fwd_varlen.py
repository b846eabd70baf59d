"""FlashAttention forward over packed sequences of different lengths (varlen), multi-head or
grouped-query attention, checked against torch's attention run sequence by sequence.

The batch is packed without padding: Q is [total_q, heads, dim] (sequence 0's rows, then sequence
1's, ...), K and V are [total_kv, kv_heads, dim], and cu_seqlens_q / cu_seqlens_k (int32 [batch + 1],
cumulative lengths starting at 0) say where each sequence starts and ends. `heads // kv_heads` query
heads share a key/value head (1 for multi-head attention). Sequence b's queries attend only to its
own keys; a sequence may have a different number of queries and keys, and either may be 0.

- The grid is (ceil(max_seqlen_q / block_M), heads, batch): a block owns `block_M` query rows of one
  sequence and one head, and reads its sequence's bounds from cu_seqlens. Blocks past the end of a
  shorter sequence do nothing. The totals are dynamic: one compiled kernel serves every packing
  with the same batch and max_seqlen_q.
- As in example_mha_fwd_bshd.py, the block walks the sequence's keys `block_N` at a time: S = Q·Kᵀ
  on tensor cores, an online softmax in registers (exp2, log2(e) folded into the scale), O += P·V.
- Ragged tails: a block's last rows of queries and last keys may run past its sequence into the
  next one's (or past the end of the tensor, which T.copy reads as zeros). Those keys are masked to
  -inf in the scores; those query rows are computed and not stored (the store is per row).
- Causal masks align the sequences' ends, as torch's `causal_lower_right` and flash-attn do: query
  i of a sequence of seqlen_q queries and seqlen_k keys sees keys j <= i + seqlen_k - seqlen_q (with
  equal lengths, the usual lower triangle). A query that sees no key (more queries than keys, or no
  keys at all) gets an output of zeros, as in flash-attn.
"""

import argparse

import torch
import torch.nn.functional as F

import tilelang
import tilelang.language as T

LOG2E = 1.44269504  # exp(x) = exp2(x * log2(e))


@tilelang.jit(out_idx=[-1], pass_configs={tilelang.PassConfigKey.TL_ENABLE_FAST_MATH: True})
def flashattn_varlen(batch, heads, kv_heads, max_seqlen_q, dim, is_causal, dtype="float16", block_M=64, block_N=64,
                     num_stages=1, threads=128):  # fmt: skip
    scale = (1.0 / dim) ** 0.5 * LOG2E  # 1/sqrt(d), times log2(e) for exp2
    assert heads % kv_heads == 0, "each key/value head serves the same number of query heads"
    groups = heads // kv_heads
    total_q = T.dynamic("total_q")
    total_kv = T.dynamic("total_kv")
    q_shape = [total_q, heads, dim]
    kv_shape = [total_kv, kv_heads, dim]
    accum_dtype = "float"
    # The running max starts at a finite floor below any real score rather than at -inf: a row that
    # sees no key keeps it, so exp2(score - max) is exp2(-inf) = 0, never exp2(-inf + inf) = NaN.
    max_floor = -1e30

    @T.macro
    def MMA0(
        K: T.Tensor(kv_shape, dtype),
        Q_shared: T.SharedBuffer([block_M, dim], dtype),
        K_shared: T.SharedBuffer([block_N, dim], dtype),
        acc_s: T.FragmentBuffer([block_M, block_N], accum_dtype),
        k: T.int32,
        bx: T.int32,
        by: T.int32,
        kv_start: T.int32,
        seqlen_k: T.int32,
        past_len: T.int32,
    ):
        T.copy(K[kv_start + k * block_N : kv_start + (k + 1) * block_N, by // groups, :], K_shared)
        # Scores start at -inf where the key is masked: past the sequence's keys (they are the next
        # sequence's) or, causal, after the query's aligned position; 0 elsewhere.
        if is_causal:
            for i, j in T.Parallel(block_M, block_N):
                acc_s[i, j] = T.if_then_else(
                    (past_len + bx * block_M + i < k * block_N + j) | (k * block_N + j >= seqlen_k),
                    -T.infinity(accum_dtype),
                    0,
                )
        else:
            for i, j in T.Parallel(block_M, block_N):
                acc_s[i, j] = T.if_then_else(k * block_N + j >= seqlen_k, -T.infinity(accum_dtype), 0)
        T.gemm(Q_shared, K_shared, acc_s, transpose_B=True, policy=T.GemmWarpPolicy.FullRow)

    @T.macro
    def MMA1(
        V: T.Tensor(kv_shape, dtype),
        V_shared: T.SharedBuffer([block_N, dim], dtype),
        acc_s_cast: T.FragmentBuffer([block_M, block_N], dtype),
        acc_o: T.FragmentBuffer([block_M, dim], accum_dtype),
        k: T.int32,
        by: T.int32,
        kv_start: T.int32,
    ):
        # Rows past the sequence's keys weigh 0 in P (finite values: the next sequence's, or zeros).
        T.copy(V[kv_start + k * block_N : kv_start + (k + 1) * block_N, by // groups, :], V_shared)
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
        # Running row max: the max so far and this block's (clear=False keeps the old value in).
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
        Q: T.Tensor(q_shape, dtype),
        K: T.Tensor(kv_shape, dtype),
        V: T.Tensor(kv_shape, dtype),
        cu_seqlens_q: T.Tensor([batch + 1], "int32"),
        cu_seqlens_k: T.Tensor([batch + 1], "int32"),
        Output: T.Tensor(q_shape, dtype),
    ):
        with T.Kernel(T.ceildiv(max_seqlen_q, block_M), heads, batch, threads=threads) as (bx, by, bz):
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

            q_start = cu_seqlens_q[bz] + bx * block_M  # this block's first query row in Q
            q_rows = cu_seqlens_q[bz + 1] - q_start  # the rows from there on that are this sequence's
            kv_start = cu_seqlens_k[bz]
            seqlen_k = cu_seqlens_k[bz + 1] - kv_start
            past_len = seqlen_k - (cu_seqlens_q[bz + 1] - cu_seqlens_q[bz])  # query i sees keys <= i + past_len

            # Blocks past the end of a shorter sequence have nothing to do (the condition is the same
            # for every thread of the block, so the barriers inside it are safe).
            if q_rows > 0:
                T.copy(Q[q_start : q_start + block_M, by, :], Q_shared)
                T.fill(acc_o, 0)
                T.fill(logsum, 0)
                T.fill(scores_max, max_floor)

                # Causal: up to the block holding the key aligned with the block's last query (none
                # when every query of the block precedes the first key).
                loop_range = (
                    T.max(T.min(T.ceildiv(seqlen_k, block_N), T.ceildiv(past_len + (bx + 1) * block_M, block_N)), 0)
                    if is_causal
                    else T.ceildiv(seqlen_k, block_N)
                )
                # Hopper: Q·Kᵀ of block k, the rescale and P·V of block k - 1 (stage 1), then the
                # softmax of block k beside the tensor cores' P·V. Groups: K copy, Q·Kᵀ, softmax,
                # rescale, V copy, P·V.
                for k in T.Pipelined(
                    loop_range,
                    num_stages=num_stages,
                    order=[-1, 0, 3, 1, -1, 2],
                    stage=[-1, 0, 0, 1, -1, 1],
                    group=[[0], [1, 2], [3, 4, 5, 6, 7, 8, 9], [10], [11], [12]],
                ):
                    MMA0(K, Q_shared, K_shared, acc_s, k, bx, by, kv_start, seqlen_k, past_len)
                    Softmax(acc_s, acc_s_cast, scores_max, scores_max_prev, scores_scale, scores_sum, logsum)
                    Rescale(acc_o, scores_scale)
                    MMA1(V, V_shared, acc_s_cast, acc_o, k, by, kv_start)
                # A row that saw no key has logsum 0 and output 0.
                for i, j in T.Parallel(block_M, dim):
                    acc_o[i, j] = T.if_then_else(logsum[i] > 0, acc_o[i, j] / logsum[i], 0)
                T.copy(acc_o, O_shared)
                # Only the sequence's own rows are stored: the rest belong to the next sequence.
                for i, j in T.Parallel(block_M, dim):
                    if i < q_rows:
                        Output[q_start + i, by, j] = O_shared[i, j]

    return main


def cu_seqlens(seqlens, device):
    """[0, l0, l0 + l1, ...] as int32: where each packed sequence starts, and the total at the end."""
    return torch.tensor([0, *torch.tensor(seqlens).cumsum(0).tolist()], dtype=torch.int32, device=device)


def ref_program(Q, K, V, cu_seqlens_q, cu_seqlens_k, is_causal):
    """Attention of each sequence on its own in float32 (torch's SDPA), back to the input dtype.
    Causal masks are aligned bottom-right (key j visible to query i when j <= i + seqlen_k -
    seqlen_q); a query that sees no key gets zeros."""
    groups = Q.shape[1] // K.shape[1]
    out = torch.zeros_like(Q, dtype=torch.float32)
    bounds_q, bounds_k = cu_seqlens_q.tolist(), cu_seqlens_k.tolist()
    for b in range(len(bounds_q) - 1):
        q0, q1, k0, k1 = bounds_q[b], bounds_q[b + 1], bounds_k[b], bounds_k[b + 1]
        if q1 == q0 or k1 == k0:
            continue  # no queries, or no keys: zeros
        q = Q[q0:q1].transpose(0, 1).float()  # -> (heads, seqlen_q, dim)
        k, v = (x[k0:k1].repeat_interleave(groups, dim=1).transpose(0, 1).float() for x in (K, V))
        if is_causal:
            i = torch.arange(q1 - q0, device=Q.device)[:, None]
            j = torch.arange(k1 - k0, device=Q.device)[None, :]
            visible = j <= i + (k1 - k0) - (q1 - q0)
            o = F.scaled_dot_product_attention(q, k, v, attn_mask=visible)
            o = torch.where(visible.any(dim=1)[:, None], o, 0)  # (rows that see no key: zeros, not NaN)
        else:
            o = F.scaled_dot_product_attention(q, k, v)
        out[q0:q1] = o.transpose(0, 1)
    return out.to(Q.dtype)


def make_inputs(seqlens_q, seqlens_k, heads, kv_heads, dim, dtype, device):
    """Packed Q, K, V (random normals) and the cu_seqlens of both."""
    torch_dtype = getattr(torch, dtype)
    cu_q, cu_k = cu_seqlens(seqlens_q, device), cu_seqlens(seqlens_k, device)
    Q = torch.randn(sum(seqlens_q), heads, dim, device=device, dtype=torch_dtype)
    K, V = (torch.randn(sum(seqlens_k), kv_heads, dim, device=device, dtype=torch_dtype) for _ in range(2))
    return Q, K, V, cu_q, cu_k


def main(seqlens_q=(1, 100, 256, 37), seqlens_k=None, heads=4, kv_heads=None, dim=64, is_causal=False,
         dtype="float16", block_M=64, block_N=64, num_stages=1, threads=128, device=None):  # fmt: skip
    """Run and check the kernel on sequences of `seqlens_q` queries and `seqlens_k` keys each (the same
    lengths when None); `kv_heads` key/value heads (`heads` when None: multi-head attention)."""
    device = device or ("cuda" if torch.cuda.is_available() else "cpu")
    seqlens_k = seqlens_q if seqlens_k is None else seqlens_k
    kv_heads = kv_heads or heads
    assert len(seqlens_q) == len(seqlens_k), "one length of queries and one of keys per sequence"
    with tilelang.use_target(device):  # the kernels compile for where the tensors live
        kernel = flashattn_varlen(len(seqlens_q), heads, kv_heads, max(seqlens_q), dim, is_causal, dtype, block_M,
                                  block_N, num_stages, threads)  # fmt: skip
        Q, K, V, cu_q, cu_k = make_inputs(seqlens_q, seqlens_k, heads, kv_heads, dim, dtype, device)
        torch.testing.assert_close(
            kernel(Q, K, V, cu_q, cu_k), ref_program(Q, K, V, cu_q, cu_k, is_causal), rtol=1e-2, atol=1e-2
        )
        print(f"flash attention (varlen, {dtype}, {heads // kv_heads} query heads per kv head): all checks passed")


if __name__ == "__main__":
    parser = argparse.ArgumentParser()
    parser.add_argument("--seqlens_q", type=int, nargs="+", default=[4096, 1000, 2048, 3000, 511, 4095, 128, 3333])
    parser.add_argument("--seqlens_k", type=int, nargs="+", help="default: the query lengths")
    parser.add_argument("--heads", type=int, default=32)
    parser.add_argument("--kv_heads", type=int, help="default: heads (multi-head attention)")
    parser.add_argument("--dim", type=int, default=128)
    parser.add_argument("--is_causal", action="store_true")
    parser.add_argument("--dtype", choices=["float16", "bfloat16"], default="float16")
    parser.add_argument("--device", choices=["cuda", "cpu"], help="default: cuda when torch sees a GPU, else cpu")
    args = parser.parse_args()
    main(args.seqlens_q, args.seqlens_k, args.heads, args.kv_heads, args.dim, args.is_causal, args.dtype, 128, 64, 2,
         256, device=args.device)  # fmt: skip

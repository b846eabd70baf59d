"""DeepSeek MLA decode: 128 query heads attend to one latent KV head (dim 512) plus a rotary part
(dim 64), one query token per sequence, checked against torch.

No split: a block takes `block_H` heads of one sequence and walks the whole KV cache. Split: the KV
cache is cut into `num_split` parts, one block per (sequence, head group, part) writes a partial
output and its log-sum-exp, and a second kernel in the same function merges the parts.

Inside a block, the first warpgroup (`if tx < 128`) computes the scores Q·Kᵀ of all `block_H` heads
and the softmax; P and the row scales go through shared memory, and every warpgroup then runs P·V
on its share of the 512 output columns. (Splitting the 64x64 score tile over two warpgroups would
give each a 64x32 gemm, which reads more shared memory than the tensor cores can use, and a row
max and sum across warpgroups every block.)
"""

import argparse

import torch

import tilelang
import tilelang.language as T


@tilelang.jit(out_idx=[6])
def mla_decode(
    batch, heads, kv_heads, seqlen_kv, dim, pe_dim, block_N, block_H, num_split, dtype="float16", threads=256
):
    scale = (1.0 / (dim + pe_dim)) ** 0.5 * 1.44269504  # 1/sqrt(d), times log2(e) for exp2
    accum_dtype = "float"
    group = heads // kv_heads
    valid_h = min(block_H, group)
    assert kv_heads == 1, "MLA decode has one latent KV head"
    assert seqlen_kv % (num_split * block_N) == 0, "each split must be a whole number of KV blocks"

    @T.macro
    def attend(Q_shared, Q_pe_shared, KV, K_pe, bid, kv_head, kv_start, n_blocks, acc_o, scores_max, logsum):
        """Online-softmax attention of the block's heads over `n_blocks` KV blocks from kv_start.
        `scores_max` and `logsum` belong to the first warpgroup; `acc_o` to all."""
        KV_shared = T.alloc_shared([block_N, dim], dtype)
        K_pe_shared = T.alloc_shared([block_N, pe_dim], dtype)
        S_shared = T.alloc_shared([block_H, block_N], dtype)
        scale_shared = T.alloc_shared([block_H], accum_dtype)
        acc_s = T.alloc_fragment([block_H, block_N], accum_dtype)
        scores_max_prev = T.alloc_fragment([block_H], accum_dtype)
        scores_scale = T.alloc_fragment([block_H], accum_dtype)
        scores_sum = T.alloc_fragment([block_H], accum_dtype)
        tx = T.get_thread_binding()
        T.fill(acc_o, 0)
        if tx < 128:
            T.fill(logsum, 0)
            T.fill(scores_max, -T.infinity(accum_dtype))
        for k in T.Pipelined(n_blocks, num_stages=2):
            T.copy(KV[bid, kv_start + k * block_N : kv_start + (k + 1) * block_N, kv_head, :], KV_shared)
            T.copy(K_pe[bid, kv_start + k * block_N : kv_start + (k + 1) * block_N, kv_head, :], K_pe_shared)
            if tx < 128:  # the first warpgroup: scores, softmax, P and the scales for everyone
                T.gemm(Q_shared, KV_shared, acc_s, transpose_B=True, policy=T.GemmWarpPolicy.FullCol, clear_accum=True)
                T.gemm(Q_pe_shared, K_pe_shared, acc_s, transpose_B=True, policy=T.GemmWarpPolicy.FullCol)
                T.copy(scores_max, scores_max_prev)
                T.reduce_max(acc_s, scores_max, dim=1, clear=False)
                for i in T.Parallel(block_H):
                    scores_scale[i] = T.exp2(scores_max_prev[i] * scale - scores_max[i] * scale)
                for i, j in T.Parallel(block_H, block_N):
                    acc_s[i, j] = T.exp2(acc_s[i, j] * scale - scores_max[i] * scale)
                T.reduce_sum(acc_s, scores_sum, dim=1)
                T.copy(acc_s, S_shared)
                for i in T.Parallel(block_H):
                    logsum[i] = logsum[i] * scores_scale[i] + scores_sum[i]
                T.copy(scores_scale, scale_shared)
            for i, j in T.Parallel(block_H, dim):
                acc_o[i, j] *= scale_shared[i]
            T.gemm(S_shared, KV_shared, acc_o, policy=T.GemmWarpPolicy.FullCol)
        if tx < 128:
            T.copy(logsum, scale_shared)
        for i, j in T.Parallel(block_H, dim):
            acc_o[i, j] /= scale_shared[i]

    @T.macro
    def no_split(Q, Q_pe, KV, K_pe, Output):
        with T.Kernel(heads // valid_h, batch, threads=threads) as (hid, bid):
            Q_shared = T.alloc_shared([block_H, dim], dtype)
            Q_pe_shared = T.alloc_shared([block_H, pe_dim], dtype)
            O_shared = T.alloc_shared([block_H, dim], dtype)
            acc_o = T.alloc_fragment([block_H, dim], accum_dtype)
            scores_max = T.alloc_fragment([block_H], accum_dtype)
            logsum = T.alloc_fragment([block_H], accum_dtype)
            T.annotate_layout({O_shared: tilelang.layout.make_swizzled_layout(O_shared)})
            T.copy(Q[bid, hid * valid_h : (hid + 1) * valid_h, :], Q_shared)
            T.copy(Q_pe[bid, hid * valid_h : (hid + 1) * valid_h, :], Q_pe_shared)
            attend(Q_shared, Q_pe_shared, KV, K_pe, bid, hid // (group // valid_h), 0, seqlen_kv // block_N,
                   acc_o, scores_max, logsum)  # fmt: skip
            T.copy(acc_o, O_shared)
            T.copy(O_shared, Output[bid, hid * valid_h : (hid + 1) * valid_h, :])

    @T.macro
    def split(Q, Q_pe, KV, K_pe, glse, Output_partial):
        with T.Kernel(batch, heads // valid_h, num_split, threads=threads) as (bid, hid, bz):
            Q_shared = T.alloc_shared([block_H, dim], dtype)
            Q_pe_shared = T.alloc_shared([block_H, pe_dim], dtype)
            O_shared = T.alloc_shared([block_H, dim], dtype)
            acc_o = T.alloc_fragment([block_H, dim], accum_dtype)
            scores_max = T.alloc_fragment([block_H], accum_dtype)
            logsum = T.alloc_fragment([block_H], accum_dtype)
            T.use_swizzle(10)
            T.annotate_layout({O_shared: tilelang.layout.make_swizzled_layout(O_shared)})
            T.copy(Q[bid, hid * valid_h : (hid + 1) * valid_h, :], Q_shared)
            T.copy(Q_pe[bid, hid * valid_h : (hid + 1) * valid_h, :], Q_pe_shared)
            part = seqlen_kv // num_split
            attend(Q_shared, Q_pe_shared, KV, K_pe, bid, hid // (group // valid_h), part * bz, part // block_N,
                   acc_o, scores_max, logsum)  # fmt: skip
            if T.get_thread_binding() < 128:
                for i in T.Parallel(block_H):  # log2 of this part's softmax denominator
                    logsum[i] = T.log2(logsum[i]) + scores_max[i] * scale
                T.copy(logsum, glse[bid, hid * valid_h : (hid + 1) * valid_h, bz])
            T.copy(acc_o, O_shared)
            T.copy(O_shared, Output_partial[bid, hid * valid_h : (hid + 1) * valid_h, bz, :])

    @T.macro
    def combine(glse, Output_partial, Output):
        """Output = sum over parts of 2^(lse_part - lse_total) * partial output."""
        with T.Kernel(heads, batch, threads=128) as (hid, bz):
            po_local = T.alloc_fragment([dim], dtype)
            o_accum_local = T.alloc_fragment([dim], accum_dtype)
            lse_max = T.alloc_var(accum_dtype)
            lse_sum = T.alloc_var(accum_dtype)
            part_scale = T.alloc_var(accum_dtype)
            T.clear(o_accum_local)
            lse_max = -T.infinity(accum_dtype)
            for k in T.serial(num_split):
                lse_max = T.max(lse_max, glse[bz, hid, k])
            lse_sum = 0.0
            for k in T.serial(num_split):
                lse_sum += T.exp2(glse[bz, hid, k] - lse_max)
            lse_sum = T.log2(lse_sum) + lse_max
            for k in T.serial(num_split):
                for i in T.Parallel(dim):
                    po_local[i] = Output_partial[bz, hid, k, i]
                part_scale = T.exp2(glse[bz, hid, k] - lse_sum)
                for i in T.Parallel(dim):
                    o_accum_local[i] += po_local[i] * part_scale
            for i in T.Parallel(dim):
                Output[bz, hid, i] = o_accum_local[i]

    @T.prim_func
    def main_split(
        Q: T.Tensor([batch, heads, dim], dtype),
        Q_pe: T.Tensor([batch, heads, pe_dim], dtype),
        KV: T.Tensor([batch, seqlen_kv, kv_heads, dim], dtype),
        K_pe: T.Tensor([batch, seqlen_kv, kv_heads, pe_dim], dtype),
        glse: T.Tensor([batch, heads, num_split], dtype),
        Output_partial: T.Tensor([batch, heads, num_split, dim], dtype),
        Output: T.Tensor([batch, heads, dim], dtype),
    ):
        split(Q, Q_pe, KV, K_pe, glse, Output_partial)
        combine(glse, Output_partial, Output)

    @T.prim_func
    def main_no_split(
        Q: T.Tensor([batch, heads, dim], dtype),
        Q_pe: T.Tensor([batch, heads, pe_dim], dtype),
        KV: T.Tensor([batch, seqlen_kv, kv_heads, dim], dtype),
        K_pe: T.Tensor([batch, seqlen_kv, kv_heads, pe_dim], dtype),
        glse: T.Tensor([batch, heads, num_split], dtype),
        Output_partial: T.Tensor([batch, heads, num_split, dim], dtype),
        Output: T.Tensor([batch, heads, dim], dtype),
    ):
        no_split(Q, Q_pe, KV, K_pe, Output)

    return main_split if num_split > 1 else main_no_split


def ref_program(q, q_pe, kv, k_pe):
    """softmax([q, q_pe]·[kv, k_pe]ᵀ / sqrt(dim + pe_dim)) · kv in float32, per head."""
    query = torch.cat([q, q_pe], dim=-1).float()  # (batch, heads, dim + pe_dim)
    key = torch.cat([kv, k_pe], dim=-1)[:, :, 0].float()  # (batch, seqlen, dim + pe_dim)
    scores = torch.einsum("bhd,bsd->bhs", query, key) / (query.shape[-1] ** 0.5)
    out = torch.einsum("bhs,bsd->bhd", scores.softmax(dim=-1), kv[:, :, 0].float())
    return out.to(q.dtype)


def main(batch=2, heads=128, seqlen_kv=1024, dim=512, pe_dim=64, block_N=64, block_H=64, num_split=1,
         dtype="float16", device=None):  # fmt: skip
    device = device or ("cuda" if torch.cuda.is_available() else "cpu")
    with tilelang.use_target(device):  # the kernels compile for where the tensors live
        kernel = mla_decode(batch, heads, 1, seqlen_kv, dim, pe_dim, block_N, block_H, num_split, dtype)
        tdt = getattr(torch, dtype)
        q = torch.randn(batch, heads, dim, device=device, dtype=tdt)
        q_pe = torch.randn(batch, heads, pe_dim, device=device, dtype=tdt)
        kv = torch.randn(batch, seqlen_kv, 1, dim, device=device, dtype=tdt)
        k_pe = torch.randn(batch, seqlen_kv, 1, pe_dim, device=device, dtype=tdt)
        glse = torch.empty(batch, heads, num_split, device=device, dtype=tdt)
        partial = torch.empty(batch, heads, num_split, dim, device=device, dtype=tdt)
        out = kernel(q, q_pe, kv, k_pe, glse, partial)
        torch.testing.assert_close(out, ref_program(q, q_pe, kv, k_pe), rtol=1e-2, atol=1e-2)
        print(f"mla decode ({dtype}, {num_split} split): all checks passed")


if __name__ == "__main__":
    parser = argparse.ArgumentParser()
    parser.add_argument("--batch", type=int, default=64)
    parser.add_argument("--kv_ctx", type=int, default=8192)
    parser.add_argument("--num_split", type=int, default=1)
    parser.add_argument("--dtype", default="float16")
    parser.add_argument("--device", choices=["cuda", "cpu"], help="default: cuda when torch sees a GPU, else cpu")
    args = parser.parse_args()
    main(args.batch, 128, args.kv_ctx, num_split=args.num_split, dtype=args.dtype, device=args.device)

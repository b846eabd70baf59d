"""DeepSeek MLA decode on Hopper with hand-written warp specialization ("seesaw" schedule):
128 query heads attend to one latent KV head (dim 512) plus a rotary part (dim 64), one query
token per sequence, checked against torch. sm_90a only (mbarriers, TMA, setmaxnreg).

A block takes 64 heads of one sequence and walks the KV cache a pair of 64-key blocks (a, b) at
a time, with three warpgroups:

- warpgroup 0 computes the scores of block a and the softmax; it owns output columns 0-255;
- warpgroup 1 computes the scores of block b and the softmax; it owns columns 256-511;
- warpgroup 2 loads the KV blocks with TMA: a into stage 0, b into stage 1, each cut into its
  rotary part and four 128-column parts, each part refilled as soon as its readers are done.

The scores start on the first part that lands, and each P·V is one wgmma per part (N = 128, into
one of two accumulators per warpgroup) that frees its part as soon as it retires: the finer the
parts, the sooner the producer can refill them (measured on the H200, b64 fp16: whole blocks 486,
halves 522, 128-column parts 552 TFLOP/s; 64-column parts were no faster).

Each consumer multiplies both P's into its half of O: its own P from registers, the other's
through shared memory. The running row max goes a -> b (m_a = max(m, rowmax S_a), then
m_b = max(m_a, rowmax S_b)), so warpgroup 1 waits for m_a before its softmax, and warpgroup 0 for
P_b and m_b before its second P·V. Each warpgroup's softmax then runs while the other's gemms
do. The two row sums are added at the end.

The running max is lazy (as in FlashAttention-4): a row keeps its max until a block's scores rise
more than 2^8 above it, so P stays below 256 (fine in fp16 and bf16, O and the row sums are fp32)
and the rescaling of O, the multiplies of a warpgroup's whole accumulator, is skipped by every
thread whose rows kept their max: after the first blocks, nearly always (measured on the H200,
b64: +3% fp16, +2% bf16).

Barriers (T.alloc_barrier, phases counted per pair j, so waits use parity j % 2; a wait for a
buffer's previous round uses (j + 1) % 2, which passes at once on a fresh barrier):
  p_full[s], kv_full[s * 4 + q]    the TMA bytes of the rotary part / part q of stage s arrived
                                   (the copy's issuing thread arrives: emit_arrive);
  p_empty[s], kv_empty[s * 4 + q]  the part's readers are done with it (the producer may refill it);
  ma_ready, pa_ready, a_free   m_a and P_a from warpgroup 0 to 1, and back;
  b_ready, b_free              m_b and P_b from warpgroup 1 to 0, and back;
  l0_ready, l1_ready           the row sums, at the end (each warpgroup is then past its loop: the
                               output goes out through Q's shared tile, which no one reads any more).
"""

import argparse

import torch
from example_mla_decode import ref_program

import tilelang
import tilelang.language as T

# The one thread that issues a TMA copy also arrives on its barrier (the full barriers count 1).
ISSUER_ARRIVES = {"emit_arrive": 1}


@tilelang.jit(out_idx=[4], pass_configs={tilelang.PassConfigKey.TL_ENABLE_FAST_MATH: True})
def mla_decode_ws(batch, heads, seqlen_kv, dim=512, pe_dim=64, block_N=64, dtype="float16"):
    block_H = 64  # one wgmma row block per consumer warpgroup
    W = 128  # columns of a KV part: one TMA copy, one barrier pair, one P·V wgmma
    n_parts = dim // W
    mine = n_parts // 2  # the parts of a consumer's half of the output columns
    scale = (1.0 / (dim + pe_dim)) ** 0.5 * 1.44269504  # 1/sqrt(d), times log2(e) for exp2
    accum = "float"
    assert heads % block_H == 0, f"heads must be a multiple of {block_H}"
    assert seqlen_kv % (2 * block_N) == 0, f"seqlen_kv must be a multiple of {2 * block_N} (pairs of KV blocks)"
    n_pairs = seqlen_kv // block_N // 2

    @T.macro
    def scores(q_pe, Q_s, K_p, K_s, p_full, kv_full, S, s, parity):
        """S = [Q_pe, Q]·[K_pe, K]ᵀ of the block in stage `s`, each part as soon as its load lands."""
        T.barrier_wait(p_full[s], parity)
        T.gemm(q_pe, K_p[s, :, :], S, transpose_B=True, clear_accum=True, wg_wait=-1)
        for q in T.unroll(n_parts):
            T.barrier_wait(kv_full[s * n_parts + q], parity)
            T.gemm(Q_s[q, :, :], K_s[s, q, :, :], S, transpose_B=True, wg_wait=-1)
        T.wait_wgmma(0)

    @T.macro
    def start(Q_pe, q_pe, O0, O1, sum_exp, m, bid, hid):
        """The rotary part of Q into registers; O, the row sums and the running max cleared."""
        T.copy(Q_pe[bid, hid * block_H : (hid + 1) * block_H, :], q_pe)
        T.fill(O0, 0)
        T.fill(O1, 0)
        T.fill(sum_exp, 0)
        T.fill(m, -T.infinity(accum))

    @T.macro
    def add_row_sums(sum_exp, stat, own, ready, other_ready):
        """l = this warpgroup's row sums plus the other's, handed over through `stat[own]`."""
        T.copy(sum_exp, stat[own, :])
        T.barrier_arrive(ready[0])
        T.barrier_wait(other_ready[0], 0)
        for i in T.Parallel(block_H):
            sum_exp[i] += stat[1 - own, i]

    @T.macro
    def lazy_max(m, m_old):
        """Keep the old max unless the new one is more than 2^8 above it (in exp2 units): then
        P = exp2(S - m) stays below 256, and O needs no rescaling for most blocks."""
        for i in T.Parallel(block_H):
            m[i] = T.if_then_else(m[i] * scale > m_old[i] * scale + 8, m[i], m_old[i])

    @T.macro
    def rescale_o(O0, O1, f, m_old, m_new):
        """O *= f, only in the threads with a row whose max moved (f = 1 in the others)."""
        moved = T.alloc_var("int32", init=0)
        for i in T.Parallel(block_H):
            if m_old[i] != m_new[i]:
                moved = 1
        if moved != 0:
            for i, k in T.Parallel(block_H, W):
                O0[i, k] *= f[i]
            for i, k in T.Parallel(block_H, W):
                O1[i, k] *= f[i]

    @T.macro
    def pv(P, K_s, kv_empty, O0, O1, s, first):
        """O0, O1 += P · parts `first`, `first` + 1 of stage `s`, each freed once its wgmma retires
        (their loads were waited for by this warpgroup's scores or by the caller)."""
        T.gemm(P, K_s[s, first, :, :], O0, wg_wait=-1)
        T.gemm(P, K_s[s, first + 1, :, :], O1, wg_wait=-1)
        T.wait_wgmma(1)
        T.barrier_arrive(kv_empty[s * n_parts + first])
        T.wait_wgmma(0)
        T.barrier_arrive(kv_empty[s * n_parts + first + 1])

    @T.macro
    def store(O0, O1, sum_exp, O_s, Output, bid, hid, first):
        """O / l into output parts `first` and `first` + 1, through shared memory: rows of 16-byte
        stores instead of each thread's 4-byte pieces of rows (measured 1-1.5% faster overall)."""
        for i, k in T.Parallel(block_H, W):
            O0[i, k] /= sum_exp[i]
        for i, k in T.Parallel(block_H, W):
            O1[i, k] /= sum_exp[i]
        T.copy(O0, O_s[first, :, :])
        T.copy(O1, O_s[first + 1, :, :])
        for q in T.unroll(2):
            cols = (first + q) * W
            T.copy(O_s[first + q, :, :], Output[bid, hid * block_H : (hid + 1) * block_H, cols : cols + W])

    @T.prim_func
    def main(
        Q: T.Tensor([batch, heads, dim], dtype),
        Q_pe: T.Tensor([batch, heads, pe_dim], dtype),
        KV: T.Tensor([batch, seqlen_kv, 1, dim], dtype),
        K_pe: T.Tensor([batch, seqlen_kv, 1, pe_dim], dtype),
        Output: T.Tensor([batch, heads, dim], dtype),
    ):
        with T.Kernel(heads // block_H, batch, threads=384) as (hid, bid):
            Q_s = T.alloc_shared([n_parts, block_H, W], dtype)  # Q; at the end, O on its way out
            K_s = T.alloc_shared([2, n_parts, block_N, W], dtype)
            K_p = T.alloc_shared([2, block_N, pe_dim], dtype)
            P_a = T.alloc_shared([block_H, block_N], dtype)
            P_b = T.alloc_shared([block_H, block_N], dtype)
            stat = T.alloc_shared([2, block_H], accum)  # m_a, m_b; at the end the two row sums
            p_full = T.alloc_barrier([1, 1])
            kv_full = T.alloc_barrier([1] * (2 * n_parts))
            p_empty = T.alloc_barrier([128, 128])  # a: wg0's scores; b: wg1's scores
            # a: left parts wg0's (scores, P·V), right parts wg0's scores and wg1's P·V;
            # b: left parts wg1's scores and wg0's P·V, right parts wg1's (scores, P·V)
            kv_empty = T.alloc_barrier([128] * mine + [256] * mine + [256] * mine + [128] * mine)
            ma_ready = T.alloc_barrier(128)
            pa_ready = T.alloc_barrier(128)
            a_free = T.alloc_barrier(128)
            b_ready = T.alloc_barrier(128)
            b_free = T.alloc_barrier(128)
            l0_ready = T.alloc_barrier(128)
            l1_ready = T.alloc_barrier(128)

            for q in T.unroll(n_parts):
                T.copy(Q[bid, hid * block_H : (hid + 1) * block_H, q * W : (q + 1) * W], Q_s[q, :, :])
            tx = T.get_thread_binding()
            if tx < 128:  # scores of block a; output columns 0-255
                T.set_max_nreg(240, 1)
                q_pe = T.alloc_fragment([block_H, pe_dim], dtype)
                S = T.alloc_fragment([block_H, block_N], accum)
                P = T.alloc_fragment([block_H, block_N], dtype)
                O0 = T.alloc_fragment([block_H, W], accum)
                O1 = T.alloc_fragment([block_H, W], accum)
                m = T.alloc_fragment([block_H], accum)
                m_prev = T.alloc_fragment([block_H], accum)
                rescale = T.alloc_fragment([block_H], accum)
                row_sum = T.alloc_fragment([block_H], accum)
                sum_exp = T.alloc_fragment([block_H], accum)
                start(Q_pe, q_pe, O0, O1, sum_exp, m, bid, hid)
                for j in T.serial(n_pairs):
                    scores(q_pe, Q_s, K_p, K_s, p_full, kv_full, S, 0, j % 2)
                    T.barrier_arrive(p_empty[0])
                    for q in T.unroll(mine):
                        T.barrier_arrive(kv_empty[mine + q])  # the right parts: wg1 multiplies them
                    T.copy(m, m_prev)
                    T.reduce_max(S, m, dim=1, clear=False)
                    lazy_max(m, m_prev)
                    T.barrier_wait(a_free[0], (j + 1) % 2)
                    T.copy(m, stat[0, :])
                    T.barrier_arrive(ma_ready[0])
                    for i in T.Parallel(block_H):
                        rescale[i] = T.exp2(m_prev[i] * scale - m[i] * scale)
                    for i, k in T.Parallel(block_H, block_N):
                        S[i, k] = T.exp2(S[i, k] * scale - m[i] * scale)
                    T.reduce_sum(S, row_sum, dim=1)
                    for i in T.Parallel(block_H):
                        sum_exp[i] = sum_exp[i] * rescale[i] + row_sum[i]
                    T.copy(S, P)
                    T.copy(S, P_a)
                    T.barrier_arrive(pa_ready[0])
                    rescale_o(O0, O1, rescale, m_prev, m)
                    pv(P, K_s, kv_empty, O0, O1, 0, 0)
                    # block b: its P and max come from warpgroup 1
                    T.copy(m, m_prev)
                    T.barrier_wait(b_ready[0], j % 2)
                    T.copy(stat[1, :], m)
                    for i in T.Parallel(block_H):
                        rescale[i] = T.exp2(m_prev[i] * scale - m[i] * scale)
                    for i in T.Parallel(block_H):
                        sum_exp[i] *= rescale[i]
                    rescale_o(O0, O1, rescale, m_prev, m)
                    for q in T.unroll(mine):
                        T.barrier_wait(kv_full[n_parts + q], j % 2)
                    pv(P_b, K_s, kv_empty, O0, O1, 1, 0)
                    T.barrier_arrive(b_free[0])
                add_row_sums(sum_exp, stat, 0, l0_ready, l1_ready)
                store(O0, O1, sum_exp, Q_s, Output, bid, hid, 0)
            elif tx < 256:  # scores of block b; output columns 256-511
                T.set_max_nreg(240, 1)
                q_pe = T.alloc_fragment([block_H, pe_dim], dtype)
                S = T.alloc_fragment([block_H, block_N], accum)
                P = T.alloc_fragment([block_H, block_N], dtype)
                O0 = T.alloc_fragment([block_H, W], accum)
                O1 = T.alloc_fragment([block_H, W], accum)
                m = T.alloc_fragment([block_H], accum)
                m_prev = T.alloc_fragment([block_H], accum)
                m_a = T.alloc_fragment([block_H], accum)
                rescale = T.alloc_fragment([block_H], accum)
                row_sum = T.alloc_fragment([block_H], accum)
                sum_exp = T.alloc_fragment([block_H], accum)
                start(Q_pe, q_pe, O0, O1, sum_exp, m, bid, hid)
                for j in T.serial(n_pairs):
                    scores(q_pe, Q_s, K_p, K_s, p_full, kv_full, S, 1, j % 2)
                    T.barrier_arrive(p_empty[1])
                    for q in T.unroll(mine):
                        T.barrier_arrive(kv_empty[n_parts + q])  # the left parts: wg0 multiplies them
                    T.copy(m, m_prev)
                    T.barrier_wait(ma_ready[0], j % 2)
                    T.copy(stat[0, :], m_a)
                    T.copy(m_a, m)
                    T.reduce_max(S, m, dim=1, clear=False)
                    lazy_max(m, m_a)
                    for i, k in T.Parallel(block_H, block_N):
                        S[i, k] = T.exp2(S[i, k] * scale - m[i] * scale)
                    T.reduce_sum(S, row_sum, dim=1)
                    T.copy(S, P)
                    T.barrier_wait(b_free[0], (j + 1) % 2)
                    T.copy(m, stat[1, :])
                    T.copy(S, P_b)
                    T.barrier_arrive(b_ready[0])
                    for i in T.Parallel(block_H):
                        sum_exp[i] = sum_exp[i] * T.exp2(m_prev[i] * scale - m[i] * scale) + row_sum[i]
                    # this half of O first takes P_a (relative to m_a), then P_b (relative to m_b)
                    for i in T.Parallel(block_H):
                        rescale[i] = T.exp2(m_prev[i] * scale - m_a[i] * scale)
                    rescale_o(O0, O1, rescale, m_prev, m_a)
                    T.barrier_wait(pa_ready[0], j % 2)
                    for q in T.unroll(mine):
                        T.barrier_wait(kv_full[mine + q], j % 2)
                    pv(P_a, K_s, kv_empty, O0, O1, 0, mine)
                    T.barrier_arrive(a_free[0])
                    for i in T.Parallel(block_H):
                        rescale[i] = T.exp2(m_a[i] * scale - m[i] * scale)
                    rescale_o(O0, O1, rescale, m_a, m)
                    pv(P, K_s, kv_empty, O0, O1, 1, mine)
                T.barrier_wait(b_free[0], (n_pairs - 1) % 2)  # warpgroup 0 has read the last m_b
                add_row_sums(sum_exp, stat, 1, l1_ready, l0_ready)
                store(O0, O1, sum_exp, Q_s, Output, bid, hid, mine)
            else:  # the producer: parts in the order their readers free them
                T.set_max_nreg(24, 0)
                for j in T.serial(n_pairs):
                    for s in T.unroll(2):
                        T.barrier_wait(p_empty[s], (j + 1) % 2)
                        T.tma_copy(
                            K_pe[bid, (2 * j + s) * block_N : (2 * j + s + 1) * block_N, 0, :],
                            K_p[s, :, :],
                            barrier=p_full[s],
                            annotations=ISSUER_ARRIVES,
                        )
                    for s in T.unroll(2):
                        for q in T.unroll(n_parts):
                            T.barrier_wait(kv_empty[s * n_parts + q], (j + 1) % 2)
                            T.tma_copy(
                                KV[bid, (2 * j + s) * block_N : (2 * j + s + 1) * block_N, 0, q * W : (q + 1) * W],
                                K_s[s, q, :, :],
                                barrier=kv_full[s * n_parts + q],
                                annotations=ISSUER_ARRIVES,
                            )

    return main


def main(batch=2, heads=128, seqlen_kv=1024, dtype="float16"):
    kernel = mla_decode_ws(batch, heads, seqlen_kv, dtype=dtype)
    tdt = getattr(torch, dtype)
    q = torch.randn(batch, heads, 512, device="cuda", dtype=tdt)
    q_pe = torch.randn(batch, heads, 64, device="cuda", dtype=tdt)
    kv = torch.randn(batch, seqlen_kv, 1, 512, device="cuda", dtype=tdt)
    k_pe = torch.randn(batch, seqlen_kv, 1, 64, device="cuda", dtype=tdt)
    out = kernel(q, q_pe, kv, k_pe)
    torch.testing.assert_close(out, ref_program(q, q_pe, kv, k_pe), rtol=1e-2, atol=1e-2)
    print(f"mla decode, warp-specialized ({dtype}): all checks passed")


if __name__ == "__main__":
    parser = argparse.ArgumentParser()
    parser.add_argument("--batch", type=int, default=64)
    parser.add_argument("--kv_ctx", type=int, default=8192)
    parser.add_argument("--dtype", default="float16")
    args = parser.parse_args()
    main(args.batch, 128, args.kv_ctx, dtype=args.dtype)

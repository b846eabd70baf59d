"""DeepSeek MLA decode on Hopper with hand-written warp specialization ("seesaw" schedule):
128 query heads attend to one latent KV head (dim 512) plus a rotary part (dim 64), one query
token per sequence, checked against torch. sm_90a only (mbarriers, TMA, setmaxnreg).

A block takes 64 heads of one sequence and walks the KV cache a pair of 64-key blocks (a, b) at
a time, with three warpgroups:

- warpgroup 0 computes the scores of block a and the softmax; it owns output columns 0-255;
- warpgroup 1 computes the scores of block b and the softmax; it owns columns 256-511;
- warpgroup 2 loads the KV blocks with TMA: a into stage 0, b into stage 1, each cut into its
  rotary part and its left and right halves, each part refilled as soon as its readers are done.

Each consumer multiplies both P's into its half of O: its own P from registers, the other's
through shared memory. The running row max goes a -> b (m_a = max(m, rowmax S_a), then
m_b = max(m_a, rowmax S_b)), so warpgroup 1 waits for m_a before its softmax, and warpgroup 0 for
P_b and m_b before its second P·V. Each warpgroup's softmax then runs while the other's gemms
do. The two row sums are added at the end.

Barriers (T.alloc_barrier, phases counted per pair j, so waits use parity j % 2; a wait for a
buffer's previous round uses (j + 1) % 2, which passes at once on a fresh barrier):
  *_full[s]   the TMA bytes of part * (p: rotary, l: left, r: right) of stage s arrived;
  *_empty[s]  the part's readers are done with it (the producer may refill it);
  ma_ready, pa_ready, a_free   m_a and P_a from warpgroup 0 to 1, and back;
  b_ready, b_free              m_b and P_b from warpgroup 1 to 0, and back;
  l0_ready, l1_ready           the row sums, at the end.
"""

import argparse

import torch
from example_mla_decode import ref_program

import tilelang
import tilelang.language as T


@tilelang.jit(out_idx=[4], pass_configs={tilelang.PassConfigKey.TL_ENABLE_FAST_MATH: True})
def mla_decode_ws(batch, heads, seqlen_kv, dim=512, pe_dim=64, block_N=64, dtype="float16"):
    block_H = 64  # one wgmma row block per consumer warpgroup
    scale = (1.0 / (dim + pe_dim)) ** 0.5 * 1.44269504  # 1/sqrt(d), times log2(e) for exp2
    accum = "float"
    half = dim // 2
    assert heads % block_H == 0, f"heads must be a multiple of {block_H}"
    assert seqlen_kv % (2 * block_N) == 0, f"seqlen_kv must be a multiple of {2 * block_N} (pairs of KV blocks)"
    n_pairs = seqlen_kv // block_N // 2

    @T.macro
    def scores(q_pe, Q_l, Q_r, K_p, K_l, K_r, p_full, l_full, r_full, S, s, parity):
        """S = [Q_pe, Q]·[K_pe, K]ᵀ of the block in stage `s`, each part as soon as its load lands."""
        T.barrier_wait(p_full[s], parity)
        T.gemm(q_pe, K_p[s, :, :], S, transpose_B=True, clear_accum=True, wg_wait=-1)
        T.barrier_wait(l_full[s], parity)
        T.gemm(Q_l, K_l[s, :, :], S, transpose_B=True, wg_wait=-1)
        T.barrier_wait(r_full[s], parity)
        T.gemm(Q_r, K_r[s, :, :], S, transpose_B=True, wg_wait=-1)
        T.wait_wgmma(0)

    @T.prim_func
    def main(
        Q: T.Tensor([batch, heads, dim], dtype),
        Q_pe: T.Tensor([batch, heads, pe_dim], dtype),
        KV: T.Tensor([batch, seqlen_kv, 1, dim], dtype),
        K_pe: T.Tensor([batch, seqlen_kv, 1, pe_dim], dtype),
        Output: T.Tensor([batch, heads, dim], dtype),
    ):
        with T.Kernel(heads // block_H, batch, threads=384) as (hid, bid):
            Q_l = T.alloc_shared([block_H, half], dtype)
            Q_r = T.alloc_shared([block_H, half], dtype)
            K_l = T.alloc_shared([2, block_N, half], dtype)
            K_r = T.alloc_shared([2, block_N, half], dtype)
            K_p = T.alloc_shared([2, block_N, pe_dim], dtype)
            P_a = T.alloc_shared([block_H, block_N], dtype)
            P_b = T.alloc_shared([block_H, block_N], dtype)
            stat = T.alloc_shared([2, block_H], accum)  # m_a, m_b; at the end the two row sums
            p_full = T.alloc_barrier([1, 1])
            l_full = T.alloc_barrier([1, 1])
            r_full = T.alloc_barrier([1, 1])
            p_empty = T.alloc_barrier([128, 128])  # a: wg0's scores; b: wg1's scores
            l_empty = T.alloc_barrier([128, 256])  # a: wg0's P·V; b: wg1's scores and wg0's P·V
            r_empty = T.alloc_barrier([256, 128])  # a: wg0's scores and wg1's P·V; b: wg1's P·V
            ma_ready = T.alloc_barrier(128)
            pa_ready = T.alloc_barrier(128)
            a_free = T.alloc_barrier(128)
            b_ready = T.alloc_barrier(128)
            b_free = T.alloc_barrier(128)
            l0_ready = T.alloc_barrier(128)
            l1_ready = T.alloc_barrier(128)

            T.copy(Q[bid, hid * block_H : (hid + 1) * block_H, 0:half], Q_l)
            T.copy(Q[bid, hid * block_H : (hid + 1) * block_H, half:dim], Q_r)
            tx = T.get_thread_binding()
            if tx < 128:  # scores of block a; output columns 0-255
                T.set_max_nreg(240, 1)
                q_pe = T.alloc_fragment([block_H, pe_dim], dtype)
                S = T.alloc_fragment([block_H, block_N], accum)
                P = T.alloc_fragment([block_H, block_N], dtype)
                O_l = T.alloc_fragment([block_H, half], accum)
                m = T.alloc_fragment([block_H], accum)
                m_prev = T.alloc_fragment([block_H], accum)
                rescale = T.alloc_fragment([block_H], accum)
                row_sum = T.alloc_fragment([block_H], accum)
                sum_exp = T.alloc_fragment([block_H], accum)
                T.copy(Q_pe[bid, hid * block_H : (hid + 1) * block_H, :], q_pe)
                T.fill(O_l, 0)
                T.fill(sum_exp, 0)
                T.fill(m, -T.infinity(accum))
                for j in T.serial(n_pairs):
                    scores(q_pe, Q_l, Q_r, K_p, K_l, K_r, p_full, l_full, r_full, S, 0, j % 2)
                    T.barrier_arrive(p_empty[0])
                    T.barrier_arrive(r_empty[0])
                    T.copy(m, m_prev)
                    T.reduce_max(S, m, dim=1, clear=False)
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
                    for i, k in T.Parallel(block_H, half):
                        O_l[i, k] *= rescale[i]
                    T.gemm(P, K_l[0, :, :], O_l)
                    T.barrier_arrive(l_empty[0])
                    # block b: its P and max come from warpgroup 1
                    T.copy(m, m_prev)
                    T.barrier_wait(b_ready[0], j % 2)
                    T.copy(stat[1, :], m)
                    for i in T.Parallel(block_H):
                        rescale[i] = T.exp2(m_prev[i] * scale - m[i] * scale)
                    for i in T.Parallel(block_H):
                        sum_exp[i] *= rescale[i]
                    for i, k in T.Parallel(block_H, half):
                        O_l[i, k] *= rescale[i]
                    T.barrier_wait(l_full[1], j % 2)
                    T.gemm(P_b, K_l[1, :, :], O_l)
                    T.barrier_arrive(l_empty[1])
                    T.barrier_arrive(b_free[0])
                T.copy(sum_exp, stat[0, :])
                T.barrier_arrive(l0_ready[0])
                T.barrier_wait(l1_ready[0], 0)
                for i in T.Parallel(block_H):
                    sum_exp[i] += stat[1, i]
                for i, k in T.Parallel(block_H, half):
                    O_l[i, k] /= sum_exp[i]
                T.copy(O_l, Output[bid, hid * block_H : (hid + 1) * block_H, 0:half])
            elif tx < 256:  # scores of block b; output columns 256-511
                T.set_max_nreg(240, 1)
                q_pe = T.alloc_fragment([block_H, pe_dim], dtype)
                S = T.alloc_fragment([block_H, block_N], accum)
                P = T.alloc_fragment([block_H, block_N], dtype)
                O_r = T.alloc_fragment([block_H, half], accum)
                m = T.alloc_fragment([block_H], accum)
                m_prev = T.alloc_fragment([block_H], accum)
                m_a = T.alloc_fragment([block_H], accum)
                rescale = T.alloc_fragment([block_H], accum)
                row_sum = T.alloc_fragment([block_H], accum)
                sum_exp = T.alloc_fragment([block_H], accum)
                T.copy(Q_pe[bid, hid * block_H : (hid + 1) * block_H, :], q_pe)
                T.fill(O_r, 0)
                T.fill(sum_exp, 0)
                T.fill(m, -T.infinity(accum))
                for j in T.serial(n_pairs):
                    scores(q_pe, Q_l, Q_r, K_p, K_l, K_r, p_full, l_full, r_full, S, 1, j % 2)
                    T.barrier_arrive(p_empty[1])
                    T.barrier_arrive(l_empty[1])
                    T.copy(m, m_prev)
                    T.barrier_wait(ma_ready[0], j % 2)
                    T.copy(stat[0, :], m_a)
                    T.copy(m_a, m)
                    T.reduce_max(S, m, dim=1, clear=False)
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
                    # O_r first takes P_a (relative to m_a), then P_b (relative to m_b)
                    for i in T.Parallel(block_H):
                        rescale[i] = T.exp2(m_prev[i] * scale - m_a[i] * scale)
                    for i, k in T.Parallel(block_H, half):
                        O_r[i, k] *= rescale[i]
                    T.barrier_wait(pa_ready[0], j % 2)
                    T.barrier_wait(r_full[0], j % 2)
                    T.gemm(P_a, K_r[0, :, :], O_r)
                    T.barrier_arrive(r_empty[0])
                    T.barrier_arrive(a_free[0])
                    for i in T.Parallel(block_H):
                        rescale[i] = T.exp2(m_a[i] * scale - m[i] * scale)
                    for i, k in T.Parallel(block_H, half):
                        O_r[i, k] *= rescale[i]
                    T.gemm(P, K_r[1, :, :], O_r)
                    T.barrier_arrive(r_empty[1])
                T.barrier_wait(b_free[0], (n_pairs - 1) % 2)  # warpgroup 0 has read the last m_b
                T.copy(sum_exp, stat[1, :])
                T.barrier_arrive(l1_ready[0])
                T.barrier_wait(l0_ready[0], 0)
                for i in T.Parallel(block_H):
                    sum_exp[i] += stat[0, i]
                for i, k in T.Parallel(block_H, half):
                    O_r[i, k] /= sum_exp[i]
                T.copy(O_r, Output[bid, hid * block_H : (hid + 1) * block_H, half:dim])
            else:  # the producer: parts in the order their readers free them
                T.set_max_nreg(24, 0)
                for j in T.serial(n_pairs):
                    for s in T.unroll(2):
                        T.barrier_wait(p_empty[s], (j + 1) % 2)
                        T.tma_copy(
                            K_pe[bid, (2 * j + s) * block_N : (2 * j + s + 1) * block_N, 0, :],
                            K_p[s, :, :],
                            barrier=p_full[s],
                        )
                    for s in T.unroll(2):
                        T.barrier_wait(l_empty[s], (j + 1) % 2)
                        T.tma_copy(
                            KV[bid, (2 * j + s) * block_N : (2 * j + s + 1) * block_N, 0, 0:half],
                            K_l[s, :, :],
                            barrier=l_full[s],
                        )
                        T.barrier_wait(r_empty[s], (j + 1) % 2)
                        T.tma_copy(
                            KV[bid, (2 * j + s) * block_N : (2 * j + s + 1) * block_N, 0, half:dim],
                            K_r[s, :, :],
                            barrier=r_full[s],
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

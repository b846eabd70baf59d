"""FlashAttention backward (and the forward it needs), tensors in (batch, seq, heads, dim) layout;
multi-head attention, or grouped-query attention with `groups` query heads per key/value head.

Four kernels, run in this order:

1. `flashattn_fwd`: the forward pass, returning O and the log-sum-exp of every query row (LSE, kept
   in base 2: lse = log2(sum_j exp2(s_ij * scale))), the only softmax statistic the backward needs.
2. `flashattn_bwd_preprocess`: Delta_i = sum_d O_id * dO_id = rowsum(P ∘ dP), one float per row.
3. `flashattn_bwd`: one block per `block_M` keys of one key/value head. It keeps K, V and the dK, dV
   accumulators of its keys on chip and walks the query blocks (of every query head of its group),
   recomputing P from Q and the LSE instead of reading it back (FlashAttention-2's key-major loop):
       Sᵀ = K·Qᵀ,  Pᵀ = exp2(Sᵀ * scale - lse),  dPᵀ = V·dOᵀ,  dSᵀ = Pᵀ ∘ (dPᵀ - Delta) / sqrt(d)
       dV += Pᵀ·dO,  dK += dSᵀ·Q,  dQ += dS·K  (added atomically: see below)
4. `flashattn_bwd_postprocess`: dQ from its float32 accumulator to fp16/bf16.

`attention_backward` runs 2-4; `main()` checks O, dQ, dK and dV against torch autograd of
F.scaled_dot_product_attention in float32.
"""

import argparse

import torch
import torch.nn.functional as F

import tilelang
import tilelang.language as T

LOG2E = 1.44269504  # exp(x) = exp2(x * log2(e)): the scale below carries log2(e) so the kernels use exp2
FAST_MATH = {tilelang.PassConfigKey.TL_ENABLE_FAST_MATH: True}


@tilelang.jit(out_idx=[3, 4], pass_configs=FAST_MATH)
def flashattn_fwd(batch, heads, seq_len, dim, is_causal, groups=1, dtype="float16", block_M=64, block_N=64,
                  num_stages=1, threads=128):  # fmt: skip
    """O = softmax(Q·Kᵀ / sqrt(d))·V and LSE (base 2, per query row), for Q (batch, seq, heads, dim)
    and K, V (batch, seq, heads // groups, dim)."""
    scale = (1.0 / dim) ** 0.5 * LOG2E
    head_kv = heads // groups
    q_shape = [batch, seq_len, heads, dim]
    kv_shape = [batch, seq_len, head_kv, dim]
    accum_dtype = "float"
    # Keys after the query (causal) or past the end of the sequence are masked.
    needs_mask = is_causal or seq_len % block_N != 0

    def masked(query, key):
        return (key >= seq_len) | (key > query) if is_causal else key >= seq_len

    @T.prim_func
    def main(
        Q: T.Tensor(q_shape, dtype),
        K: T.Tensor(kv_shape, dtype),
        V: T.Tensor(kv_shape, dtype),
        Output: T.Tensor(q_shape, dtype),
        LSE: T.Tensor([batch, heads, seq_len], accum_dtype),
    ):
        with T.Kernel(T.ceildiv(seq_len, block_M), heads, batch, threads=threads) as (bx, by, bz):
            Q_shared = T.alloc_shared([block_M, dim], dtype)
            K_shared = T.alloc_shared([block_N, dim], dtype)
            V_shared = T.alloc_shared([block_N, dim], dtype)
            acc_s = T.alloc_fragment([block_M, block_N], accum_dtype)
            acc_s_cast = T.alloc_fragment([block_M, block_N], dtype)
            acc_o = T.alloc_fragment([block_M, dim], accum_dtype)
            row_max = T.alloc_fragment([block_M], accum_dtype)
            row_max_prev = T.alloc_fragment([block_M], accum_dtype)
            rescale = T.alloc_fragment([block_M], accum_dtype)
            block_sum = T.alloc_fragment([block_M], accum_dtype)
            row_sum = T.alloc_fragment([block_M], accum_dtype)

            T.copy(Q[bz, bx * block_M : (bx + 1) * block_M, by, :], Q_shared)
            T.fill(acc_o, 0)
            T.fill(row_sum, 0)
            T.fill(row_max, -T.infinity(accum_dtype))
            n_blocks = (
                T.min(T.ceildiv(seq_len, block_N), T.ceildiv((bx + 1) * block_M, block_N))
                if is_causal
                else T.ceildiv(seq_len, block_N)
            )
            for k in T.Pipelined(n_blocks, num_stages=num_stages):
                T.copy(K[bz, k * block_N : (k + 1) * block_N, by // groups, :], K_shared)
                if needs_mask:  # scores start at -inf where masked, else at 0
                    for i, j in T.Parallel(block_M, block_N):
                        acc_s[i, j] = T.if_then_else(
                            masked(bx * block_M + i, k * block_N + j), -T.infinity(accum_dtype), 0
                        )
                else:
                    T.clear(acc_s)
                T.gemm(Q_shared, K_shared, acc_s, transpose_B=True, policy=T.GemmWarpPolicy.FullRow)

                # Online softmax. A row this block masks entirely keeps its old (finite) max.
                T.copy(row_max, row_max_prev)
                T.reduce_max(acc_s, row_max, dim=1, clear=False)
                for i in T.Parallel(block_M):
                    rescale[i] = T.exp2(row_max_prev[i] * scale - row_max[i] * scale)
                for i, j in T.Parallel(block_M, block_N):
                    acc_s[i, j] = T.exp2(acc_s[i, j] * scale - row_max[i] * scale)
                T.reduce_sum(acc_s, block_sum, dim=1)
                for i in T.Parallel(block_M):
                    row_sum[i] = row_sum[i] * rescale[i] + block_sum[i]
                T.copy(acc_s, acc_s_cast)
                for i, j in T.Parallel(block_M, dim):
                    acc_o[i, j] *= rescale[i]
                T.copy(V[bz, k * block_N : (k + 1) * block_N, by // groups, :], V_shared)
                T.gemm(acc_s_cast, V_shared, acc_o, policy=T.GemmWarpPolicy.FullRow)
            for i, j in T.Parallel(block_M, dim):
                acc_o[i, j] /= row_sum[i]
            T.copy(acc_o, Output[bz, bx * block_M : (bx + 1) * block_M, by, :])
            # log2 of the softmax denominator: the backward gets P = exp2(s * scale - lse) in one step.
            for i in T.Parallel(block_M):
                row_sum[i] = T.log2(row_sum[i]) + row_max[i] * scale
            T.copy(row_sum, LSE[bz, by, bx * block_M : (bx + 1) * block_M])

    return main


@tilelang.jit(out_idx=[2], pass_configs=FAST_MATH)
def flashattn_bwd_preprocess(batch, heads, seq_len, dim, dtype="float16", block=32, threads=128):
    """Delta (batch, heads, seq) = rowsum(O ∘ dO), in float32: the term sum_j P_ij dP_ij of the
    softmax gradient, since sum_j P_ij dP_ij = sum_j P_ij (dO_i · V_j) = dO_i · O_i."""
    shape = [batch, seq_len, heads, dim]
    accum_dtype = "float"

    @T.prim_func
    def main(
        O: T.Tensor(shape, dtype),
        dO: T.Tensor(shape, dtype),
        Delta: T.Tensor([batch, heads, seq_len], accum_dtype),
    ):
        with T.Kernel(T.ceildiv(seq_len, block), heads, batch, threads=threads) as (bx, by, bz):
            o = T.alloc_fragment([block, dim], dtype)
            do = T.alloc_fragment([block, dim], dtype)
            prod = T.alloc_fragment([block, dim], accum_dtype)
            delta = T.alloc_fragment([block], accum_dtype)
            T.copy(O[bz, bx * block : (bx + 1) * block, by, :], o)
            T.copy(dO[bz, bx * block : (bx + 1) * block, by, :], do)
            for i, j in T.Parallel(block, dim):
                prod[i, j] = T.cast(o[i, j], accum_dtype) * T.cast(do[i, j], accum_dtype)
            T.reduce_sum(prod, delta, dim=1)
            T.copy(delta, Delta[bz, by, bx * block : (bx + 1) * block])

    return main


@tilelang.jit(out_idx=[7, 8], pass_configs=FAST_MATH)
def flashattn_bwd(batch, heads, seq_len, dim, is_causal, groups=1, dtype="float16", block_M=128, block_N=64,
                  num_stages=2, threads=256):  # fmt: skip
    """dK and dV (returned, in `dtype`), and dQ added into the float32 `dQ_accum`, which the caller
    zeroes. One block per `block_M` keys of one key/value head; `block_N` queries per step.

    Tile sizes: the block holds dK and dV in float32 registers (2 * block_M * dim floats) beside the
    two (block_M, block_N) score tiles, so block_M * dim sets the register budget: 128 keys over two
    warpgroups (256 threads) at d128 is about the limit (ptxas: 232 registers a thread on sm_90a).
    128 keys make every gemm but dQ's 128 rows tall, one 64-row wgmma per warpgroup on Hopper; 64
    queries a step keep dQ's gemm 64 rows tall (it splits its N = dim over the two warpgroups, which
    wgmma can do at d128; at d64 a warpgroup's 32 columns are half a swizzle panel of K, so that one
    gemm runs as mma.sync). num_stages=2 loads the next Q, dO, LSE and Delta tiles while this step's
    five gemms run (on Hopper from a producer warpgroup with TMA, on Ampere with cp.async).
    """
    sm_scale = (1.0 / dim) ** 0.5
    scale = sm_scale * LOG2E
    head_kv = heads // groups
    q_shape = [batch, seq_len, heads, dim]
    kv_shape = [batch, seq_len, head_kv, dim]
    accum_dtype = "float"

    # P = 0 where the key comes after the query (causal), and for query rows past the end of the
    # sequence (their Q, dO and LSE are reads past the end, not values of a row). Keys past the end
    # need no mask: their K rows read as 0, so they add nothing to dQ, and their dK and dV rows are
    # not stored.
    needs_mask = is_causal or seq_len % block_N != 0

    def masked(query, key):
        return (query >= seq_len) | (key > query) if is_causal else query >= seq_len

    @T.prim_func
    def main(
        Q: T.Tensor(q_shape, dtype),
        K: T.Tensor(kv_shape, dtype),
        V: T.Tensor(kv_shape, dtype),
        dO: T.Tensor(q_shape, dtype),
        LSE: T.Tensor([batch, heads, seq_len], accum_dtype),
        Delta: T.Tensor([batch, heads, seq_len], accum_dtype),
        dQ_accum: T.Tensor(q_shape, accum_dtype),
        dK: T.Tensor(kv_shape, dtype),
        dV: T.Tensor(kv_shape, dtype),
    ):
        with T.Kernel(T.ceildiv(seq_len, block_M), head_kv, batch, threads=threads) as (bx, by, bz):
            K_shared = T.alloc_shared([block_M, dim], dtype)
            V_shared = T.alloc_shared([block_M, dim], dtype)
            Q_shared = T.alloc_shared([block_N, dim], dtype)
            dO_shared = T.alloc_shared([block_N, dim], dtype)
            lse_shared = T.alloc_shared([block_N], accum_dtype)
            delta_shared = T.alloc_shared([block_N], accum_dtype)
            dsT_shared = T.alloc_shared([block_M, block_N], dtype)
            # Scores transposed (keys are rows): Pᵀ and dSᵀ are then the register A operands of the
            # dV and dK gemms, and the block's dK, dV rows are its own keys.
            pT = T.alloc_fragment([block_M, block_N], accum_dtype)
            pT_cast = T.alloc_fragment([block_M, block_N], dtype)
            dpT = T.alloc_fragment([block_M, block_N], accum_dtype)
            dsT_cast = T.alloc_fragment([block_M, block_N], dtype)
            dk = T.alloc_fragment([block_M, dim], accum_dtype)
            dv = T.alloc_fragment([block_M, dim], accum_dtype)
            dq = T.alloc_fragment([block_N, dim], accum_dtype)

            T.copy(K[bz, bx * block_M : (bx + 1) * block_M, by, :], K_shared)
            T.copy(V[bz, bx * block_M : (bx + 1) * block_M, by, :], V_shared)
            T.clear(dk)
            T.clear(dv)

            # Step t visits query block t // groups of query head by * groups + t % groups: for GQA
            # the block sums dK and dV over its whole group in registers, so they need no atomics and
            # no reduction afterwards. Causal: query blocks before the one holding this block's first
            # key see none of its keys, so the loop starts at the diagonal.
            first = (bx * block_M) // block_N if is_causal else 0
            for t in T.Pipelined(first * groups, T.ceildiv(seq_len, block_N) * groups, num_stages=num_stages):
                q0 = t // groups * block_N  # first query row of this step
                h = by * groups + t % groups  # its query head
                T.copy(Q[bz, q0 : q0 + block_N, h, :], Q_shared)
                T.clear(pT)
                T.gemm(K_shared, Q_shared, pT, transpose_B=True, policy=T.GemmWarpPolicy.FullRow)
                T.copy(dO[bz, q0 : q0 + block_N, h, :], dO_shared)
                T.clear(dpT)
                T.gemm(V_shared, dO_shared, dpT, transpose_B=True, policy=T.GemmWarpPolicy.FullRow)

                T.copy(LSE[bz, h, q0 : q0 + block_N], lse_shared)
                for i, j in T.Parallel(block_M, block_N):
                    if needs_mask:
                        pT[i, j] = T.if_then_else(
                            masked(q0 + j, bx * block_M + i), 0, T.exp2(pT[i, j] * scale - lse_shared[j])
                        )
                    else:
                        pT[i, j] = T.exp2(pT[i, j] * scale - lse_shared[j])
                T.copy(pT, pT_cast)
                T.gemm(pT_cast, dO_shared, dv, policy=T.GemmWarpPolicy.FullRow)

                T.copy(Delta[bz, h, q0 : q0 + block_N], delta_shared)
                # 1/sqrt(d) goes into dS once, so dK and dQ need no scaling afterwards.
                for i, j in T.Parallel(block_M, block_N):
                    dsT_cast[i, j] = pT[i, j] * (dpT[i, j] - delta_shared[j]) * sm_scale
                T.gemm(dsT_cast, Q_shared, dk, policy=T.GemmWarpPolicy.FullRow)

                # dQ of these queries sums over every key block, and other blocks own those: add this
                # block's share atomically into float32 (FlashAttention-2's choice: one pass, cheaper
                # than a second kernel recomputing P and dP per query block; the order of the adds,
                # hence the last bits of dQ, varies from run to run). dS = (dSᵀ)ᵀ is read from shared
                # memory as a transposed A operand.
                T.copy(dsT_cast, dsT_shared)
                T.clear(dq)
                T.gemm(dsT_shared, K_shared, dq, transpose_A=True)
                T.atomic_add(dQ_accum[bz, q0 : q0 + block_N, h, :], dq)

            T.copy(dk, dK[bz, bx * block_M : (bx + 1) * block_M, by, :])
            T.copy(dv, dV[bz, bx * block_M : (bx + 1) * block_M, by, :])

    return main


@tilelang.jit(out_idx=[1], pass_configs=FAST_MATH)
def flashattn_bwd_postprocess(batch, heads, seq_len, dim, dtype="float16", block=64, threads=128):
    """dQ: its float32 accumulator cast to `dtype`."""
    shape = [batch, seq_len, heads, dim]

    @T.prim_func
    def main(dQ_accum: T.Tensor(shape, "float"), dQ: T.Tensor(shape, dtype)):
        with T.Kernel(T.ceildiv(seq_len, block), heads, batch, threads=threads) as (bx, by, bz):
            T.copy(dQ_accum[bz, bx * block : (bx + 1) * block, by, :], dQ[bz, bx * block : (bx + 1) * block, by, :])

    return main


def attention_backward(q, k, v, o, lse, do, is_causal, block_M=128, block_N=64, num_stages=2, threads=256):
    """dQ, dK, dV of attention from the forward's O and LSE, with the tilelang kernels."""
    batch, seq_len, heads, dim = q.shape
    groups = heads // k.shape[2]
    dtype = str(q.dtype).removeprefix("torch.")
    prep = flashattn_bwd_preprocess(batch, heads, seq_len, dim, dtype)
    bwd = flashattn_bwd(batch, heads, seq_len, dim, is_causal, groups, dtype, block_M, block_N, num_stages, threads)
    post = flashattn_bwd_postprocess(batch, heads, seq_len, dim, dtype)
    delta = prep(o, do)
    dq_accum = torch.zeros(q.shape, dtype=torch.float32, device=q.device)
    dk, dv = bwd(q, k, v, do, lse, delta, dq_accum)
    return post(dq_accum), dk, dv


def make_inputs(batch, heads, head_kv, seq_len, dim, dtype=torch.float16, device="cuda"):
    """Random Q, K, V and dO in (batch, seq, heads, dim) layout."""
    q = torch.randn(batch, seq_len, heads, dim, device=device, dtype=dtype)
    k, v = (torch.randn(batch, seq_len, head_kv, dim, device=device, dtype=dtype) for _ in range(2))
    do = torch.randn_like(q)
    return q, k, v, do


def ref_program(q, k, v, do, is_causal):
    """O, dQ, dK, dV by torch autograd of scaled_dot_product_attention in float32; each key/value
    head repeated for its group of query heads (its gradient sums over the group)."""
    groups = q.shape[2] // k.shape[2]
    q, k, v = (x.detach().float().requires_grad_() for x in (q, k, v))
    qh, kh, vh = (x.transpose(1, 2) for x in (q, k, v))  # -> (batch, heads, seq, dim)
    kh, vh = (x.repeat_interleave(groups, dim=1) for x in (kh, vh))
    o = F.scaled_dot_product_attention(qh, kh, vh, is_causal=is_causal).transpose(1, 2)
    o.backward(do.float())
    return o.detach(), q.grad, k.grad, v.grad


def main(batch=1, heads=4, head_kv=4, seq_len=256, dim=64, is_causal=False, dtype="float16", block_M=128, block_N=64,
         num_stages=2, threads=256, device=None):  # fmt: skip
    device = device or ("cuda" if torch.cuda.is_available() else "cpu")
    with tilelang.use_target(device):  # the kernels compile for where the tensors live
        torch_dtype = getattr(torch, dtype)
        q, k, v, do = make_inputs(batch, heads, head_kv, seq_len, dim, torch_dtype, device)
        groups = heads // head_kv
        o, lse = flashattn_fwd(batch, heads, seq_len, dim, is_causal, groups, dtype)(q, k, v)
        dq, dk, dv = attention_backward(q, k, v, o, lse, do, is_causal, block_M, block_N, num_stages, threads)
        # Elementwise tolerance, and a bound on the relative error of the whole tensor, which catches a
        # wrong or missing block among many small values. Rounding P, dS and the outputs alone gives
        # relative errors of about 3e-4 in fp16 and 2.5e-3 in bf16 (8 bits of mantissa to fp16's 11).
        tol, rel_tol = (1e-2, 2e-3) if dtype == "float16" else (3e-2, 1e-2)
        for name, ours, ref in zip(("O", "dQ", "dK", "dV"), (o, dq, dk, dv), ref_program(q, k, v, do, is_causal)):
            torch.testing.assert_close(ours.float(), ref, rtol=tol, atol=tol, msg=lambda m, name=name: f"{name}: {m}")
            rel = ((ours.float() - ref).norm() / ref.norm()).item()
            assert rel < rel_tol, f"{name}: relative error {rel:.2e} (at most {rel_tol:.0e} expected)"
        print("flash attention backward: all checks passed")


if __name__ == "__main__":
    parser = argparse.ArgumentParser()
    parser.add_argument("--batch", type=int, default=2)
    parser.add_argument("--heads", type=int, default=8)
    parser.add_argument("--head_kv", type=int, default=8, help="fewer than --heads: grouped-query attention")
    parser.add_argument("--seq_len", type=int, default=1024)
    parser.add_argument("--dim", type=int, default=128)
    parser.add_argument("--is_causal", action="store_true")
    parser.add_argument("--dtype", default="float16", choices=["float16", "bfloat16"])
    parser.add_argument("--device", choices=["cuda", "cpu"], help="default: cuda when torch sees a GPU, else cpu")
    args = parser.parse_args()
    main(args.batch, args.heads, args.head_kv, args.seq_len, args.dim, args.is_causal, args.dtype, device=args.device)

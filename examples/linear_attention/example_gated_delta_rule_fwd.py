"""Gated delta rule forward (Gated DeltaNet), chunk by chunk, Q, K, V in (batch, seq, heads, dim) layout,
checked against torch. The recurrence over a state S of shape (dim_k, dim_v), with a gate
alpha_t = exp(g_t) in (0, 1] and a write strength beta_t in (0, 1):

    S_t = alpha_t (I - beta_t k_t k_tᵀ) S_{t-1} + beta_t k_t v_tᵀ,   o_t = scale * S_tᵀ q_t

Within a chunk of C tokens starting from the state S_0, with G the log-gates cumulated from the
chunk's start and gamma = exp(G), the state is S_t = gamma_t S_0 + sum_{s <= t} (gamma_t / gamma_s)
k_s u_sᵀ for "new values" u (the WY / UT form of the products of Householder-like factors):

    L = strictly lower part of diag(beta) (K·Kᵀ) ∘ (gamma_i / gamma_j),   T = (I + L)⁻¹
    U = T·diag(beta)·V  -  T·diag(beta * gamma)·K · S_0
    O = scale * (diag(gamma) Q·S_0  +  ((Q·Kᵀ) ∘ (gamma_i / gamma_j), j <= i)·U)
    S_C = gamma_C S_0  +  (K ∘ gamma_C / gamma)ᵀ·U

Everything but the S_0 terms depends on the chunk alone, so two kernels: `gdn_prepare` computes,
for all chunks at once (one block each), T, W = -T·diag(beta * gamma)·K, U0 = T·diag(beta)·V and the
masked, decayed scores; `gdn_recurrence` then walks the chunks in order with only matrix products
(U = U0 + W·S_0, O, S_C): one block owns one head and `block_V` columns of V and keeps S in registers
(float32) over the chunks (T.Pipelined). (With T inside the walk, every step of the walk waited for
a 64-step substitution, once per block of V columns.) The matrix products run on tensor cores
(fp16/bf16 operands, float32 accumulators). T is the inverse of a unit lower-triangular matrix, found
by forward substitution in float32 in shared memory: for each column m, every row below it takes
away L[i, m] times row m. Sequence lengths that are not a multiple of the chunk work as they are:
the last chunk's rows past the end load as zeros (k = 0, beta = 0: they change nothing) and are not
stored.
"""

import argparse

import torch
import torch.nn.functional as F

import tilelang
import tilelang.language as T


@tilelang.jit(pass_configs={tilelang.PassConfigKey.TL_ENABLE_FAST_MATH: True})
def gdn_prepare(batch, heads, seq_len, dim_k, dim_v, dtype="float16", scale=None, chunk=64, threads=128):
    """Everything of a chunk that does not need the state, for all chunks at once (one block each):
    the cumulated log-gates Gc, W = -T diag(beta * gamma) K, U0 = T diag(beta) V (float32) and the
    masked, decayed scores A = scale * (Q·Kᵀ) ∘ (gamma_i / gamma_j), j <= i. Outputs are laid out
    (batch, heads, chunks * chunk, ...): a chunk's rows are one tile, the padded rows zeros."""
    scale = dim_k**-0.5 if scale is None else scale
    n = (seq_len + chunk - 1) // chunk
    accum_dtype = "float"

    @T.macro
    def substitution_step(L_shared, src, dst, m):
        # dst = src with L[i, m] times row m taken away from every row i below row m.
        for i, j in T.Parallel(chunk, chunk):
            dst[i, j] = src[i, j] - T.if_then_else(i > m, L_shared[i, m], 0) * src[m, j]

    @T.prim_func
    def main(
        Q: T.Tensor([batch, seq_len, heads, dim_k], dtype),
        K: T.Tensor([batch, seq_len, heads, dim_k], dtype),
        V: T.Tensor([batch, seq_len, heads, dim_v], dtype),
        G: T.Tensor([batch, heads, seq_len], accum_dtype),
        Beta: T.Tensor([batch, heads, seq_len], accum_dtype),
        Gc: T.Tensor([batch, heads, n * chunk], accum_dtype),
        W: T.Tensor([batch, heads, n * chunk, dim_k], dtype),
        U0: T.Tensor([batch, heads, n * chunk, dim_v], accum_dtype),
        Attn: T.Tensor([batch, heads, n * chunk, chunk], dtype),
    ):
        with T.Kernel(n, heads, batch, threads=threads) as (c, bh, bb):
            Q_shared = T.alloc_shared([chunk, dim_k], dtype)
            K_shared = T.alloc_shared([chunk, dim_k], dtype)
            V_shared = T.alloc_shared([chunk, dim_v], dtype)
            g_shared = T.alloc_shared([chunk], accum_dtype)
            beta_shared = T.alloc_shared([chunk], accum_dtype)
            G_shared = T.alloc_shared([chunk], accum_dtype)  # g cumulated from the chunk's start
            L_shared = T.alloc_shared([chunk, chunk], accum_dtype)
            T_shared = T.alloc_shared([chunk, chunk], accum_dtype)  # (I + L)⁻¹
            T_next = T.alloc_shared([chunk, chunk], accum_dtype)
            K_work = T.alloc_shared([chunk, dim_k], dtype)  # -diag(beta * gamma) K
            V_work = T.alloc_shared([chunk, dim_v], dtype)  # diag(beta) V
            A = T.alloc_fragment([chunk, chunk], accum_dtype)
            A_cast = T.alloc_fragment([chunk, chunk], dtype)
            T_cast = T.alloc_fragment([chunk, chunk], dtype)
            G_frag = T.alloc_fragment([chunk], accum_dtype)
            W_frag = T.alloc_fragment([chunk, dim_k], accum_dtype)
            U_frag = T.alloc_fragment([chunk, dim_v], accum_dtype)

            # Rows past the end load as zeros (k = 0, beta = 0, g = 0: they change nothing).
            T.copy(Q[bb, c * chunk : (c + 1) * chunk, bh, :], Q_shared)
            T.copy(K[bb, c * chunk : (c + 1) * chunk, bh, :], K_shared)
            T.copy(V[bb, c * chunk : (c + 1) * chunk, bh, :], V_shared)
            T.copy(G[bb, bh, c * chunk : (c + 1) * chunk], g_shared)
            T.copy(Beta[bb, bh, c * chunk : (c + 1) * chunk], beta_shared)
            # G_i = sum_{j <= i} g_j as a masked row sum (as in example_linear_attn_fwd.py).
            for i, j in T.Parallel(chunk, chunk):
                A[i, j] = T.if_then_else(j <= i, g_shared[j], 0)
            T.reduce_sum(A, G_frag, dim=1)
            T.copy(G_frag, G_shared)
            T.copy(G_shared, Gc[bb, bh, c * chunk : (c + 1) * chunk])

            # The scores, masked and decayed: A = scale * (Q·Kᵀ) ∘ (gamma_i / gamma_j), j <= i.
            T.gemm(Q_shared, K_shared, A, transpose_B=True, clear_accum=True, policy=T.GemmWarpPolicy.FullRow)
            for i, j in T.Parallel(chunk, chunk):
                A[i, j] = T.if_then_else(j <= i, A[i, j] * (scale * T.exp(G_shared[i] - G_shared[j])), 0)
            T.copy(A, A_cast)
            T.copy(A_cast, Attn[bb, bh, c * chunk : (c + 1) * chunk, :])

            # L, then T = (I + L)⁻¹ by forward substitution: row m of T is final once the rows above
            # it have been taken away from it.
            T.gemm(K_shared, K_shared, A, transpose_B=True, clear_accum=True, policy=T.GemmWarpPolicy.FullRow)
            for i, j in T.Parallel(chunk, chunk):
                L_shared[i, j] = T.if_then_else(j < i, A[i, j] * beta_shared[i] * T.exp(G_shared[i] - G_shared[j]), 0)
            # Two tiles, each step reading one and writing the other, so that a step needs one
            # barrier. (Updated in place, T would get a barrier before every few rows of every step:
            # the barrier analysis cannot tell that step m never writes row m, which it reads.)
            for i, j in T.Parallel(chunk, chunk):
                T_shared[i, j] = T.if_then_else(i == j, 1, 0)
            for m2 in T.serial(chunk // 2):
                substitution_step(L_shared, T_shared, T_next, 2 * m2)
                substitution_step(L_shared, T_next, T_shared, 2 * m2 + 1)
            T.copy(T_shared, T_cast)

            # W = -T diag(beta * gamma) K, U0 = T diag(beta) V.
            for i, d in T.Parallel(chunk, dim_k):
                K_work[i, d] = K_shared[i, d] * (-beta_shared[i] * T.exp(G_shared[i]))
            for i, d in T.Parallel(chunk, dim_v):
                V_work[i, d] = V_shared[i, d] * beta_shared[i]
            T.gemm(T_cast, K_work, W_frag, clear_accum=True, policy=T.GemmWarpPolicy.FullRow)
            T.gemm(T_cast, V_work, U_frag, clear_accum=True, policy=T.GemmWarpPolicy.FullRow)
            T.copy(W_frag, W[bb, bh, c * chunk : (c + 1) * chunk, :])
            T.copy(U_frag, U0[bb, bh, c * chunk : (c + 1) * chunk, :])

    return main


@tilelang.jit(out_idx=[-1], pass_configs={tilelang.PassConfigKey.TL_ENABLE_FAST_MATH: True})
def gdn_recurrence(batch, heads, seq_len, dim_k, dim_v, dtype="float16", scale=None, chunk=64, block_V=64,
                   num_stages=1, threads=128):  # fmt: skip
    """The state's walk over the chunks, from `gdn_prepare`'s outputs: per chunk U = U0 + W·S_0, then
    O = diag(scale * gamma) Q·S_0 + A·U and S_C = gamma_C S_0 + (K ∘ gamma_C / gamma)ᵀ·U. One block
    owns one head and `block_V` columns of V and keeps S in registers (float32) over the chunks."""
    assert dim_v % block_V == 0, "block_V must divide dim_v"
    scale = dim_k**-0.5 if scale is None else scale
    n = (seq_len + chunk - 1) // chunk
    accum_dtype = "float"

    @T.prim_func
    def main(
        Q: T.Tensor([batch, seq_len, heads, dim_k], dtype),
        K: T.Tensor([batch, seq_len, heads, dim_k], dtype),
        Gc: T.Tensor([batch, heads, n * chunk], accum_dtype),
        W: T.Tensor([batch, heads, n * chunk, dim_k], dtype),
        U0: T.Tensor([batch, heads, n * chunk, dim_v], accum_dtype),
        Attn: T.Tensor([batch, heads, n * chunk, chunk], dtype),
        O: T.Tensor([batch, seq_len, heads, dim_v], dtype),
    ):
        with T.Kernel(dim_v // block_V, heads, batch, threads=threads) as (bv, bh, bb):
            Q_shared = T.alloc_shared([chunk, dim_k], dtype)
            K_shared = T.alloc_shared([chunk, dim_k], dtype)
            W_shared = T.alloc_shared([chunk, dim_k], dtype)
            A_shared = T.alloc_shared([chunk, chunk], dtype)
            U0_shared = T.alloc_shared([chunk, block_V], accum_dtype)
            G_shared = T.alloc_shared([chunk], accum_dtype)
            K_work = T.alloc_shared([chunk, dim_k], dtype)  # K ∘ gamma_C / gamma
            U_shared = T.alloc_shared([chunk, block_V], dtype)
            S_shared = T.alloc_shared([dim_k, block_V], dtype)  # the state as an operand
            O_shared = T.alloc_shared([chunk, block_V], dtype)
            # Per-token factors, one exp per token rather than one per element they scale.
            q_decay = T.alloc_shared([chunk], accum_dtype)  # scale * gamma_i
            k_decay = T.alloc_shared([chunk], accum_dtype)  # gamma_C / gamma_j
            s_decay = T.alloc_var(accum_dtype)  # gamma_C
            U = T.alloc_fragment([chunk, block_V], accum_dtype)
            O_frag = T.alloc_fragment([chunk, block_V], accum_dtype)
            S = T.alloc_fragment([dim_k, block_V], accum_dtype)

            T.clear(S)
            T.clear(S_shared)
            for c in T.Pipelined(n, num_stages=num_stages):
                T.copy(Q[bb, c * chunk : (c + 1) * chunk, bh, :], Q_shared)
                T.copy(K[bb, c * chunk : (c + 1) * chunk, bh, :], K_shared)
                T.copy(W[bb, bh, c * chunk : (c + 1) * chunk, :], W_shared)
                T.copy(Attn[bb, bh, c * chunk : (c + 1) * chunk, :], A_shared)
                T.copy(Gc[bb, bh, c * chunk : (c + 1) * chunk], G_shared)
                # Through shared memory, so that the pipeline loads it ahead as it does the other tiles.
                T.copy(U0[bb, bh, c * chunk : (c + 1) * chunk, bv * block_V : (bv + 1) * block_V], U0_shared)
                for i in T.Parallel(chunk):
                    q_decay[i] = scale * T.exp(G_shared[i])
                for i in T.Parallel(chunk):
                    k_decay[i] = T.exp(G_shared[chunk - 1] - G_shared[i])
                s_decay = T.exp(G_shared[chunk - 1])

                # U = U0 + W·S_0 (W holds the minus sign).
                T.copy(U0_shared, U)
                T.gemm(W_shared, S_shared, U, policy=T.GemmWarpPolicy.FullRow)
                T.copy(U, U_shared)

                # O = diag(scale * gamma) Q·S_0 + A·U (A carries its `scale` from gdn_prepare).
                T.gemm(Q_shared, S_shared, O_frag, clear_accum=True, policy=T.GemmWarpPolicy.FullRow)
                for i, j in T.Parallel(chunk, block_V):
                    O_frag[i, j] *= q_decay[i]
                T.gemm(A_shared, U_shared, O_frag, policy=T.GemmWarpPolicy.FullRow)
                T.copy(O_frag, O_shared)
                T.copy(O_shared, O[bb, c * chunk : (c + 1) * chunk, bh, bv * block_V : (bv + 1) * block_V])

                # S = gamma_C S_0 + (K ∘ gamma_C / gamma)ᵀ U.
                for i, d in T.Parallel(chunk, dim_k):
                    K_work[i, d] = K_shared[i, d] * k_decay[i]
                for i, j in T.Parallel(dim_k, block_V):
                    S[i, j] *= s_decay
                T.gemm(K_work, U_shared, S, transpose_A=True)
                T.copy(S, S_shared)

    return main


def gated_delta_rule_fwd(batch, heads, seq_len, dim_k, dim_v, dtype="float16", scale=None, chunk=64, block_V=64,
                         num_stages=1, threads=128):  # fmt: skip
    """O (batch, seq, heads, dim_v) = kernel(Q, K, V, G, Beta): Q, K (batch, seq, heads, dim_k), V (batch,
    seq, heads, dim_v), and float32 log-gates G and write strengths Beta, (batch, heads, seq) each. K's
    rows should have norm <= 1 (l2-normalized, as Gated DeltaNet does) for the recurrence to be stable.
    Two kernels: `gdn_prepare` over all chunks at once, then `gdn_recurrence` along them."""
    prepare = gdn_prepare(batch, heads, seq_len, dim_k, dim_v, dtype, scale, chunk, threads)
    recurrence = gdn_recurrence(batch, heads, seq_len, dim_k, dim_v, dtype, scale, chunk, block_V, num_stages,
                                threads)  # fmt: skip
    rows = (batch, heads, (seq_len + chunk - 1) // chunk * chunk)  # whole chunks

    def kernel(Q, K, V, G, Beta):
        Gc = torch.empty(rows, device=Q.device, dtype=torch.float32)
        W = torch.empty(*rows, dim_k, device=Q.device, dtype=Q.dtype)
        U0 = torch.empty(*rows, dim_v, device=Q.device, dtype=torch.float32)
        Attn = torch.empty(*rows, chunk, device=Q.device, dtype=Q.dtype)
        prepare(Q, K, V, G, Beta, Gc, W, U0, Attn)
        return recurrence(Q, K, Gc, W, U0, Attn)

    return kernel


def ref_recurrent(Q, K, V, g, beta, scale=None):
    """The recurrence token by token in float32: S = alpha S, S -= beta k (kᵀ S), S += beta k vᵀ."""
    batch, seq_len, heads, dim_k = Q.shape
    scale = dim_k**-0.5 if scale is None else scale
    q, k, v = (x.float() for x in (Q, K, V))
    S = torch.zeros(batch, heads, dim_k, V.shape[-1], dtype=torch.float32, device=Q.device)
    out = torch.empty(V.shape, dtype=torch.float32, device=Q.device)
    for t in range(seq_len):
        k_t, b_t = k[:, t], beta[:, :, t, None, None].float()
        S = S * g[:, :, t, None, None].float().exp()
        S = S + b_t * k_t[..., :, None] * (v[:, t, :, None, :] - torch.einsum("bhk,bhkv->bhv", k_t, S)[..., None, :])
        out[:, t] = scale * torch.einsum("bhk,bhkv->bhv", q[:, t], S)
    return out.to(Q.dtype)


def ref_chunked(Q, K, V, g, beta, scale=None, chunk=64):
    """The kernel's algorithm in torch, in float32: (I + L)⁻¹ of every chunk by one batched triangular
    solve, then a loop over the chunks carrying the state."""
    batch, seq_len, heads, dim_k = Q.shape
    scale = dim_k**-0.5 if scale is None else scale
    n = -(-seq_len // chunk)
    pad = n * chunk - seq_len  # zero tokens at the end (k = 0, beta = 0): they change nothing

    def chunks(x):  # (batch, seq, heads, d) -> (batch, heads, chunks, chunk, d) in float32
        x = F.pad(x.transpose(1, 2).float(), (0, 0, 0, pad))
        return x.reshape(batch, heads, n, chunk, x.shape[-1])

    q, k, v = chunks(Q), chunks(K), chunks(V)
    G = F.pad(g.float(), (0, pad)).reshape(batch, heads, n, chunk).cumsum(-1)
    b = F.pad(beta.float(), (0, pad)).reshape(batch, heads, n, chunk, 1)
    decay = (G[..., :, None] - G[..., None, :]).tril().exp()  # gamma_i / gamma_j where j <= i
    eye = torch.eye(chunk, device=Q.device)
    L = (b * (k @ k.transpose(-1, -2)) * decay).tril(-1)
    T_inv = torch.linalg.solve_triangular(eye + L, eye.expand_as(L), upper=False, unitriangular=True)
    u0, w = T_inv @ (b * v), T_inv @ (b * G.exp()[..., None] * k)
    attn = (q @ k.transpose(-1, -2) * decay).tril() * scale
    S = torch.zeros(batch, heads, dim_k, V.shape[-1], device=Q.device)
    out = torch.empty_like(v)
    for c in range(n):
        u = u0[:, :, c] - w[:, :, c] @ S
        out[:, :, c] = (q[:, :, c] * (scale * G[:, :, c, :, None].exp())) @ S + attn[:, :, c] @ u
        g_last = G[:, :, c, -1:, None]
        S = S * g_last.exp() + (k[:, :, c] * (g_last - G[:, :, c, :, None]).exp()).transpose(-1, -2) @ u
    return out.reshape(batch, heads, n * chunk, -1)[:, :, :seq_len].transpose(1, 2).to(Q.dtype)


def make_inputs(batch, heads, seq_len, dim_k, dim_v, dtype, device):
    """Random Q, K (l2-normalized rows, as Gated DeltaNet keeps them), V, log-gates near 0 and write
    strengths in (0, 1)."""
    torch_dtype = getattr(torch, dtype)
    Q = torch.randn(batch, seq_len, heads, dim_k, device=device)
    K = F.normalize(torch.randn(batch, seq_len, heads, dim_k, device=device), dim=-1)
    V = torch.randn(batch, seq_len, heads, dim_v, device=device, dtype=torch_dtype)
    g = F.logsigmoid(torch.randn(batch, heads, seq_len, device=device) + 4)
    beta = torch.sigmoid(torch.randn(batch, heads, seq_len, device=device))
    return Q.to(torch_dtype), K.to(torch_dtype), V, g, beta


def main(batch=1, heads=4, seq_len=256, dim_k=64, dim_v=64, dtype="float16", chunk=64, block_V=64, num_stages=1,
         threads=128, device=None):  # fmt: skip
    device = device or ("cuda" if torch.cuda.is_available() else "cpu")
    with tilelang.use_target(device):  # the kernels compile for where the tensors live
        kernel = gated_delta_rule_fwd(batch, heads, seq_len, dim_k, dim_v, dtype, None, chunk, block_V, num_stages,
                                      threads)  # fmt: skip
        inputs = make_inputs(batch, heads, seq_len, dim_k, dim_v, dtype, device)
        out = kernel(*inputs)
        tol = 2e-2 if dtype == "float16" else 5e-2
        torch.testing.assert_close(out, ref_chunked(*inputs), rtol=tol, atol=tol)
        if seq_len <= 512:  # the token-by-token recurrence too, where it is quick
            torch.testing.assert_close(out, ref_recurrent(*inputs), rtol=tol, atol=tol)
        print("gated delta rule: all checks passed")


if __name__ == "__main__":
    parser = argparse.ArgumentParser()
    parser.add_argument("--batch", type=int, default=8)
    parser.add_argument("--heads", type=int, default=32)
    parser.add_argument("--seq_len", type=int, default=4096)
    parser.add_argument("--dim_k", type=int, default=128)
    parser.add_argument("--dim_v", type=int, default=128)
    parser.add_argument("--dtype", choices=["float16", "bfloat16"], default="float16")
    parser.add_argument("--device", choices=["cuda", "cpu"], help="default: cuda when torch sees a GPU, else cpu")
    args = parser.parse_args()
    main(args.batch, args.heads, args.seq_len, args.dim_k, args.dim_v, args.dtype, device=args.device)

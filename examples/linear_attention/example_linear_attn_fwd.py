"""Causal linear attention forward, chunk by chunk, tensors in (batch, seq, heads, dim) layout, checked
against torch.

    o_t = scale * sum_{s <= t} (q_t · k_s) * exp(G_t - G_s) * v_s,   G_t = g_1 + ... + g_t

with an optional log-decay g <= 0: none (plain linear attention), one per head (RetNet's retention:
g = log(gamma_h) on every token), or one per token and head (GLA-style scalar gates). The same sum
as a recurrence over a state S of shape (dim_k, dim_v):

    S_t = exp(g_t) * S_{t-1} + k_t v_tᵀ,   o_t = scale * S_tᵀ q_t

One block owns one head and `block_V` columns of V; it walks the sequence in chunks of `chunk`
tokens (T.Pipelined, so the next chunk's Q, K, V load while this one computes) and keeps S in
registers (float32) from chunk to chunk. With G the decay cumulated from the chunk's start:

    intra-chunk:  A = (Q·Kᵀ) ∘ M,  M_ij = scale * exp(G_i - G_j) for j <= i, else 0
    O = scale * exp(G_i) * (Q·S)  +  A·V           (S: the state before the chunk)
    S = exp(G_last) * S  +  Kᵀ·(exp(G_last - G_j) * V)

Q·Kᵀ, Q·S, A·V and Kᵀ·V run on tensor cores (fp16/bf16 operands, float32 accumulators); S is
rounded to the input dtype as an operand of Q·S only. Sequence lengths that are not a multiple of
the chunk work as they are: the last chunk's rows past the end load as zeros (so they add nothing
to S) and are not stored.
"""

import argparse

import torch
import torch.nn.functional as F

import tilelang
import tilelang.language as T

DECAYS = (None, "head", "token")


@tilelang.jit(out_idx=[-1], pass_configs={tilelang.PassConfigKey.TL_ENABLE_FAST_MATH: True})
def linear_attn_fwd(batch, heads, seq_len, dim_k, dim_v, decay=None, dtype="float16", scale=None, chunk=64,
                    block_V=64, num_stages=2, threads=128):  # fmt: skip
    """O (batch, seq, heads, dim_v) from Q, K (batch, seq, heads, dim_k), V (batch, seq, heads, dim_v)
    and, with a decay, its log-decay G: float32 (heads,) for decay="head", (batch, heads, seq) for
    decay="token" (each head's gates contiguous: a chunk of them is one TMA tile on sm_90a). The
    kernel is called as kernel(Q, K, V) or kernel(Q, K, V, G)."""
    assert decay in DECAYS, f"decay must be one of {DECAYS}"
    assert dim_v % block_V == 0, "block_V must divide dim_v"
    scale = dim_k**-0.5 if scale is None else scale
    qk_shape = [batch, seq_len, heads, dim_k]
    v_shape = [batch, seq_len, heads, dim_v]
    g_shape = [heads] if decay == "head" else [batch, heads, seq_len]
    accum_dtype = "float"

    @T.macro
    def chunked(Q, K, V, G, O):
        with T.Kernel(dim_v // block_V, heads, batch, threads=threads) as (bv, bh, bb):
            Q_shared = T.alloc_shared([chunk, dim_k], dtype)
            K_shared = T.alloc_shared([chunk, dim_k], dtype)
            V_shared = T.alloc_shared([chunk, block_V], dtype)
            V_decayed = T.alloc_shared([chunk, block_V], dtype)  # exp(G_last - G_j) * V, for the state
            S_shared = T.alloc_shared([dim_k, block_V], dtype)  # the state as Q·S's operand
            O_shared = T.alloc_shared([chunk, block_V], dtype)
            g_shared = T.alloc_shared([chunk], accum_dtype)
            G_shared = T.alloc_shared([chunk], accum_dtype)  # g cumulated from the chunk's start
            # Per-token factors, one exp per token rather than one per element they scale.
            q_decay = T.alloc_shared([chunk], accum_dtype)  # scale * exp(G_i)
            v_decay = T.alloc_shared([chunk], accum_dtype)  # exp(G_last - G_j)
            s_decay = T.alloc_var(accum_dtype)  # exp(G_last)
            A = T.alloc_fragment([chunk, chunk], accum_dtype)
            A_cast = T.alloc_fragment([chunk, chunk], dtype)
            G_frag = T.alloc_fragment([chunk], accum_dtype)
            O_frag = T.alloc_fragment([chunk, block_V], accum_dtype)
            S = T.alloc_fragment([dim_k, block_V], accum_dtype)

            T.clear(S)
            T.clear(S_shared)
            for c in T.Pipelined(T.ceildiv(seq_len, chunk), num_stages=num_stages):
                T.copy(Q[bb, c * chunk : (c + 1) * chunk, bh, :], Q_shared)
                T.copy(K[bb, c * chunk : (c + 1) * chunk, bh, :], K_shared)
                T.copy(V[bb, c * chunk : (c + 1) * chunk, bh, bv * block_V : (bv + 1) * block_V], V_shared)
                if decay == "token":  # tokens past the end load g = 0: G stays finite
                    T.copy(G[bb, bh, c * chunk : (c + 1) * chunk], g_shared)
                    # G_i = sum_{j <= i} g_j as a masked row sum over the whole block, in A before Q·Kᵀ
                    # overwrites it (T.cumsum(g_shared, G_shared) gives the same with one thread a line).
                    for i, j in T.Parallel(chunk, chunk):
                        A[i, j] = T.if_then_else(j <= i, g_shared[j], 0)
                    T.reduce_sum(A, G_frag, dim=1)
                    T.copy(G_frag, G_shared)
                elif decay == "head":
                    for i in T.Parallel(chunk):
                        G_shared[i] = G[bh] * (i + 1)
                if decay is not None:
                    for i in T.Parallel(chunk):
                        q_decay[i] = scale * T.exp(G_shared[i])
                    for i in T.Parallel(chunk):
                        v_decay[i] = T.exp(G_shared[chunk - 1] - G_shared[i])
                    s_decay = T.exp(G_shared[chunk - 1])

                T.gemm(Q_shared, K_shared, A, transpose_B=True, clear_accum=True, policy=T.GemmWarpPolicy.FullRow)
                # Keys after the query are masked by the select (exp(G_i - G_j) > 1 there is never used).
                for i, j in T.Parallel(chunk, chunk):
                    if decay is None:
                        A[i, j] = T.if_then_else(j <= i, A[i, j] * scale, 0)
                    else:
                        A[i, j] = T.if_then_else(j <= i, A[i, j] * (scale * T.exp(G_shared[i] - G_shared[j])), 0)
                T.copy(A, A_cast)

                # Earlier chunks through the state, then this chunk's own keys.
                T.gemm(Q_shared, S_shared, O_frag, clear_accum=True, policy=T.GemmWarpPolicy.FullRow)
                for i, j in T.Parallel(chunk, block_V):
                    O_frag[i, j] *= scale if decay is None else q_decay[i]
                T.gemm(A_cast, V_shared, O_frag, policy=T.GemmWarpPolicy.FullRow)
                T.copy(O_frag, O_shared)
                T.copy(O_shared, O[bb, c * chunk : (c + 1) * chunk, bh, bv * block_V : (bv + 1) * block_V])

                # The state after this chunk, for the next one.
                if decay is None:
                    T.gemm(K_shared, V_shared, S, transpose_A=True)
                else:
                    for i, j in T.Parallel(chunk, block_V):
                        V_decayed[i, j] = V_shared[i, j] * v_decay[i]
                    for i, j in T.Parallel(dim_k, block_V):
                        S[i, j] *= s_decay
                    T.gemm(K_shared, V_decayed, S, transpose_A=True)
                T.copy(S, S_shared)

    if decay is None:

        @T.prim_func
        def main(
            Q: T.Tensor(qk_shape, dtype),
            K: T.Tensor(qk_shape, dtype),
            V: T.Tensor(v_shape, dtype),
            O: T.Tensor(v_shape, dtype),
        ):
            chunked(Q, K, V, None, O)

    else:

        @T.prim_func
        def main(
            Q: T.Tensor(qk_shape, dtype),
            K: T.Tensor(qk_shape, dtype),
            V: T.Tensor(v_shape, dtype),
            G: T.Tensor(g_shape, accum_dtype),
            O: T.Tensor(v_shape, dtype),
        ):
            chunked(Q, K, V, G, O)

    return main


def token_decay(g, batch, seq_len):
    """The log-decay of every token, (batch, heads, seq) float32, from `g` as the kernel takes it:
    (heads,) or (batch, heads, seq)."""
    return g[None, :, None].expand(batch, -1, seq_len).float() if g.dim() == 1 else g.float()


def ref_recurrent(Q, K, V, g=None, scale=None):
    """The recurrence S_t = exp(g_t) S_{t-1} + k_t v_tᵀ, o_t = scale * S_tᵀ q_t, token by token in float32."""
    batch, seq_len, heads, dim_k = Q.shape
    scale = dim_k**-0.5 if scale is None else scale
    q, k, v = (x.float() for x in (Q, K, V))
    g = None if g is None else token_decay(g, batch, seq_len)
    S = torch.zeros(batch, heads, dim_k, V.shape[-1], dtype=torch.float32, device=Q.device)
    out = torch.empty(V.shape, dtype=torch.float32, device=Q.device)
    for t in range(seq_len):
        if g is not None:
            S = S * g[:, :, t, None, None].exp()
        S = S + k[:, t, :, :, None] * v[:, t, :, None, :]
        out[:, t] = scale * torch.einsum("bhk,bhkv->bhv", q[:, t], S)
    return out.to(Q.dtype)


def ref_quadratic(Q, K, V, g=None, scale=None):
    """The same sum as one masked (decayed) product: ((Q·Kᵀ) ∘ M)·V, M_ts = scale * exp(G_t - G_s) for
    s <= t, in float32 (seq² memory: for tests and moderate lengths)."""
    batch, seq_len, heads, dim_k = Q.shape
    scale = dim_k**-0.5 if scale is None else scale
    q, k, v = (x.transpose(1, 2).float() for x in (Q, K, V))  # -> (batch, heads, seq, dim)
    causal = torch.ones(seq_len, seq_len, dtype=torch.bool, device=Q.device).tril()
    if g is None:
        mask = causal.float() * scale
    else:
        G = token_decay(g, batch, seq_len).cumsum(-1)
        diff = (G[..., :, None] - G[..., None, :]).masked_fill(~causal, float("-inf"))
        mask = diff.exp() * scale
    return ((q @ k.transpose(-1, -2)) * mask @ v).transpose(1, 2).to(Q.dtype)


def ref_chunked(Q, K, V, g=None, scale=None, chunk=64):
    """The kernel's algorithm in torch, as fast as torch runs it (the benchmark's baseline): every
    chunk's masked Q·Kᵀ and Kᵀ·V in batched matmuls of the input dtype, then a loop over the chunks
    carrying the float32 state, then Q·S, also batched."""
    batch, seq_len, heads, dim_k = Q.shape
    dim_v, dtype = V.shape[-1], Q.dtype
    scale = dim_k**-0.5 if scale is None else scale
    n = -(-seq_len // chunk)
    pad = n * chunk - seq_len  # zero tokens at the end: they add nothing to the state

    def chunks(x):  # (batch, seq, heads, d) -> (batch, heads, chunks, chunk, d)
        x = F.pad(x.transpose(1, 2), (0, 0, 0, pad))
        return x.reshape(batch, heads, n, chunk, x.shape[-1])

    q, k, v = chunks(Q), chunks(K), chunks(V)
    if g is None:
        G = torch.zeros(batch, heads, n, chunk, device=Q.device)
    else:
        G = F.pad(token_decay(g, batch, seq_len), (0, pad)).reshape(batch, heads, n, chunk).cumsum(-1)
    causal = torch.ones(chunk, chunk, dtype=torch.bool, device=Q.device).tril()
    decay = (G[..., :, None] - G[..., None, :]).masked_fill(~causal, float("-inf")).exp() * scale
    o = ((q @ k.transpose(-1, -2)).float() * decay).to(dtype) @ v
    g_last = G[..., -1:]  # (batch, heads, chunks, 1)
    kv = (k * (g_last - G).exp()[..., None].to(dtype)).transpose(-1, -2) @ v  # each chunk's Kᵀ·V
    states = torch.empty(batch, heads, n, dim_k, dim_v, dtype=dtype, device=Q.device)
    S = torch.zeros(batch, heads, dim_k, dim_v, device=Q.device)
    for c in range(n):
        states[:, :, c] = S
        S = S * g_last[:, :, c, :, None].exp() + kv[:, :, c].float()
    o = o + (q * (G.exp() * scale)[..., None].to(dtype)) @ states
    return o.reshape(batch, heads, n * chunk, dim_v)[:, :, :seq_len].transpose(1, 2).contiguous()


def make_inputs(batch, heads, seq_len, dim_k, dim_v, decay, dtype, device):
    """Random Q, K, V (K with unit-norm rows, as linear attention's feature maps keep it) and a decay."""
    torch_dtype = getattr(torch, dtype)
    Q = torch.randn(batch, seq_len, heads, dim_k, device=device, dtype=torch_dtype)
    K = F.normalize(torch.randn(batch, seq_len, heads, dim_k, device=device), dim=-1).to(torch_dtype)
    V = torch.randn(batch, seq_len, heads, dim_v, device=device, dtype=torch_dtype)
    if decay == "head":  # RetNet's gammas, 1 - 2^(-5 - h) spread over the heads
        G = torch.log(1 - 2.0 ** (-5 - torch.linspace(0, 3, heads, device=device)))
    elif decay == "token":  # gates in (0, 1) near 1, as a sigmoid of a projection gives them
        G = F.logsigmoid(torch.randn(batch, heads, seq_len, device=device) + 4)
    else:
        G = None
    return Q, K, V, G


def main(batch=1, heads=4, seq_len=256, dim_k=64, dim_v=64, decay="token", dtype="float16", chunk=64, block_V=64,
         num_stages=2, threads=128, device=None):  # fmt: skip
    device = device or ("cuda" if torch.cuda.is_available() else "cpu")
    with tilelang.use_target(device):  # the kernels compile for where the tensors live
        kernel = linear_attn_fwd(batch, heads, seq_len, dim_k, dim_v, decay, dtype, None, chunk, block_V,
                                 num_stages, threads)  # fmt: skip
        Q, K, V, G = make_inputs(batch, heads, seq_len, dim_k, dim_v, decay, dtype, device)
        out = kernel(Q, K, V) if G is None else kernel(Q, K, V, G)
        tol = 2e-2 if dtype == "float16" else 5e-2
        torch.testing.assert_close(out, ref_quadratic(Q, K, V, G), rtol=tol, atol=tol)
        if seq_len <= 512:  # the token-by-token recurrence too, where it is quick
            torch.testing.assert_close(out, ref_recurrent(Q, K, V, G), rtol=tol, atol=tol)
        print(f"linear attention ({decay or 'no'} decay): all checks passed")


if __name__ == "__main__":
    parser = argparse.ArgumentParser()
    parser.add_argument("--batch", type=int, default=8)
    parser.add_argument("--heads", type=int, default=32)
    parser.add_argument("--seq_len", type=int, default=4096)
    parser.add_argument("--dim_k", type=int, default=128)
    parser.add_argument("--dim_v", type=int, default=128)
    parser.add_argument("--decay", choices=["none", "head", "token"], default="token")
    parser.add_argument("--dtype", choices=["float16", "bfloat16"], default="float16")
    parser.add_argument("--device", choices=["cuda", "cpu"], help="default: cuda when torch sees a GPU, else cpu")
    args = parser.parse_args()
    decay = None if args.decay == "none" else args.decay
    main(args.batch, args.heads, args.seq_len, args.dim_k, args.dim_v, decay, args.dtype, device=args.device)

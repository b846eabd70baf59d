"""The kernel families the fuzzer draws from, each a factory of a tile program and a torch reference.

Every family takes its shapes, tile sizes, threads, stages and dtypes as arguments, the way a user
writes a kernel for one problem; `run_fuzz.py` draws them at random (ragged and prime sizes, size 1,
tiles larger than the tensor) and compares the result with the reference on the GPU, or, without a
GPU, only compiles them (any internal error is a bug; a UserError must name the user's line).
"""

from __future__ import annotations

import tilelang.language as T


def gemm(M, N, K, bm, bn, bk, stages, threads, trans_a, trans_b, dtype, accum, a_fragment=False):
    """C = op(A) @ op(B), tiles staged through shared memory (A optionally through registers)."""
    a_shape, b_shape = ((K, M) if trans_a else (M, K)), ((N, K) if trans_b else (K, N))
    a_tile, b_tile = ((bk, bm) if trans_a else (bm, bk)), ((bn, bk) if trans_b else (bk, bn))

    @T.prim_func
    def main(A: T.Tensor(a_shape, dtype), B: T.Tensor(b_shape, dtype), C: T.Tensor((M, N), accum)):
        with T.Kernel(T.ceildiv(N, bn), T.ceildiv(M, bm), threads=threads) as (bx, by):
            A_s = T.alloc_shared(a_tile, dtype)
            B_s = T.alloc_shared(b_tile, dtype)
            A_f = T.alloc_fragment(a_tile, dtype)
            C_f = T.alloc_fragment((bm, bn), accum)
            T.clear(C_f)
            for k in T.Pipelined(T.ceildiv(K, bk), num_stages=stages):
                if trans_a:
                    T.copy(A[k * bk, by * bm], A_s)
                else:
                    T.copy(A[by * bm, k * bk], A_s)
                if trans_b:
                    T.copy(B[bx * bn, k * bk], B_s)
                else:
                    T.copy(B[k * bk, bx * bn], B_s)
                if a_fragment:
                    T.copy(A_s, A_f)
                    T.gemm(A_f, B_s, C_f, transpose_A=trans_a, transpose_B=trans_b)
                else:
                    T.gemm(A_s, B_s, C_f, transpose_A=trans_a, transpose_B=trans_b)
            T.copy(C_f, C[by * bm, bx * bn])

    return main


def gemm_reference(a, b, trans_a, trans_b):
    a, b = a.float(), b.float()
    return (a.T if trans_a else a) @ (b.T if trans_b else b)


def copy(M, N, bm, bn, threads, dtype, via):
    """B = A through a shared tile or a fragment, block by block."""

    @T.prim_func
    def main(A: T.Tensor((M, N), dtype), B: T.Tensor((M, N), dtype)):
        with T.Kernel(T.ceildiv(N, bn), T.ceildiv(M, bm), threads=threads) as (bx, by):
            S = T.alloc_shared((bm, bn), dtype)
            F = T.alloc_fragment((bm, bn), dtype)
            if via == "shared":
                T.copy(A[by * bm, bx * bn], S)
                T.copy(S, B[by * bm, bx * bn])
            else:
                T.copy(A[by * bm, bx * bn], F)
                T.copy(F, B[by * bm, bx * bn])

    return main


def row_reduce(M, N, bm, bn, threads, dtype, kind):
    """R[i] = sum or max of A[i, :], over column blocks of bn (N a multiple of bn: a partial block's
    zero padding would change a max)."""

    @T.prim_func
    def main(A: T.Tensor((M, N), dtype), R: T.Tensor((M,), "float32")):
        with T.Kernel(T.ceildiv(M, bm), threads=threads) as bx:
            A_f = T.alloc_fragment((bm, bn), "float32")
            part = T.alloc_fragment((bm,), "float32")
            acc = T.alloc_fragment((bm,), "float32")
            if kind == "sum":
                T.fill(acc, 0)
            else:
                T.fill(acc, -T.infinity("float32"))
            for k in T.serial(T.ceildiv(N, bn)):
                T.copy(A[bx * bm, k * bn], A_f)
                if kind == "sum":
                    T.reduce_sum(A_f, part, dim=1)
                    for i in T.Parallel(bm):
                        acc[i] += part[i]
                else:
                    T.reduce_max(A_f, part, dim=1)
                    for i in T.Parallel(bm):
                        acc[i] = T.max(acc[i], part[i])
            T.copy(acc, R[bx * bm])

    return main


def softmax(M, N, bm, threads, dtype):
    """Row softmax of rows of N (one tile wide), blocks of bm rows."""
    scale = 1.44269504

    @T.prim_func
    def main(A: T.Tensor((M, N), dtype), B: T.Tensor((M, N), dtype)):
        with T.Kernel(T.ceildiv(M, bm), threads=threads) as bx:
            x = T.alloc_fragment((bm, N), "float32")
            m = T.alloc_fragment((bm,), "float32")
            s = T.alloc_fragment((bm,), "float32")
            T.copy(A[bx * bm, 0], x)
            T.reduce_max(x, m, dim=1)
            for i, j in T.Parallel(bm, N):
                x[i, j] = T.exp2((x[i, j] - m[i]) * scale)
            T.reduce_sum(x, s, dim=1)
            for i, j in T.Parallel(bm, N):
                x[i, j] = x[i, j] / s[i]
            T.copy(x, B[bx * bm, 0])

    return main


def attention(batch, heads, seq, dim, causal, bm, bn, stages, threads):
    """FlashAttention forward as users write it (no schedule annotations); seq a multiple of bn."""
    scale = (1.0 / dim) ** 0.5 * 1.44269504
    shape = [batch, heads, seq, dim]

    @T.prim_func
    def main(Q: T.Tensor(shape, "float16"), K: T.Tensor(shape, "float16"), V: T.Tensor(shape, "float16"),
             O: T.Tensor(shape, "float16")):  # fmt: skip
        with T.Kernel(T.ceildiv(seq, bm), heads, batch, threads=threads) as (bx, by, bz):
            Q_s = T.alloc_shared((bm, dim), "float16")
            K_s = T.alloc_shared((bn, dim), "float16")
            V_s = T.alloc_shared((bn, dim), "float16")
            S = T.alloc_fragment((bm, bn), "float32")
            P = T.alloc_fragment((bm, bn), "float16")
            acc = T.alloc_fragment((bm, dim), "float32")
            m = T.alloc_fragment((bm,), "float32")
            m_prev = T.alloc_fragment((bm,), "float32")
            r = T.alloc_fragment((bm,), "float32")
            rowsum = T.alloc_fragment((bm,), "float32")
            l = T.alloc_fragment((bm,), "float32")  # noqa: E741
            T.copy(Q[bz, by, bx * bm, 0], Q_s)
            T.fill(acc, 0)
            T.fill(l, 0)
            T.fill(m, -T.infinity("float32"))
            n = T.min(T.ceildiv((bx + 1) * bm, bn), seq // bn) if causal else seq // bn
            for k in T.Pipelined(n, num_stages=stages):
                T.copy(K[bz, by, k * bn, 0], K_s)
                if causal:
                    for i, j in T.Parallel(bm, bn):
                        q_idx = bx * bm + i
                        k_idx = k * bn + j
                        S[i, j] = T.if_then_else(q_idx >= k_idx, 0, -T.infinity("float32"))
                else:
                    T.clear(S)
                T.gemm(Q_s, K_s, S, transpose_B=True, policy=T.GemmWarpPolicy.FullRow)
                T.copy(m, m_prev)
                T.reduce_max(S, m, dim=1, clear=False)
                for i in T.Parallel(bm):
                    r[i] = T.exp2(m_prev[i] * scale - m[i] * scale)
                for i, j in T.Parallel(bm, bn):
                    S[i, j] = T.exp2(S[i, j] * scale - m[i] * scale)
                T.reduce_sum(S, rowsum, dim=1)
                for i in T.Parallel(bm):
                    l[i] = l[i] * r[i] + rowsum[i]
                T.copy(S, P)
                for i, j in T.Parallel(bm, dim):
                    acc[i, j] *= r[i]
                T.copy(V[bz, by, k * bn, 0], V_s)
                T.gemm(P, V_s, acc, policy=T.GemmWarpPolicy.FullRow)
            for i, j in T.Parallel(bm, dim):
                acc[i, j] /= l[i]
            T.copy(acc, O[bz, by, bx * bm, 0])

    return main

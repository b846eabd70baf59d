"""Kernels written with `TensorCoreIntrinEmitter`, shared by the CPU tests (simulation, codegen,
nvcc) and the GPU tests of `tilelang.cuda.intrinsics`."""

import tilelang
import tilelang.language as T
from tilelang.cuda.intrinsics import TensorCoreIntrinEmitter, make_mma_swizzle_layout


def emitter(dtype, accum, a_transposed=False, b_transposed=True, warps=(2, 2), warp_tile=(32, 32), chunk=32, **kw):
    return TensorCoreIntrinEmitter(
        a_dtype=dtype,
        b_dtype=dtype,
        accum_dtype=accum,
        a_transposed=a_transposed,
        b_transposed=b_transposed,
        block_row_warps=warps[0],
        block_col_warps=warps[1],
        warp_row_tiles=warp_tile[0],
        warp_col_tiles=warp_tile[1],
        chunk=chunk,
        **kw,
    )


def block_kernel(em, out_dtype, tiles_4d=False, atoms=False, rk=0, pid=None):
    """One block's K steps over shared tiles A_s, B_s (seeded by the simulator), the result in C_s.
    `atoms`: mma_atom per tile instead of mma; `rk`: read K-slice rk of tiles reduce_k * chunk deep;
    `pid`: store as block (pid_m, pid_n) of a C_s two blocks high and wide."""
    bm, bn = em.block_row_warps * em.warp_row_tiles, em.block_col_warps * em.warp_col_tiles
    depth = em.chunk * em.reduce_k
    a_tile = (depth, bm) if em.a_transposed else (bm, depth)
    b_tile = (bn, depth) if em.b_transposed else (depth, bn)
    c_tile = (bm // 16, bn // em.n_dim, 16, em.n_dim) if tiles_4d else (bm, bn) if pid is None else (2 * bm, 2 * bn)
    dtype, accum = em.a_dtype, em.accum_dtype

    @T.prim_func
    def main(X: T.Tensor((1,), "float32")):
        with T.Kernel(1, threads=32 * em.block_row_warps * em.block_col_warps):
            A_s = T.alloc_shared(a_tile, dtype)
            B_s = T.alloc_shared(b_tile, dtype)
            C_s = T.alloc_shared(c_tile, out_dtype)
            A_l = T.alloc_local((em.warp_rows * em.local_size_a,), dtype)
            B_l = T.alloc_local((em.warp_cols * em.local_size_b,), dtype)
            C_l = T.alloc_local((em.warp_rows * em.warp_cols * em.local_size_out,), accum)
            for i in T.serial(em.warp_rows * em.warp_cols * em.local_size_out):
                C_l[i] = 0
            for ki in T.serial(em.chunk // em.micro_size_k):
                em.ldmatrix_a(A_l, A_s, ki, rk)
                em.ldmatrix_b(B_l, B_s, ki, rk)
                if atoms:
                    for i in T.unroll(em.mma_num_inst_m):
                        for j in T.unroll(em.mma_num_inst_n):
                            em.mma_atom(A_l, B_l, C_l, i, j)
                else:
                    em.mma(A_l, B_l, C_l)
            if pid is None:
                em.stmatrix(C_l, C_s)
            else:
                em.stmatrix(C_l, C_s, pid_m=pid[0], pid_n=pid[1])

    return main


def gemm(M, N, K, dtype, accum, out_dtype, a_transposed=False, b_transposed=True, stages=2, tile_copies=False, **kw):
    """C = A @ B with the emitter: shared tiles filled by T.Parallel loops (swizzled as annotated) or,
    with `tile_copies`, by T.copy in a pipelined loop; accumulators through a 4-D C tile to C."""
    em = emitter(dtype, accum, a_transposed, b_transposed, **kw)
    bm, bn, bk = em.block_row_warps * em.warp_row_tiles, em.block_col_warps * em.warp_col_tiles, em.chunk
    a_shape, a_tile = ((K, M), (bk, bm)) if a_transposed else ((M, K), (bm, bk))
    b_shape, b_tile = ((N, K), (bn, bk)) if b_transposed else ((K, N), (bk, bn))
    mx, ny = em.micro_size_x, em.micro_size_y

    @T.prim_func
    def main(A: T.Tensor(a_shape, dtype), B: T.Tensor(b_shape, dtype), C: T.Tensor((M, N), out_dtype)):
        with T.Kernel(T.ceildiv(N, bn), T.ceildiv(M, bm), threads=em.threads) as (bx, by):
            A_s = T.alloc_shared(a_tile, dtype)
            B_s = T.alloc_shared(b_tile, dtype)
            C_s = T.alloc_shared((bm // mx, bn // ny, mx, ny), out_dtype)
            A_l = T.alloc_local((em.warp_rows * em.local_size_a,), dtype)
            B_l = T.alloc_local((em.warp_cols * em.local_size_b,), dtype)
            C_l = T.alloc_local((em.warp_rows * em.warp_cols * em.local_size_out,), accum)
            T.annotate_layout({A_s: make_mma_swizzle_layout(A_s), B_s: make_mma_swizzle_layout(B_s)})
            T.clear(C_l)
            for ko in T.Pipelined(K // bk, num_stages=stages):
                if tile_copies:
                    if a_transposed:
                        T.copy(A[ko * bk, by * bm], A_s)
                    else:
                        T.copy(A[by * bm, ko * bk], A_s)
                    if b_transposed:
                        T.copy(B[bx * bn, ko * bk], B_s)
                    else:
                        T.copy(B[ko * bk, bx * bn], B_s)
                else:
                    for i, k in T.Parallel(a_tile[0], a_tile[1]):
                        if a_transposed:
                            A_s[i, k] = A[ko * bk + i, by * bm + k]
                        else:
                            A_s[i, k] = A[by * bm + i, ko * bk + k]
                    for j, k in T.Parallel(b_tile[0], b_tile[1]):
                        if b_transposed:
                            B_s[j, k] = B[bx * bn + j, ko * bk + k]
                        else:
                            B_s[j, k] = B[ko * bk + j, bx * bn + k]
                for ki in T.serial(bk // em.micro_size_k):
                    em.ldmatrix_a(A_l, A_s, ki)
                    em.ldmatrix_b(B_l, B_s, ki)
                    em.mma(A_l, B_l, C_l)
            em.stmatrix(C_l, C_s)
            for i, j in T.Parallel(bm, bn):
                C[by * bm + i, bx * bn + j] = C_s[i // mx, j // ny, i % mx, j % ny]

    return main


@tilelang.jit
def eager_gemm(A, B, dtype, accum, out_dtype):
    """C = A @ B.T as an eager kernel (sizes from the tensors), C stored straight from the registers."""
    M, N, K = T.const("M, N, K")
    em = emitter(dtype, accum, warps=(2, 2), warp_tile=(64, 32), chunk=32)
    bm, bn, bk = 128, 64, 32
    A: T.Tensor((M, K), dtype)
    B: T.Tensor((N, K), dtype)
    C = T.empty((M, N), out_dtype)

    with T.Kernel(T.ceildiv(N, bn), T.ceildiv(M, bm), threads=em.threads) as (bx, by):
        A_s = T.alloc_shared((bm, bk), dtype)
        B_s = T.alloc_shared((bn, bk), dtype)
        A_l = T.alloc_local((em.warp_rows * em.local_size_a,), dtype)
        B_l = T.alloc_local((em.warp_cols * em.local_size_b,), dtype)
        C_l = T.alloc_local((em.warp_rows * em.warp_cols * em.local_size_out,), accum)
        T.annotate_layout({A_s: make_mma_swizzle_layout(A_s), B_s: make_mma_swizzle_layout(B_s)})
        T.clear(C_l)
        for ko in T.serial(K // bk):
            T.copy(A[by * bm, ko * bk], A_s)
            T.copy(B[bx * bn, ko * bk], B_s)
            for ki in T.serial(bk // em.micro_size_k):
                em.ldmatrix_a(A_l, A_s, ki)
                em.ldmatrix_b(B_l, B_s, ki)
                em.mma(A_l, B_l, C_l)
        em.stmatrix(C_l, C, pid_m=by, pid_n=bx)

    return C

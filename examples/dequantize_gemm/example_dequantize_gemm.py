"""Weight-only int4 GEMM, C[M, N] = A[M, K] @ dequantize(W)[N, K]^T (fp16 A and C, fp32 accumulation),
with W as AWQ/GPTQ-style int4 weights (quant_common.py: two 4-bit codes a byte along K, the even column
in the low nibble; fp16 scales and optional zeros per 128 columns), checked against torch. Two kernels:

`dequant_gemv`, decode (M = 1..16): each weight byte serves 2 * M multiply-adds, so the kernel is bound
by reading W (K / 2 bytes a row, a quarter of fp16's) and must keep HBM busy, as examples/gemv does:
- W is read as int32 words (the same bytes: 8 codes a word, code c in bits 4c..4c+3). A block takes
  `block_N` rows, `lanes` = threads / block_N threads a row; in a K step each thread loads `words`
  words, lane t the t-th word of each run of `lanes`, so a warp's load is 128 contiguous bytes and the
  8 columns of A a word needs are one 128-bit load, contiguous across the warp too. A thread issues
  its `words` loads (8: 32 bytes) before using any: with N = 4096 the 1024 blocks keep ~4 MB in
  flight, about what HBM's latency (~0.6 us) times its bandwidth asks for.
- The codes never leave registers: shift and mask a code out of its word, make it a float with the
  exponent trick below (no int-to-float conversion), subtract the zero point, then one fp32 FMA per
  row of A. A word's 8 columns share a group, so the scale multiplies their 8-term dot product once.
- Each thread keeps an fp32 partial sum per (row of A, row of W); one `T.reduce_sum` at the end folds
  the `lanes` partials of each row (warp shuffles). A (M * K * 2 bytes, read by every block) stays in
  L1/L2.

`dequant_gemm`, large M: tensor cores; a block dequantizes a W tile once for `block_M` rows of A.
- Each K step, A's tile [block_M, block_K] and W's packed tile [block_N, block_K / 2] are copied to
  shared memory in `T.Pipelined` (cp.async on sm_80, TMA on sm_90a; W's tile is a quarter of fp16's
  bytes), the threads dequantize the packed tile into registers in fp16 (the same exponent trick) and
  store it to an fp16 shared tile [block_N, block_K], and `T.gemm` multiplies it, transposed (W is
  K-major, as mma and wgmma take B), into the fp32 accumulator.
- Dequantized into shared memory: mma.sync's ldmatrix and wgmma read B from there, and each weight is
  converted once for all the block's warps. It goes through a register tile and `T.copy`: stored
  straight from the `T.Parallel`, the compiler puts a barrier before each of a thread's 16 stores.
- block_K = 64 divides the 128-column group: one scale (and zero) per row of W per step.
"""

import argparse

import torch
from quant_common import GROUP, PEAK_HBM_GBS, check_linear, random_weights, time_ms, weight_gbs

import tilelang
import tilelang.language as T

# The exponent trick: 2**23 as an fp32 has a zero mantissa, so the float with its exponent and a
# mantissa of q (< 2**23) is exactly 2**23 + q. Or-ing a code into 0x4B000000 makes it a float with one
# integer op, where int-to-float conversion runs at a quarter of the FMA rate (the GEMV's bottleneck).
MAGIC = 8388608.0


def code_as_float(word, c):
    """2**23 + the 4-bit code `c` (0..7) of the int32 `word` (code c in bits 4c..4c+3), as fp32."""
    return T.reinterpret((T.shift_right(word, c * 4) & 15) | 0x4B000000, "float32")


# The same in fp16: 1024 has a zero 10-bit mantissa, so the bits 0x6400 | q are the fp16 1024 + q.
HALF_MAGIC = 1024.0


def code_as_half(byte, nibble):
    """1024 + the code in the uint8 `byte`'s low (nibble 0) or high (nibble 1) half, as fp16."""
    q = T.shift_right(T.Cast("uint16", byte), T.Cast("uint16", nibble * 4)) & T.uint16(15)
    return T.reinterpret(q | T.uint16(0x6400), "float16")


@tilelang.jit(out_idx=[-1])
def dequant_gemv(M, N, K, block_N=4, threads=128, words=8, has_zeros=True, dtype="float16", accum_dtype="float"):
    """C = A @ dequantize(W)^T for M <= 16, W's bytes as int32 [N, K / 8]. Without zeros (symmetric, zero
    point 8) the `zeros` argument is not read: pass any fp16 [N, K / 128] tensor."""
    assert K % GROUP == 0, f"K = {K} must be a multiple of the group size {GROUP}"
    lanes = threads // block_N  # threads per row of W
    block_K = words * lanes * 8  # columns a row advances per step
    steps = T.ceildiv(K, block_K)
    groups = K // GROUP
    has_zeros = bool(has_zeros)

    @T.prim_func
    def main(
        A: T.Tensor((M, K), dtype),
        W: T.Tensor((N, K // 8), "int32"),
        scales: T.Tensor((N, groups), dtype),
        zeros: T.Tensor((N, groups), dtype),
        C: T.Tensor((M, N), dtype),
    ):
        with T.Kernel(T.ceildiv(N, block_N), threads=threads) as bx:
            acc = T.alloc_fragment((M, block_N, lanes), accum_dtype)
            c_acc = T.alloc_fragment((M, block_N), accum_dtype)
            word = T.alloc_local((words,), "int32")
            w = T.alloc_local((8,), accum_dtype)
            a = T.alloc_local((8,), dtype)
            dot = T.alloc_var(accum_dtype)
            T.clear(acc)
            for k in T.serial(steps):
                for i, t in T.Parallel(block_N, lanes):
                    n = T.min(bx * block_N + i, N - 1)  # (a clamped row: its C is not stored)
                    # All the step's words first, so that they are in flight together.
                    for r in T.unroll(words):
                        word[r] = W[n, T.min(k * (block_K // 8) + r * lanes + t, K // 8 - 1)]
                    for r in T.unroll(words):
                        col = k * block_K + (r * lanes + t) * 8  # this word's first column
                        if col < K:
                            zero = T.Cast(accum_dtype, zeros[n, col // GROUP]) if has_zeros else T.float32(8)
                            for c in T.unroll(8):
                                w[c] = code_as_float(word[r], c) - (MAGIC + zero)  # q - zero, exact
                            # The 8 columns share a group: the scale multiplies their dot product once.
                            scale = T.Cast(accum_dtype, scales[n, col // GROUP])
                            for m in T.serial(M):
                                for c in T.vectorized(8):
                                    a[c] = A[m, col + c]
                                dot = 0.0
                                for c in T.unroll(8):
                                    dot += T.Cast(accum_dtype, a[c]) * w[c]
                                acc[m, i, t] += dot * scale
            T.reduce_sum(acc, c_acc, dim=2)
            T.copy(c_acc, C[0, bx * block_N])

    return main


@tilelang.jit(out_idx=[-1])
def dequant_gemm(
    M, N, K, block_M=128, block_N=128, block_K=64, threads=256, num_stages=3, has_zeros=True,
    dtype="float16", accum_dtype="float",
):  # fmt: skip
    """C = A @ dequantize(W)^T on tensor cores, W packed uint8 [N, K / 2]; `zeros` as for dequant_gemv."""
    assert K % GROUP == 0 and GROUP % block_K == 0, f"K = {K}: a multiple of {GROUP}, with block_K dividing it"
    groups = K // GROUP
    has_zeros = bool(has_zeros)

    @T.prim_func
    def main(
        A: T.Tensor((M, K), dtype),
        W: T.Tensor((N, K // 2), "uint8"),
        scales: T.Tensor((N, groups), dtype),
        zeros: T.Tensor((N, groups), dtype),
        C: T.Tensor((M, N), dtype),
    ):
        with T.Kernel(T.ceildiv(N, block_N), T.ceildiv(M, block_M), threads=threads) as (bx, by):
            A_shared = T.alloc_shared((block_M, block_K), dtype)
            W_packed = T.alloc_shared((block_N, block_K // 2), "uint8")
            W_local = T.alloc_fragment((block_N, block_K), dtype)
            W_shared = T.alloc_shared((block_N, block_K), dtype)
            C_local = T.alloc_fragment((block_M, block_N), accum_dtype)
            T.clear(C_local)
            for k in T.Pipelined(K // block_K, num_stages=num_stages):
                T.copy(A[by * block_M, k * block_K], A_shared)
                T.copy(W[bx * block_N, k * (block_K // 2)], W_packed)
                for i, j in T.Parallel(block_N, block_K):
                    n = T.min(bx * block_N + i, N - 1)  # (rows past N: any weight, their C is not stored)
                    g = k * block_K // GROUP
                    zero = zeros[n, g] if has_zeros else T.float16(8)
                    # fp16 math: q - zero is exact, the product rounds once (as fp32 math and a cast would).
                    q = code_as_half(W_packed[i, j // 2], j % 2)
                    W_local[i, j] = (q - (T.float16(HALF_MAGIC) + zero)) * scales[n, g]
                T.copy(W_local, W_shared)
                T.gemm(A_shared, W_shared, C_local, transpose_B=True)
            T.copy(C_local, C[by * block_M, bx * block_N])

    return main


def choose_kernel(M, N, K, has_zeros=True):
    """The GEMV for decode batches (up to 16 rows: one fp32 partial a row per thread), tiles beyond."""
    if M <= 16:
        return dequant_gemv(M, N, K, has_zeros=has_zeros)
    return dequant_gemm(M, N, K, has_zeros=has_zeros)


def main(M=1, N=4096, K=4096, has_zeros=True, device=None):
    device = device or ("cuda" if torch.cuda.is_available() else "cpu")
    with tilelang.use_target(device):  # the kernels compile for where the tensors live
        kernel = choose_kernel(M, N, K, has_zeros)
        packed, scales, zeros = random_weights(N, K, has_zeros, device=device)
        zeros_arg = zeros if has_zeros else scales  # (a symmetric kernel never reads it)
        A = torch.randn(M, K, device=device, dtype=torch.float16)
        W = packed.view(torch.int32) if M <= 16 else packed
        C = kernel(A, W, scales, zeros_arg)
        check_linear(C, A, packed, scales, zeros)
        ms = time_ms(lambda: kernel(A, W, scales, zeros_arg), device)
        if M <= 16:
            bandwidth = weight_gbs(N, K, ms, has_zeros)
            figure = f"{bandwidth:.0f} GB/s of weights ({bandwidth / PEAK_HBM_GBS:.0%} of the H200's {PEAK_HBM_GBS})"
        else:
            figure = f"{2 * M * N * K / ms / 1e9:.1f} TFLOPS"
        name = "dequant gemv" if M <= 16 else "dequant gemm"
        zero_point = "zeros" if has_zeros else "symmetric"
        print(f"{name} int4 ({zero_point}) M={M} N={N} K={K}: {ms * 1e3:.1f} us, {figure}; all checks passed")


if __name__ == "__main__":
    parser = argparse.ArgumentParser()
    parser.add_argument("--m", type=int, default=1, help="up to 16: the GEMV kernel; beyond: tensor-core tiles")
    parser.add_argument("--n", type=int, default=4096)
    parser.add_argument("--k", type=int, default=4096)
    parser.add_argument("--symmetric", action="store_true", help="no zeros: the zero point is 8")
    parser.add_argument("--device", choices=["cuda", "cpu"], help="default: cuda when torch sees a GPU, else cpu")
    args = parser.parse_args()
    main(args.m, args.n, args.k, not args.symmetric, device=args.device)

"""GEMV, y = A @ x (fp16 in, fp32 accumulation, fp16 out), for decode-sized shapes, checked against torch.

With one token per step, a linear layer's y[1, N] = x[1, K] @ W[N, K]^T is this same GEMV with A = W
(x and y only change shape, not memory), so every weight byte is read once and used for one
multiply-add: the kernel is bound by HBM bandwidth, not by arithmetic, and tensor cores do not help.
What matters is keeping enough loads in flight to saturate HBM:

- A block takes `block_N` rows and walks K in steps of `block_K`. Its threads spread over K, eight
  consecutive fp16 per thread (one 128-bit load); a warp reads 512 contiguous bytes of a row per
  instruction, and each thread issues block_N * block_K / (8 * threads) loads per step before
  using any of them.
- Each thread keeps its own fp32 partial products (`acc`, the size of the tile it loads: no
  reduction inside the K loop), and one `T.reduce_sum` at the end folds them across the threads of
  each row (warp shuffles, then shared memory across warps).
- `prefetch=True` double-buffers the tile in registers: the next step's loads are issued before
  this step's multiply-adds (benchmark/gemv times both).
- x is read straight from global memory inside the loop: the block's rows share each 128-bit load
  of it, and the blocks of an SM find it in L1/L2 (it is only K * 2 bytes).
"""

import argparse

import torch
from skinny_common import PEAK_HBM_GBS, gbs, randn, ref_matmul, time_ms

import tilelang
import tilelang.language as T


@tilelang.jit(out_idx=[-1])
def gemv(N, K, block_N=4, block_K=1024, threads=128, prefetch=False, dtype="float16", accum_dtype="float"):
    steps = T.ceildiv(K, block_K)
    prefetch = bool(prefetch)  # (the kernel's `if prefetch:` is decided when it is traced)

    @T.prim_func
    def main(A: T.Tensor((N, K), dtype), x: T.Tensor((K,), dtype), y: T.Tensor((N,), dtype)):
        with T.Kernel(T.ceildiv(N, block_N), threads=threads) as bx:
            a = T.alloc_fragment((block_N, block_K), dtype)
            a_next = T.alloc_fragment((block_N, block_K), dtype)
            acc = T.alloc_fragment((block_N, block_K), accum_dtype)
            y_acc = T.alloc_fragment((block_N,), accum_dtype)
            T.clear(acc)
            if prefetch:
                T.copy(A[bx * block_N, 0], a)
            # Partial tiles (N or K not a multiple of the block) load zeros past the edge.
            for k in T.serial(steps):
                if prefetch:
                    # Register double buffering: the next step's loads are issued before this step's
                    # multiply-adds, so they are in flight while the FMAs wait for nothing (twice the
                    # bytes in flight per thread, for more registers: fewer blocks per SM).
                    if k + 1 < steps:
                        T.copy(A[bx * block_N, (k + 1) * block_K], a_next)
                else:
                    T.copy(A[bx * block_N, k * block_K], a)
                for i, j in T.Parallel(block_N, block_K):
                    acc[i, j] += T.Cast(accum_dtype, a[i, j]) * T.Cast(accum_dtype, x[k * block_K + j])
                if prefetch:
                    T.copy(a_next, a)
            T.reduce_sum(acc, y_acc, dim=1)
            T.copy(y_acc, y[bx * block_N])

    return main


def linear_m1(kernel, x, W):
    """x[1, K] @ W[N, K]^T as the GEMV W @ x: reshapes only, no copy."""
    return kernel(W, x.view(-1)).view(1, -1)


def main(N=4096, K=4096, block_N=4, block_K=1024, threads=128, prefetch=False, device=None):
    device = device or ("cuda" if torch.cuda.is_available() else "cpu")
    with tilelang.use_target(device):  # the kernels compile for where the tensors live
        kernel = gemv(N, K, block_N, block_K, threads, prefetch)
        A, x = randn(N, K, device=device), randn(K, device=device)
        y = kernel(A, x)
        # Sums of K products of unit normals are ~sqrt(K): fp16's rounding of y sets the tolerance.
        torch.testing.assert_close(y, ref_matmul(A, x).half(), rtol=1e-2, atol=5e-2)
        x1 = randn(1, K, device=device)
        torch.testing.assert_close(linear_m1(kernel, x1, A), ref_matmul(x1, A.T).half(), rtol=1e-2, atol=5e-2)
        ms = time_ms(lambda: kernel(A, x), device)
        bandwidth = gbs(A.numel() * 2 + K * 2 + N * 2, ms)
        name = "gemv, prefetch" if prefetch else "gemv"
        print(
            f"{name} N={N} K={K}: {ms * 1e3:.1f} us, {bandwidth:.0f} GB/s ({bandwidth / PEAK_HBM_GBS:.0%} of the "
            f"H200's {PEAK_HBM_GBS} GB/s); all checks passed"
        )


if __name__ == "__main__":
    parser = argparse.ArgumentParser()
    parser.add_argument("--n", type=int, default=4096)
    parser.add_argument("--k", type=int, default=4096)
    parser.add_argument("--block_n", type=int, default=4)
    parser.add_argument("--block_k", type=int, default=1024)
    parser.add_argument("--threads", type=int, default=128)
    parser.add_argument("--prefetch", action="store_true", help="load the next K step while multiplying this one")
    parser.add_argument("--device", choices=["cuda", "cpu"], help="default: cuda when torch sees a GPU, else cpu")
    args = parser.parse_args()
    main(args.n, args.k, args.block_n, args.block_k, args.threads, args.prefetch, device=args.device)

"""2-D convolution as an implicit GEMM (fp16 in, fp32 accumulation, fp16 out), checked against torch.

Activations are NHWC (N, H, W, C) and filters (K, K, C, F); the output is NHWC (N, OH, OW, F). Seen
as a GEMM, out[N * OH * OW, F] = im2col[N * OH * OW, K * K * C] @ filters[K * K * C, F], where row
m of the im2col matrix holds the K x K x C input values under output pixel m (zeros in the padding),
its columns in the filters' (kh, kw, c) order. The matrix is K * K times the size of the input, so it
is never written out: each block gathers the tile it needs straight from the NHWC input with
`T.im2col`, as a GEMM block would copy a tile of A:

- Rows of a tile are output pixels, columns taps x channels. Channels are contiguous in NHWC, so
  with C a multiple of 8 each thread gathers 8 of them (16 bytes) at a time; inside `T.Pipelined`
  the gather is issued `stages - 1` steps ahead with cp.async, the padding zero-filled by the copy
  itself.
- Filters flattened to (K * K * C, F) are the B operand: a plain tile copy, F contiguous.
- Stride, dilation and padding only change which input pixel a row reads; tiles past the edges of
  the matrices (output pixels, K * K * C, F) load zeros, and their rows and columns are not stored.
"""

import argparse

import torch
from conv_common import conv_flops, make_inputs, output_size, ref_conv2d, time_ms

import tilelang
import tilelang.language as T


@tilelang.jit(out_idx=[-1])
def conv2d(N, C, H, W, F, K, S, D, P, block_M, block_N, block_K, stages, threads, dtype="float16", accum_dtype="float"):
    OH, OW = output_size(H, K, S, D, P), output_size(W, K, S, D, P)
    k_steps = -(-K * K * C // block_K)
    stages = min(stages, k_steps)  # (a deeper pipeline than the loop overlaps nothing more)

    @T.prim_func
    def main(
        data: T.Tensor((N, H, W, C), dtype),
        weight: T.Tensor((K, K, C, F), dtype),
        out: T.Tensor((N, OH, OW, F), dtype),
    ):
        # One block per (block_M output pixels) x (block_N filters) tile of the output.
        with T.Kernel(T.ceildiv(F, block_N), T.ceildiv(N * OH * OW, block_M), threads=threads) as (bx, by):
            data_shared = T.alloc_shared((block_M, block_K), dtype)
            weight_shared = T.alloc_shared((block_K, block_N), dtype)
            acc = T.alloc_fragment((block_M, block_N), accum_dtype)
            # The same memory seen as the GEMM's matrices: filters (K * K * C, F), output (N * OH * OW, F).
            weight_flat = T.Tensor((K * K * C, F), dtype, weight.data)
            out_flat = T.Tensor((N * OH * OW, F), dtype, out.data)
            T.clear(acc)
            for k in T.Pipelined(k_steps, num_stages=stages):
                T.im2col(data, data_shared, by, k, K, S, D, P)
                T.copy(weight_flat[k * block_K, bx * block_N], weight_shared)
                T.gemm(data_shared, weight_shared, acc)
            T.copy(acc, out_flat[by * block_M, bx * block_N])

    return main


def main(
    N=128,
    C=128,
    H=64,
    W=64,
    F=128,
    K=3,
    S=1,
    D=1,
    P=1,
    block_M=128,
    block_N=128,
    block_K=64,
    stages=3,
    threads=256,
    device=None,
):
    """Tiles of 128 output pixels x 128 filters, 64 taps x channels deep (128-byte rows of shared
    memory, the width of its widest swizzle), 3 stages: 32 KiB a stage, so that two blocks fit in the
    shared memory of an H200 SM. 256 threads: on sm_90a two warpgroups run wgmma on 64 rows each,
    on sm_80 eight warps run mma.sync."""
    device = device or ("cuda" if torch.cuda.is_available() else "cpu")
    with tilelang.use_target(device):  # the kernels compile for where the tensors live
        kernel = conv2d(N, C, H, W, F, K, S, D, P, block_M, block_N, block_K, stages, threads)
        data, weight = make_inputs(N, C, H, W, F, K, device=device)
        out = kernel(data, weight)
        # Products of fp16 values are exact in fp32 and both sides add them in fp32, in different
        # orders (~1e-6 relative): the kernel's error is its rounding of the output to fp16, half a
        # unit in the last place (2^-11, 5e-4 relative). rtol leaves 10x that; atol covers outputs
        # near zero, where the sums' different orders show.
        torch.testing.assert_close(out.float(), ref_conv2d(data, weight, S, D, P), rtol=5e-3, atol=1e-2)
        ms = time_ms(lambda: kernel(data, weight), device)
        tflops = conv_flops(N, C, H, W, F, K, S, D, P) / ms / 1e9
        print(
            f"conv2d N={N} C={C} H={H} W={W} F={F} K={K} stride={S} dilation={D} pad={P}: {ms:.3f} ms, "
            f"{tflops:.3g} TFLOP/s; all checks passed"
        )


if __name__ == "__main__":
    parser = argparse.ArgumentParser()
    sizes = dict(n=(128, "images"), c=(128, "input channels"), h=(64, "input rows"), w=(64, "input columns"))
    sizes.update(f=(128, "filters"), k=(3, "filter size (square)"), s=(1, "stride"), d=(1, "dilation"))
    sizes.update(p=(1, "zero padding on each side"))
    for name, (default, meaning) in sizes.items():
        parser.add_argument(f"--{name}", type=int, default=default, help=f"{meaning} (default {default})")
    parser.add_argument("--block_m", type=int, default=128)
    parser.add_argument("--block_n", type=int, default=128)
    parser.add_argument("--block_k", type=int, default=64)
    parser.add_argument("--stages", type=int, default=3)
    parser.add_argument("--threads", type=int, default=256)
    parser.add_argument("--device", choices=["cuda", "cpu"], help="default: cuda when torch sees a GPU, else cpu")
    a = parser.parse_args()
    main(a.n, a.c, a.h, a.w, a.f, a.k, a.s, a.d, a.p, a.block_m, a.block_n, a.block_k, a.stages, a.threads, a.device)

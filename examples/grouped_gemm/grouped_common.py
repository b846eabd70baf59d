"""What the grouped GEMM example, its test and benchmark/grouped_gemm share: MoE-like group sizes
(skewed, some empty, some smaller than a tile), their cu_seqlens-style offsets, random fp16 inputs,
the per-group torch reference, and the figures printed (time, TFLOPS)."""

import torch

from tilelang.profiler import do_bench


def group_sizes(E, total_tokens, skew=1.0, empty=0, seed=0):
    """Tokens per expert, summing to `total_tokens`, as a router sorting tokens by expert leaves them.

    Expert e draws a share proportional to (e + 1) ** -skew (a Zipf-like popularity: skew 0 is even,
    skew 1 gives the first expert E times the last's share), shuffled so the heavy experts are not
    all first. `empty` experts get no token at all (an expert nobody picked this step). The rounding
    remainder goes to one expert, so the sizes are uneven and rarely multiples of a tile."""
    gen = torch.Generator().manual_seed(seed)
    weights = torch.arange(1, E + 1, dtype=torch.float64) ** -skew
    weights = weights[torch.randperm(E, generator=gen)]
    if empty:
        weights[torch.randperm(E, generator=gen)[:empty]] = 0
    sizes = (weights / weights.sum() * total_tokens).floor().to(torch.int64)
    sizes[int(weights.argmax())] += total_tokens - int(sizes.sum())
    return [int(s) for s in sizes]


def edge_sizes(E, block_M):
    """Sizes at the edges of the row masking, cycled over the E experts: empty, one row, a tile but one,
    a whole tile, a tile and one row, two tiles and a few rows."""
    pattern = [0, 1, block_M - 1, block_M, block_M + 1, 2 * block_M + 3]
    return [pattern[e % len(pattern)] for e in range(E)]


def offsets_of(sizes, device="cuda"):
    """cu_seqlens-style offsets: int32 [E + 1], offsets[0] = 0, expert e owns rows offsets[e]:offsets[e + 1]."""
    offsets = [0]
    for s in sizes:
        offsets.append(offsets[-1] + s)
    return torch.tensor(offsets, dtype=torch.int32, device=device)


def make_inputs(sizes, N, K, device="cuda", seed=0):
    """A [sum(sizes), K] (tokens sorted by expert), B [E, N, K] (each expert's weight as nn.Linear
    stores it, [out_features, in_features]) and the offsets. Random, never zeros: a kernel that
    skips a tile must not pass."""
    gen = torch.Generator(device=device).manual_seed(seed)
    A = torch.randn(sum(sizes), K, generator=gen, device=device, dtype=torch.float16)
    B = torch.randn(len(sizes), N, K, generator=gen, device=device, dtype=torch.float16)
    return A, B, offsets_of(sizes, device)


def ref_grouped_matmul(A, B, offsets, dtype=torch.float32):
    """C[rows of expert e] = A[rows of e] @ B[e]^T, one torch.matmul per expert (in `dtype`: fp32 for
    the reference the kernels are checked against, fp16 for the loop they are timed against).
    `offsets`: the int32 tensor, or the same bounds as a list."""
    C = torch.empty(A.shape[0], B.shape[1], device=A.device, dtype=dtype)
    # (`offsets` as a tensor: one device-to-host copy per call; as a list, none)
    bounds = offsets.tolist() if torch.is_tensor(offsets) else offsets
    for e in range(B.shape[0]):
        lo, hi = bounds[e], bounds[e + 1]
        if hi > lo:
            torch.matmul(A[lo:hi].to(dtype), B[e].to(dtype).T, out=C[lo:hi])
    return C


def time_ms(fn, device="cuda"):
    """Median time of fn() in milliseconds (on the GPU: L2 flushed before each run)."""
    return do_bench(fn, return_mode="median", device=device)


def tflops(total_tokens, N, K, ms):
    """Useful TFLOPS: 2 * tokens * N * K multiply-adds (not counting the padding of partial tiles)."""
    return 2 * total_tokens * N * K / ms / 1e9

"""FlashAttention forward over packed sequences of different lengths (varlen): tilelang's example kernel
beside torch's own varlen attention (torch.nn.attention.varlen, flash-attn's kernel, where this torch
has it) and torch's scaled_dot_product_attention (flash and cuDNN backends) on the same sequences
padded to the longest, same run, TFLOP/s (fp16).

The lengths are drawn at random (seeded) between 1/8 of the longest and the longest, as in a packed
batch of prompts. TFLOP/s count the useful work only, 4 * heads * dim per (query, visible key) pair
of each sequence, for every column: the padded runs do more work for the same result, and that is
what they cost. The padded runs take no key-padding mask (torch's flash backend accepts none), so
they time the padded computation; only the rows of causal runs would be right. Our kernel (every
configuration tried) and torch's varlen are checked against the per-sequence float32 reference
before timing.

Run on a GPU machine: python benchmark/flash_attention/benchmark_flash_attention_varlen.py [--quick]
"""

import argparse
import functools
import inspect
import os
import random
import sys

import torch
import torch.nn.functional as F
from torch.nn.attention import SDPBackend, sdpa_kernel

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "examples", "flash_attention"))
from example_mha_fwd_varlen import flashattn_varlen, make_inputs, ref_program  # noqa: E402

from tilelang.profiler import do_bench_in_turn  # noqa: E402

# (block_M, block_N, num_stages, threads) tried per head dim; the best is reported.
CONFIGS = {
    64: [(128, 64, 2, 256), (128, 128, 2, 256)],
    128: [(128, 64, 2, 256), (128, 128, 2, 256)],
}


def shapes(quick):
    """(number of sequences, longest, heads, kv_heads, dim, causal) per row."""
    rows = [(16, 4096, 32, 32, 128, False), (16, 4096, 32, 32, 128, True)]
    if not quick:
        rows += [(16, 4096, 32, 8, 128, True), (32, 2048, 32, 32, 64, False), (32, 2048, 32, 32, 64, True)]
        rows += [(64, 1024, 32, 8, 128, True), (8, 8192, 32, 8, 128, True)]
    return rows


def draw_seqlens(batch, longest, seed=0):
    """`batch` lengths between longest / 8 and longest, the longest among them."""
    rng = random.Random(seed)
    return [longest] + [rng.randint(longest // 8, longest) for _ in range(batch - 1)]


def useful_flops(seqlens, heads, dim, causal):
    """Q·Kᵀ and P·V over the visible (query, key) pairs of each sequence (equal lengths: the lower
    triangle with its diagonal when causal)."""
    pairs = sum(s * (s + 1) // 2 if causal else s * s for s in seqlens)
    return 4 * heads * dim * pairs


def padded(x, cu, longest):
    """Packed [total, heads, dim] -> [batch, heads, longest, dim], zeros past each sequence's end."""
    bounds = cu.tolist()
    out = x.new_zeros(len(bounds) - 1, longest, *x.shape[1:])
    for b in range(len(bounds) - 1):
        out[b, : bounds[b + 1] - bounds[b]] = x[bounds[b] : bounds[b + 1]]
    return out.transpose(1, 2).contiguous()


def torch_sdpa(q, k, v, causal, backend):
    """A function running torch's attention on padded tensors with `backend`, or None when that
    backend cannot run them."""
    gqa = q.shape[1] != k.shape[1]

    def run():
        with sdpa_kernel(backend):
            return F.scaled_dot_product_attention(q, k, v, is_causal=causal, enable_gqa=gqa)

    try:
        run()
    except RuntimeError:
        return None
    return run


def torch_varlen(q, k, v, cu, longest, causal):
    """A function running torch's varlen attention on the packed tensors, or None where this torch
    has none (it appeared in torch 2.9) or it cannot run them."""
    try:
        from torch.nn.attention.varlen import varlen_attn
    except ImportError:
        return None
    # Newer torch takes a window ((-1, 0): causal, aligned bottom-right as ours), the first one a flag.
    params = inspect.signature(varlen_attn).parameters
    options = {"window_size": (-1, 0) if causal else (-1, -1)} if "window_size" in params else {"is_causal": causal}
    if q.shape[1] != k.shape[1]:
        options["enable_gqa"] = True
    run = functools.partial(varlen_attn, q, k, v, cu, cu, longest, longest, **options)
    try:
        run()
    except (RuntimeError, TypeError):
        return None
    return run


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--quick", action="store_true", help="16 sequences up to 4096, h32 d128 only")
    args = parser.parse_args()
    rows = []
    for batch, longest, heads, kv_heads, dim, causal in shapes(args.quick):
        seqlens = draw_seqlens(batch, longest)
        q, k, v, cu, _ = make_inputs(seqlens, seqlens, heads, kv_heads, dim, "float16", "cuda")
        fns = {}
        for config in CONFIGS[dim]:
            kernel = flashattn_varlen(batch, heads, kv_heads, longest, dim, causal, "float16", *config)
            # A fresh output buffer could hold an earlier configuration's result; check on fresh inputs.
            x, y, z = torch.randn_like(q), torch.randn_like(k), torch.randn_like(v)
            torch.testing.assert_close(kernel(x, y, z, cu, cu), ref_program(x, y, z, cu, cu, causal), rtol=1e-2,
                                       atol=1e-2)  # fmt: skip
            fns[config] = functools.partial(kernel, q, k, v, cu, cu)
        fns["varlen"] = torch_varlen(q, k, v, cu, longest, causal)
        if fns["varlen"] is not None:
            torch.testing.assert_close(fns["varlen"](), ref_program(q, k, v, cu, cu, causal), rtol=1e-2, atol=1e-2)
        qp, kp, vp = (padded(x, cu, longest) for x in (q, k, v))
        fns["flash"] = torch_sdpa(qp, kp, vp, causal, SDPBackend.FLASH_ATTENTION)
        fns["cudnn"] = torch_sdpa(qp, kp, vp, causal, SDPBackend.CUDNN_ATTENTION)
        # Every configuration and torch's functions timed in turn (the GPU's clocks drift); one that
        # cannot run is timed as nan.
        ms = do_bench_in_turn(fns, rounds=3, rep=30)
        best = min(CONFIGS[dim], key=lambda c: ms[c])
        flops = useful_flops(seqlens, heads, dim, causal)
        tflops = [flops / ms[name] / 1e9 for name in (best, "varlen", "flash", "cudnn")]
        fill = sum(seqlens) / (batch * longest)  # the share of the padded batch that is real tokens
        rows.append((batch, longest, heads, kv_heads, dim, causal, fill, best, *tflops))
    print(f"{'b':>3} {'longest':>7} {'h':>3} {'h_kv':>4} {'d':>4} {'causal':>6} {'fill':>5} {'best config':>20} "
          f"{'tilelang':>9} {'torch varlen':>12} {'padded flash':>12} {'padded cuDNN':>12} {'vs varlen':>9} "
          f"{'vs padded':>9}  (useful TFLOP/s)")  # fmt: skip
    for b, s, h, hk, d, c, fill, cfg, ours, varlen, flash, cudnn in rows:
        best_padded = max((x for x in (flash, cudnn) if x == x), default=float("nan"))  # (x == x: not nan)
        print(f"{b:3d} {s:7d} {h:3d} {hk:4d} {d:4d} {str(c):>6} {fill:5.2f} {str(cfg):>20} {ours:9.0f} {varlen:12.0f} "
              f"{flash:12.0f} {cudnn:12.0f} {ours / varlen:9.3f} {ours / best_padded:9.3f}")  # fmt: skip


if __name__ == "__main__":
    main()

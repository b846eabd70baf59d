"""FlashAttention forward: tilelang's example kernel beside torch's scaled_dot_product_attention with
its flash and cuDNN backends, same run, TFLOP/s (fp16, (batch, heads, seq, dim) layout). The column
"plain" is the same attention written without any schedule annotation (plain_style.py), as users
write it.

Run on a GPU machine: python benchmark/flash_attention/benchmark_flash_attention.py [--quick]
"""

import argparse
import functools
import os
import sys

import torch
import torch.nn.functional as F
from torch.nn.attention import SDPBackend, sdpa_kernel

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "examples", "flash_attention"))
from example_mha_fwd_bhsd import flashattn, ref_program  # noqa: E402
from plain_style import plain_flashattn  # noqa: E402

from tilelang.profiler import do_bench_in_turn  # noqa: E402

# (block_M, block_N, num_stages, threads) tried per shape; the best is reported. 176 is FA3's block N
# for d128 (measured worse at d64).
CONFIGS = {
    64: [(128, 64, 2, 256), (128, 128, 2, 256)],
    128: [(128, 64, 2, 256), (128, 128, 2, 256), (128, 176, 2, 256)],
}


def shapes(quick):
    rows = [(8, 32, 4096, 128, False), (8, 32, 4096, 128, True)]
    if not quick:
        for dim in (64, 128):
            for seq in (1024, 2048, 4096, 8192, 16384):
                rows.append((max(1, 32768 // seq), 32, seq, dim, False))
    return rows


def torch_sdpa(q, k, v, causal, backend):
    """A function running torch's attention with `backend`, or None when that backend cannot run."""

    def run():
        with sdpa_kernel(backend):
            return F.scaled_dot_product_attention(q, k, v, is_causal=causal)

    try:
        run()
    except RuntimeError:
        return None
    return run


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--quick", action="store_true", help="b8 h32 s4096 d128 only")
    args = parser.parse_args()
    rows = []
    for batch, heads, seq, dim, causal in shapes(args.quick):
        q, k, v = (torch.randn(batch, heads, seq, dim, device="cuda", dtype=torch.float16) for _ in range(3))
        flops = 4 * batch * heads * seq * seq * dim * (0.5 if causal else 1.0)
        fns = {}
        for config in CONFIGS[dim]:
            kernel = flashattn(batch, heads, seq, seq, dim, causal, *config)
            # A fresh output buffer could hold an earlier configuration's result; check on fresh inputs.
            x, y, z = torch.randn_like(q), torch.randn_like(k), torch.randn_like(v)
            torch.testing.assert_close(kernel(x, y, z), ref_program(x, y, z, causal), rtol=1e-2, atol=1e-2)
            fns[config] = functools.partial(kernel, q, k, v)
            # The same tiles written without annotations: the schedule alone differs. (It has no mask
            # for a last partial block of keys.)
            if seq % config[1]:
                continue
            plain = plain_flashattn(batch, heads, seq, dim, causal, *config)
            torch.testing.assert_close(plain(x, y, z), ref_program(x, y, z, causal), rtol=1e-2, atol=1e-2)
            fns[("plain", config)] = functools.partial(plain, q, k, v)
        fns["flash"] = torch_sdpa(q, k, v, causal, SDPBackend.FLASH_ATTENTION)
        fns["cudnn"] = torch_sdpa(q, k, v, causal, SDPBackend.CUDNN_ATTENTION)
        # Every configuration and torch's backends timed in turn (the GPU's clocks drift).
        ms = do_bench_in_turn(fns, rounds=3, rep=30)
        best = min(CONFIGS[dim], key=lambda c: ms[c])
        plain_best = min((c for c in CONFIGS[dim] if ("plain", c) in ms), key=lambda c: ms[("plain", c)])
        times = (ms[best], ms[("plain", plain_best)], ms["flash"], ms["cudnn"])
        rows.append((batch, heads, seq, dim, causal, best, *(flops / t / 1e9 for t in times)))
    print(f"{'b':>3} {'h':>3} {'seq':>6} {'d':>4} {'causal':>6} {'best config':>20} {'tilelang':>9} {'plain':>6} "
          f"{'torch flash':>11} {'torch cuDNN':>11} {'vs cuDNN':>8} {'plain/ours':>10}  (TFLOP/s)")  # fmt: skip
    for b, h, s, d, c, cfg, ours, plain, flash, cudnn in rows:
        print(f"{b:3d} {h:3d} {s:6d} {d:4d} {str(c):>6} {str(cfg):>20} {ours:9.0f} {plain:6.0f} {flash:11.0f} "
              f"{cudnn:11.0f} {ours / cudnn:8.3f} {plain / ours:10.3f}")  # fmt: skip


if __name__ == "__main__":
    main()

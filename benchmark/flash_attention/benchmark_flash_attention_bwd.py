"""FlashAttention backward: tilelang's example (preprocess, backward, dQ postprocess, and zeroing dQ's
float32 accumulator, all counted) beside the backward of torch's scaled_dot_product_attention with
its flash and cuDNN backends, same run, TFLOP/s (fp16, multi-head, b8 h32 s4096).

FLOPs: the backward's five gemms, 10 * b * h * s^2 * d (2.5 times the forward's), halved when causal.
The "max err" column is the largest |difference| of dQ, dK and dV from torch's (flash, else cuDNN, else
math), as a check that the timed kernels compute the gradient; a backend that cannot run shows nan.

Run on a GPU machine: python benchmark/flash_attention/benchmark_flash_attention_bwd.py [--quick]
"""

import argparse
import os
import sys

import torch
import torch.nn.functional as F
from torch.nn.attention import SDPBackend, sdpa_kernel

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "examples", "flash_attention"))
from example_mha_bwd import (  # noqa: E402
    flashattn_bwd,
    flashattn_bwd_postprocess,
    flashattn_bwd_preprocess,
    flashattn_fwd,
    make_inputs,
)

from tilelang.profiler import do_bench_in_turn  # noqa: E402

# (block_M, block_N, num_stages, threads) of the backward kernel tried per head dim; the best is
# reported. block_M keys per block, block_N queries per step.
CONFIGS = {
    64: [(128, 64, 2, 256), (128, 128, 2, 256), (64, 64, 2, 128), (64, 128, 2, 128)],
    128: [(128, 64, 2, 256), (128, 32, 2, 256), (64, 64, 2, 128)],
}


def shapes(quick):
    if quick:
        return [(8, 32, 4096, 128, False), (8, 32, 4096, 128, True)]
    return [(8, 32, 4096, dim, causal) for dim in (128, 64) for causal in (False, True)]


def tilelang_backward(q, k, v, o, lse, do, causal, config):
    """A function running the example's backward kernels with `config` (the kernels built once)."""
    batch, seq_len, heads, dim = q.shape
    prep = flashattn_bwd_preprocess(batch, heads, seq_len, dim)
    bwd = flashattn_bwd(batch, heads, seq_len, dim, causal, 1, "float16", *config)
    post = flashattn_bwd_postprocess(batch, heads, seq_len, dim)

    def run():
        dq_accum = torch.zeros(q.shape, dtype=torch.float32, device=q.device)
        dk, dv = bwd(q, k, v, do, lse, prep(o, do), dq_accum)
        return post(dq_accum), dk, dv

    return run


def torch_backward(q, k, v, do, causal, backend):
    """A function running the backward of torch's attention computed with `backend`, or None when
    that backend cannot run. Tensors in (batch, seq, heads, dim); torch sees (batch, heads, seq, dim)
    views of them."""
    qh, kh, vh = (x.transpose(1, 2).detach().requires_grad_() for x in (q, k, v))
    try:
        with sdpa_kernel(backend):
            out = F.scaled_dot_product_attention(qh, kh, vh, is_causal=causal)
    except RuntimeError:
        return None
    grad_out = do.transpose(1, 2)

    def run():
        grads = torch.autograd.grad(out, (qh, kh, vh), grad_out, retain_graph=True)
        return tuple(g.transpose(1, 2) for g in grads)

    return run


def max_error(ours, ref):
    return max((a.float() - b.float()).abs().max().item() for a, b in zip(ours, ref))


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--quick", action="store_true", help="b8 h32 s4096 d128 only")
    args = parser.parse_args()
    rows = []
    for batch, heads, seq, dim, causal in shapes(args.quick):
        q, k, v, do = make_inputs(batch, heads, heads, seq, dim)
        o, lse = flashattn_fwd(batch, heads, seq, dim, causal)(q, k, v)
        flops = 10 * batch * heads * seq * seq * dim * (0.5 if causal else 1.0)
        fns = {config: tilelang_backward(q, k, v, o, lse, do, causal, config) for config in CONFIGS[dim]}
        fns["flash"] = torch_backward(q, k, v, do, causal, SDPBackend.FLASH_ATTENTION)
        fns["cudnn"] = torch_backward(q, k, v, do, causal, SDPBackend.CUDNN_ATTENTION)
        ref = (fns["flash"] or fns["cudnn"] or torch_backward(q, k, v, do, causal, SDPBackend.MATH))()
        errors = {config: max_error(fns[config](), ref) for config in CONFIGS[dim]}
        for config, err in errors.items():  # a wrong kernel's time means nothing
            assert err < 0.1, f"config {config}: dQ/dK/dV differ from torch's by {err}"
        # Every configuration and torch's backends timed in turn (the GPU's clocks drift); a backend
        # that cannot run is timed as nan.
        ms = do_bench_in_turn(fns, rounds=3, rep=30)
        best = min(CONFIGS[dim], key=lambda c: ms[c])
        ours, flash, cudnn = (flops / ms[name] / 1e9 for name in (best, "flash", "cudnn"))
        rows.append((batch, heads, seq, dim, causal, best, ours, flash, cudnn, errors[best]))
    print(f"{'b':>3} {'h':>3} {'seq':>6} {'d':>4} {'causal':>6} {'best config':>20} {'tilelang':>9} "
          f"{'torch flash':>11} {'torch cuDNN':>11} {'vs flash':>8} {'vs cuDNN':>8} {'max err':>8}"
          "  (TFLOP/s)")  # fmt: skip
    for b, h, s, d, c, cfg, ours, flash, cudnn, err in rows:
        print(f"{b:3d} {h:3d} {s:6d} {d:4d} {str(c):>6} {str(cfg):>20} {ours:9.0f} {flash:11.0f} {cudnn:11.0f} "
              f"{ours / flash:8.3f} {ours / cudnn:8.3f} {err:8.4f}")  # fmt: skip


if __name__ == "__main__":
    main()

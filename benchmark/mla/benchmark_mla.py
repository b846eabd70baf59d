"""DeepSeek MLA decode: tilelang's example kernels beside a torch implementation (two batched
matmuls around a softmax, the best plain torch does), same run: TFLOP/s and GB/s of KV read.
`example_mla_decode` (its best block/split configuration) and the warp-specialized
`example_mla_decode_ws` (Hopper) are timed in turn with torch.

Run on a GPU machine: python benchmark/mla/benchmark_mla.py
"""

import functools
import os
import sys

import torch

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "examples", "deepseek_mla"))
from example_mla_decode import mla_decode, ref_program  # noqa: E402
from example_mla_decode_ws import mla_decode_ws  # noqa: E402

from tilelang.profiler import do_bench_in_turn  # noqa: E402

HEADS, DIM, PE_DIM = 128, 512, 64
# (block_N, block_H, num_split) tried per shape; the best is reported.
CONFIGS = [(64, 64, 1), (64, 64, 2), (64, 64, 4), (32, 64, 4)]


def torch_mla(q, q_pe, kv, k_pe):
    """Attention with the latent head shared by all query heads, in the inputs' dtype."""
    query = torch.cat([q, q_pe], dim=-1)
    key = torch.cat([kv, k_pe], dim=-1)[:, :, 0]
    scores = torch.bmm(query, key.transpose(1, 2)) * (query.shape[-1] ** -0.5)
    return torch.bmm(scores.softmax(dim=-1), kv[:, :, 0])


def bench_shape(batch, kv_ctx, dtype):
    tdt = getattr(torch, dtype)
    q = torch.randn(batch, HEADS, DIM, device="cuda", dtype=tdt)
    q_pe = torch.randn(batch, HEADS, PE_DIM, device="cuda", dtype=tdt)
    kv = torch.randn(batch, kv_ctx, 1, DIM, device="cuda", dtype=tdt)
    k_pe = torch.randn(batch, kv_ctx, 1, PE_DIM, device="cuda", dtype=tdt)
    flops = 2 * batch * HEADS * kv_ctx * (DIM + PE_DIM) + 2 * batch * HEADS * kv_ctx * DIM
    kv_bytes = batch * kv_ctx * (DIM + PE_DIM) * q.element_size()
    fns = {}
    for config in CONFIGS:
        block_N, block_H, num_split = config
        kernel = mla_decode(batch, HEADS, 1, kv_ctx, DIM, PE_DIM, block_N, block_H, num_split, dtype)
        glse = torch.empty(batch, HEADS, num_split, device="cuda", dtype=tdt)
        part = torch.empty(batch, HEADS, num_split, DIM, device="cuda", dtype=tdt)
        q2 = torch.randn_like(q)  # fresh queries: a recycled output buffer cannot pass for a result
        out = kernel(q2, q_pe, kv, k_pe, glse, part)
        torch.testing.assert_close(out, ref_program(q2, q_pe, kv, k_pe), rtol=2e-2, atol=2e-2)
        fns[config] = functools.partial(kernel, q, q_pe, kv, k_pe, glse, part)
    ws = mla_decode_ws(batch, HEADS, kv_ctx, DIM, PE_DIM, dtype=dtype)
    q2 = torch.randn_like(q)
    torch.testing.assert_close(ws(q2, q_pe, kv, k_pe), ref_program(q2, q_pe, kv, k_pe), rtol=2e-2, atol=2e-2)
    fns["ws"] = functools.partial(ws, q, q_pe, kv, k_pe)
    fns["torch"] = functools.partial(torch_mla, q, q_pe, kv, k_pe)
    # Every kernel and torch timed in turn (the GPU's clocks drift).
    ms = do_bench_in_turn(fns, rounds=3, rep=60)
    best = min(CONFIGS, key=lambda c: ms[c])
    tflops = {k: flops / ms[k] / 1e9 for k in (best, "ws", "torch")}
    return best, tflops[best], tflops["ws"], kv_bytes / min(ms[best], ms["ws"]) / 1e6, tflops["torch"]


def main():
    rows = []
    for batch, kv_ctx in ((64, 8192), (132, 8192)):
        for dtype in ("float16", "bfloat16"):
            rows.append((batch, kv_ctx, dtype, *bench_shape(batch, kv_ctx, dtype)))
    print(f"{'batch':>5} {'kv':>6} {'dtype':>9} {'best config':>14} {'example TF/s':>12} {'ws TF/s':>8} "
          f"{'GB/s':>6} {'torch TF/s':>10}")  # fmt: skip
    for b, s, d, cfg, tf, tf_ws, gbs, ref in rows:
        print(f"{b:5d} {s:6d} {d:>9} {str(cfg):>14} {tf:12.0f} {tf_ws:8.0f} {gbs:6.0f} {ref:10.0f}")


if __name__ == "__main__":
    main()

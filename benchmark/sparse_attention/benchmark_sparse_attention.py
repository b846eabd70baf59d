"""Sparse attention: tilelang's block-sparse attention at densities 0.1, 0.25, 0.5 and 1 beside dense
FlashAttention (tilelang's example_mha_fwd_bhsd and torch's SDPA, flash backend) from the same run, and
NSA's selected-block branch beside its torch reference; fp16, every output checked before timing.

Block-sparse rows: b8 h32 s4096 d128 (non-causal, 128 x 64 blocks); the mask's density is the share
of (query block, key block) pairs kept, drawn at random. "vs dense" is our time over our dense
FlashAttention's; with the work proportional to the density it should be about the density
("/ density" near 1; above 1 is what a skipped block still costs: its mask bit and, on Hopper, the
producer's empty barrier round). TFLOP/s count only the kept blocks.

NSA rows: b2, 64 query heads over 4 key/value heads, d128, 16 selected blocks of 64 keys a token
(DeepSeek NSA's shape), s = 4096 and 8192 (the float32 reference's scores take 9 GB at 4096; at 8192
the kernel is timed beside SDPA only). Beside it: the torch reference (dense float32 scores with the
token mask) and torch SDPA's dense causal attention over the same tokens, what the sparse branch
replaces.

Every function of a row is timed in turn, median of rounds (the GPU's clocks drift between runs).
Run on a GPU machine: python benchmark/sparse_attention/benchmark_sparse_attention.py [--quick]
"""

import argparse
import functools
import os
import sys

import torch
import torch.nn.functional as F
from torch.nn.attention import SDPBackend, sdpa_kernel

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "..", "examples", "sparse_attention"))
sys.path.insert(0, os.path.join(HERE, "..", "..", "examples", "flash_attention"))
import example_blocksparse_attention as blocksparse  # noqa: E402
import example_mha_fwd_bhsd as dense  # noqa: E402
import example_nsa_fwd as nsa  # noqa: E402

from tilelang.profiler import do_bench_in_turn  # noqa: E402

DENSITIES = (0.1, 0.25, 0.5, 1.0)
CONFIG = (128, 64, 2, 256)  # block_M, block_N, num_stages, threads (the dense example's best at d128)


def check_blocksparse(out, q, k, v, mask, block_M, block_N):
    """The output against the float32 reference one batch entry at a time (scores of one entry: 2 GB)."""
    for b in range(q.shape[0]):
        one = (x[b : b + 1] for x in (q, k, v, mask))
        ref = blocksparse.ref_program(*one, False, block_M, block_N)
        torch.testing.assert_close(out[b : b + 1], ref, rtol=1e-2, atol=1e-2)


def bench_blocksparse(batch, heads, seq, dim):
    block_M, block_N = CONFIG[:2]
    q, k, v = (torch.randn(batch, heads, seq, dim, device="cuda", dtype=torch.float16) for _ in range(3))
    fns = {}
    dense_kernel = dense.flashattn(batch, heads, seq, seq, dim, False, *CONFIG)
    torch.testing.assert_close(dense_kernel(q, k, v), dense.ref_program(q, k, v, False), rtol=1e-2, atol=1e-2)
    fns["dense"] = functools.partial(dense_kernel, q, k, v)

    def sdpa():
        with sdpa_kernel(SDPBackend.FLASH_ATTENTION):
            return F.scaled_dot_product_attention(q, k, v)

    fns["sdpa"] = sdpa
    kernel = blocksparse.blocksparse_attention(batch, heads, seq, dim, False, *CONFIG)
    kept = {}
    for density in DENSITIES:
        mask = blocksparse.random_block_mask(batch, heads, seq, block_M, block_N, density, "cuda")
        lists = blocksparse.block_indices(mask, False, block_M, block_N)  # once per mask, not timed
        check_blocksparse(kernel(q, k, v, *lists), q, k, v, mask, block_M, block_N)
        kept[density] = mask.float().mean().item()
        fns[density] = functools.partial(kernel, q, k, v, *lists)
    ms = do_bench_in_turn(fns, rounds=3, rep=30)
    flops = 4 * batch * heads * seq * seq * dim
    print(f"block-sparse attention b{batch} h{heads} s{seq} d{dim} (fp16, non-causal, blocks {block_M} x {block_N})")
    print(f"  dense: tilelang {ms['dense']:.3f} ms ({flops / ms['dense'] / 1e9:.0f} TFLOP/s), "
          f"torch SDPA flash {ms['sdpa']:.3f} ms ({flops / ms['sdpa'] / 1e9:.0f} TFLOP/s)")  # fmt: skip
    print(f"  {'density':>8} {'kept':>6} {'ms':>8} {'vs dense':>9} {'/ density':>10} {'TFLOP/s':>8}")
    for density in DENSITIES:
        t = ms[density]
        ratio = t / ms["dense"]
        print(f"  {density:8.2f} {kept[density]:6.3f} {t:8.3f} {ratio:9.3f} {ratio / kept[density]:10.2f} "
              f"{flops * kept[density] / t / 1e9:8.0f}")  # fmt: skip


def causal_block_indices(batch, seq, kv_heads, selected_blocks, block_size):
    """Distinct random blocks at or before each token, as NSA's top-k selection gives: every slot used
    where the token has that many blocks (-1 in the rest, for the first tokens)."""
    num_blocks = -(-seq // block_size)
    score = torch.rand(batch, seq, kv_heads, num_blocks, device="cuda")
    after = torch.arange(num_blocks, device="cuda") > torch.arange(seq, device="cuda")[:, None] // block_size
    score = score.masked_fill(after[None, :, None, :], -1.0)
    top = score.topk(min(selected_blocks, num_blocks), dim=-1)
    indices = torch.where(top.values >= 0, top.indices, -1)
    if indices.shape[-1] < selected_blocks:
        indices = torch.cat([indices, indices.new_full((*indices.shape[:-1], selected_blocks - num_blocks), -1)], -1)
    return indices.to(torch.int32)


def bench_nsa(batch, heads, kv_heads, seq, dim, selected_blocks, block_size, check):
    q = torch.randn(batch, seq, heads, dim, device="cuda", dtype=torch.float16)
    k, v = (torch.randn(batch, seq, kv_heads, dim, device="cuda", dtype=torch.float16) for _ in range(2))
    indices = causal_block_indices(batch, seq, kv_heads, selected_blocks, block_size)
    kernel = nsa.nsa_fwd(batch, heads, kv_heads, seq, dim, selected_blocks, block_size, max(16, heads // kv_heads))
    fns = {"ours": functools.partial(kernel, q, k, v, indices)}
    if check:
        torch.testing.assert_close(kernel(q, k, v, indices), nsa.ref_program(q, k, v, indices, block_size),
                                   rtol=1e-2, atol=1e-2)  # fmt: skip
        fns["reference"] = functools.partial(nsa.ref_program, q, k, v, indices, block_size)
    else:  # too large for the reference's dense scores: the same check at the first 2048 tokens
        n = 2048
        small = nsa.nsa_fwd(batch, heads, kv_heads, n, dim, selected_blocks, block_size, max(16, heads // kv_heads))
        part = tuple(x[:, :n].contiguous() for x in (q, k, v, indices))
        torch.testing.assert_close(small(*part), nsa.ref_program(*part, block_size), rtol=1e-2, atol=1e-2)
    qt, kt, vt = (x.transpose(1, 2) for x in (q, k, v))  # -> (batch, heads, seq, dim)

    # torch picks SDPA's backend (GQA, fp16, causal: flash or cuDNN where they take GQA).
    fns["sdpa"] = functools.partial(F.scaled_dot_product_attention, qt, kt, vt, is_causal=True, enable_gqa=True)
    ms = do_bench_in_turn(fns, rounds=3, rep=30)
    # Keys a token attends: its used blocks, the keys after it masked.
    starts = indices.long() * block_size
    tokens = torch.arange(seq, device="cuda")[None, :, None, None]
    keys = ((tokens - starts + 1).clamp(0, block_size) * (indices >= 0)).sum().item()
    flops = 4 * keys * (heads // kv_heads) * dim
    ref = f"{ms['reference']:10.3f}" if "reference" in ms else f"{'-':>10}"
    print(f"  s{seq:<6} {ms['ours']:8.3f} {flops / ms['ours'] / 1e9:8.0f} {ref} {ms['sdpa']:12.3f}")


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--quick", action="store_true", help="smaller block-sparse batch, NSA at 4096 only")
    args = parser.parse_args()
    bench_blocksparse(2 if args.quick else 8, 32, 4096, 128)
    print("NSA selected blocks: b2 h64 h_kv4 d128, 16 blocks of 64 a token (fp16)")
    print(f"  {'seq':<7} {'ours ms':>8} {'TFLOP/s':>8} {'torch ref':>10} {'SDPA causal':>12}  (ms)")
    for seq in (4096,) if args.quick else (4096, 8192):
        bench_nsa(2, 64, 4, seq, 128, 16, 64, check=seq <= 4096)


if __name__ == "__main__":
    main()

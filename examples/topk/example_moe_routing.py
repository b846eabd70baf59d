"""Fused MoE routing: softmax over each token's expert logits, then its top-k experts and their weights
(renormalized to sum to 1, as Mixtral's router does), checked against torch softmax + topk.

logits [M, E] (fp32 or fp16) -> topk_weights [M, k] fp32, topk_ids [M, k] int32, in one kernel that
reads the logits once (example_topk.py explains the selection: 64-bit (value, index) keys, k rounds
of one `T.reduce_max`):

- Softmax is increasing, so the k largest probabilities belong to the k largest logits: the
  selection runs on the logits, exactly and with the lowest expert winning ties, and no probability
  is computed for the E - k experts not chosen.
- The first pick is the row's maximum m. With renormalization the softmax's denominator cancels:
  weight_r = exp(l_r - m) / sum over the k picks of exp(l_s - m), from the picks alone. Without it
  (`renormalize=False`, the plain softmax probabilities), one more pass sums exp(l - m) over the row.
- A token's E logits lie on `threads // rows` threads (a warp for E = 64..256, E / 32 each), so a
  round is five shuffles, and a block routes `rows` tokens.
"""

import argparse

import torch
from example_topk import (
    TAKEN,
    Spread,
    check_sizes,
    index_of,
    load_rows,
    take_largest,
    thread_max,
    value_of,
    value_of_ordered,
)

import tilelang
import tilelang.language as T
from tilelang.profiler import do_bench

LOG2E = 1.44269504  # exp(x) = exp2(x * log2(e))


@tilelang.jit(out_idx=[-2, -1])
def moe_routing(M, E, k, rows=4, threads=128, renormalize=True, dtype="float32"):
    check_sizes(E, k, rows, threads)
    s = Spread(rows, threads, -(-E // (threads // rows)), E)
    tpr, per_thread = s.tpr, s.per_thread
    renormalize = bool(renormalize)  # (decided when the kernel is traced)

    @T.prim_func
    def main(
        logits: T.Tensor((M, E), dtype),
        topk_weights: T.Tensor((M, k), "float32"),
        topk_ids: T.Tensor((M, k), "int32"),
    ):
        with T.Kernel(T.ceildiv(M, rows), threads=threads) as bx:
            ord_ = T.alloc_fragment((rows, tpr, per_thread), "int32")
            partial = T.alloc_fragment((rows, tpr), "int64")
            top = T.alloc_fragment((rows, tpr), "int32")
            best = T.alloc_fragment((rows,), "int64")
            row_max = T.alloc_fragment((rows,), "float32")
            exps = T.alloc_fragment((rows, tpr), "float32")
            denominator = T.alloc_fragment((rows,), "float32")
            # The picks' exp(l - m) and experts, until the denominator is known.
            picked = T.alloc_shared((rows, k), "float32")
            picked_ids = T.alloc_shared((rows, k), "int32")
            s.annotate(ord_, partial, top, exps)
            load_rows(logits, ord_, bx, 0, M, s)
            for i, t in T.Parallel(rows, tpr):
                thread_max(ord_, top, partial, i, t, 0, s)
            if not renormalize:
                # The whole row's sum of exp(l - m), before any entry is taken; TAKEN entries past
                # the row's end add nothing.
                T.reduce_max(partial, best, dim=1)
                for i in T.Parallel(rows):
                    row_max[i] = value_of(best[i])
                for i, t in T.Parallel(rows, tpr):
                    exps[i, t] = 0
                    for e in T.unroll(per_thread):
                        if ord_[i, t, e] != TAKEN:
                            exps[i, t] += T.exp2((value_of_ordered(ord_[i, t, e]) - row_max[i]) * LOG2E)
                T.reduce_sum(exps, denominator, dim=1)
            for r in T.serial(k):
                take_largest(ord_, top, partial, best, 0, s)
                for i in T.Parallel(rows):
                    if r == 0:
                        row_max[i] = value_of(best[i])
                    picked[i, r] = T.exp2((value_of(best[i]) - row_max[i]) * LOG2E)
                    picked_ids[i, r] = index_of(best[i], E)
            if renormalize:
                T.reduce_sum(picked, denominator, dim=1)
            for i, r in T.Parallel(rows, k):
                if bx * rows + i < M:
                    topk_weights[bx * rows + i, r] = picked[i, r] / denominator[i]
                    topk_ids[bx * rows + i, r] = picked_ids[i, r]

    return main


def torch_routing(logits, k, renormalize=True):
    """The reference: fp32 softmax over the experts, torch.topk, then the weights renormalized."""
    probs = torch.softmax(logits.float(), dim=-1)
    weights, ids = torch.topk(probs, k, dim=-1)
    if renormalize:
        weights = weights / weights.sum(dim=-1, keepdim=True)
    return weights, ids.int()


def check_routing(logits, weights, ids, k, renormalize=True):
    """Weights against torch's to fp32 rounding; the experts through the probabilities they point at
    (two logits a few ulps apart can round to one probability, where either expert is right), all
    distinct, and equal logits taken lowest expert first."""
    ref_weights, _ = torch_routing(logits, k, renormalize)
    torch.testing.assert_close(weights, ref_weights, rtol=1e-5, atol=1e-6)
    probs = torch.softmax(logits.float(), dim=-1)
    idx = ids.long()
    torch.testing.assert_close(torch.gather(probs, 1, idx), torch.topk(probs, k, dim=-1).values, rtol=1e-5, atol=1e-7)
    assert (idx.sort(dim=-1).values.diff(dim=-1) > 0).all(), "an expert was chosen twice"
    chosen = torch.gather(logits, 1, idx)
    assert (chosen[:, 1:] <= chosen[:, :-1]).all(), "experts must come largest logit first"
    ties = chosen[:, 1:] == chosen[:, :-1]
    assert (idx[:, 1:] > idx[:, :-1])[ties].all(), "equal logits must come lowest expert first"


def main(M=4096, E=256, k=8, rows=4, threads=128, renormalize=True, dtype="float32", device=None):
    device = device or ("cuda" if torch.cuda.is_available() else "cpu")
    with tilelang.use_target(device):  # the kernels compile for where the tensors live
        kernel = moe_routing(M, E, k, rows, threads, renormalize, dtype)
        logits = (torch.randn(M, E, device=device) * 2).to(getattr(torch, dtype))
        logits[0, 1] = logits[0, E - 2] = 50.0  # a tie for the first pick
        logits[1] = -logits[1].abs() - 20  # all negative: entries past the row's end must still lose
        weights, ids = kernel(logits)
        check_routing(logits, weights, ids, k, renormalize)
        assert ids[0, :2].tolist() == [1, E - 2][:k]
        if renormalize:
            torch.testing.assert_close(weights.sum(dim=-1), torch.ones(M, device=device), rtol=1e-5, atol=1e-5)
        ms = do_bench(lambda: kernel(logits), return_mode="median", device=device)
        name = "moe routing" if renormalize else "moe routing, not renormalized"
        print(f"{name} M={M} E={E} k={k} {dtype}: {ms * 1e3:.1f} us; all checks passed")


if __name__ == "__main__":
    parser = argparse.ArgumentParser()
    parser.add_argument("--m", type=int, default=4096, help="tokens")
    parser.add_argument("--e", type=int, default=256, help="experts")
    parser.add_argument("--k", type=int, default=8)
    parser.add_argument("--rows", type=int, default=4, help="tokens a block")
    parser.add_argument("--threads", type=int, default=128)
    parser.add_argument("--no_renormalize", action="store_true", help="the plain softmax probabilities")
    parser.add_argument("--dtype", choices=["float32", "float16"], default="float32")
    parser.add_argument("--device", choices=["cuda", "cpu"], help="default: cuda when torch sees a GPU, else cpu")
    args = parser.parse_args()
    main(args.m, args.e, args.k, args.rows, args.threads, not args.no_renormalize, args.dtype, device=args.device)

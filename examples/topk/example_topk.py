"""Row-wise top-k, values and int32 indices of the k largest entries of each row of X [M, N] (fp32 or
fp16 in), checked against torch.topk.

The k entries are found by k rounds of an arg-max over the row, each round taking the winner out:

- Each entry becomes one 64-bit integer key, `(ordered value << 32) | (N - 1 - column)`, whose signed
  order is (value, then the lower column first). One `T.reduce_max` over keys is then an arg-max
  with a deterministic tie-break (the lowest index wins among equal values), and the key decodes
  back to the exact value and its column: no second reduction to find where the maximum was.
  `ordered` maps float bits to an int32 of the same order (negative floats have their magnitude
  bits flipped); a NaN ranks above +inf, as in torch.topk.
- A row is spread over `threads // rows` threads of the block; each thread holds `per_thread`
  entries of it in registers, as their 32-bit ordered values (half the registers of 64-bit keys:
  a 32768-wide row fits on 1024 threads). Each thread keeps one key, the largest of its own
  entries (its `partial`), so a round is one reduction of one key per thread across the row's
  threads (warp shuffles, then shared memory across warps). Only the thread that held the winner
  rescans its entries for its next-largest: the others skip the round's in-thread work.
- The taken entry is masked to INT32_MIN, below every ordered float, so it is never taken again.
- Long rows and few of them (`split` > 1): each row is cut into `split` parts, one block each, whose
  k picks go to a workspace as keys; a second kernel takes each row's k largest among its
  split * k picks. More, smaller blocks: one block's loads run while another's rounds do.

`example_moe_routing.py` builds the fused softmax + top-k router on the same pieces.
"""

import argparse
import dataclasses

import torch

import tilelang
import tilelang.language as T
from tilelang.profiler import do_bench

TAKEN = -(2**31)  # the ordered value of an entry already taken (or past the row's end): below every float
INT32_MAX = 2**31 - 1


def ordered(x):
    """The float32 x as an int32 whose signed order is x's (NaN above +inf, as torch.topk ranks it;
    T.isnan, since the simplifier folds the usual `x != x` to false)."""
    bits = T.reinterpret(x, "int32")
    return T.if_then_else(T.isnan(x), T.int32(INT32_MAX), T.if_then_else(bits < 0, bits ^ T.int32(INT32_MAX), bits))


def value_of_ordered(o):
    """The float32 whose ordered value is o (the inverse of `ordered`)."""
    return T.reinterpret(T.if_then_else(o < 0, o ^ T.int32(INT32_MAX), o), "float32")


def pack(o, col, N):
    """The key of ordered value o at column col: larger value first, then the lower column. (A column
    past the row's end, o TAKEN, has its low word kept to 32 bits: the key stays below every real one.)"""
    return T.shift_left(T.Cast("int64", o), T.int64(32)) | (T.Cast("int64", N - 1 - col) & T.int64(0xFFFFFFFF))


def value_of(key):
    return value_of_ordered(T.Cast("int32", T.shift_right(key, T.int64(32))))


def index_of(key, N):
    return N - 1 - T.Cast("int32", key & T.int64(0xFFFFFFFF))


@dataclasses.dataclass(frozen=True)
class Spread:
    """How a block holds `rows` rows (or one part of each, when a row is split over blocks): each on
    `threads // rows` consecutive threads (a warp or more: a row's reduction is a shuffle butterfly,
    then shared memory across its warps), `per_thread` entries a thread, as registers. Entry e of
    the row's thread t is column `first + e * tpr + t`: a warp's loads read consecutive columns, and
    a thread's columns increase with e."""

    rows: int
    threads: int
    per_thread: int
    N: int  # the row's length: the keys' columns count from its start

    @property
    def tpr(self):
        return self.threads // self.rows

    @property
    def width(self):
        return self.per_thread * self.tpr

    def column(self, t, e, first=0):
        return first + e * self.tpr + t

    def annotate(self, ord_, *partials):
        """Pin the layouts: `ord_` [rows, tpr, per_thread] and one register a thread for each partial."""
        tpr = self.tpr
        entries = T.Fragment(
            ord_.shape, forward_thread_fn=lambda i, t, e: i * tpr + t, forward_index_fn=lambda i, t, e: e
        )
        one = T.Fragment(partials[0].shape, forward_thread_fn=lambda i, t: i * tpr + t, forward_index_fn=lambda i, t: 0)
        T.annotate_layout({ord_: entries, **{p: one for p in partials}})


def check_sizes(N, k, rows, threads, split=1):
    if threads % rows or (threads // rows) & (threads // rows - 1):
        raise ValueError(f"rows={rows} must split threads={threads} into power-of-two groups of threads")
    if not 1 <= k <= N:
        raise ValueError(f"k={k} must be in 1..N={N}")
    if N >= 2**31:
        raise ValueError("a column must fit in the key's low 32 bits")
    if split > 1 and rows != 1:
        raise ValueError("a row split over blocks (split > 1) takes one row a block (rows=1)")


MERGE_ROWS, MERGE_THREADS = 4, 128  # the merge kernel's rows and threads a block (split > 1)


@tilelang.jit(out_idx=[-2, -1])
def topk(M, N, k, rows=1, threads=128, split=1, dtype="float32"):
    """values [M, k] (X's dtype) and indices [M, k] (int32) of each row's k largest entries, largest
    first; `rows` rows a block. With split > 1 (long rows, few of them), each row is cut into `split`
    parts, one block each, whose k picks (as keys) go to a workspace; a second kernel takes the k
    largest of each row's split * k picks."""
    check_sizes(N, k, rows, threads, split)
    # The last entries of a row's threads may pass its end (or its part's): TAKEN there.
    s = Spread(rows, threads, -(-N // (split * (threads // rows))), N)
    tpr, per_thread = s.tpr, s.per_thread

    @T.prim_func
    def main(X: T.Tensor((M, N), dtype), values: T.Tensor((M, k), dtype), indices: T.Tensor((M, k), "int32")):
        with T.Kernel(T.ceildiv(M, rows), threads=threads) as bx:
            ord_ = T.alloc_fragment((rows, tpr, per_thread), "int32")
            partial = T.alloc_fragment((rows, tpr), "int64")
            top = T.alloc_fragment((rows, tpr), "int32")
            best = T.alloc_fragment((rows,), "int64")
            s.annotate(ord_, partial, top)
            load_rows(X, ord_, bx, 0, M, s)
            for i, t in T.Parallel(rows, tpr):
                thread_max(ord_, top, partial, i, t, 0, s)
            for r in T.serial(k):
                take_largest(ord_, top, partial, best, 0, s)
                write_picks(values, indices, best, bx, r, rows, M, N)

    if split == 1:
        return main
    merge_width = 1 << (split * k - 1).bit_length()

    @T.prim_func
    def main_split(X: T.Tensor((M, N), dtype), values: T.Tensor((M, k), dtype), indices: T.Tensor((M, k), "int32")):
        picks = T.alloc_global((M, split * k), "int64")
        with T.Kernel(M, split, threads=threads) as (bx, part):
            ord_ = T.alloc_fragment((1, tpr, per_thread), "int32")
            partial = T.alloc_fragment((1, tpr), "int64")
            top = T.alloc_fragment((1, tpr), "int32")
            best = T.alloc_fragment((1,), "int64")
            s.annotate(ord_, partial, top)
            load_rows(X, ord_, bx, part * s.width, M, s)
            for i, t in T.Parallel(1, tpr):
                thread_max(ord_, top, partial, i, t, part * s.width, s)
            for r in T.serial(k):
                take_largest(ord_, top, partial, best, part * s.width, s)
                for i in T.Parallel(1):
                    picks[bx, part * k + r] = best[i]
        # Kernels of one function run in order on the stream: every part's picks are in. The keys
        # are distinct (their columns are): a taken one is found by equality. A row's picks padded
        # to a power of two lie on whole groups of lanes: the reduction stays in shuffles.
        with T.Kernel(T.ceildiv(M, MERGE_ROWS), threads=MERGE_THREADS) as bx:
            keys = T.alloc_fragment((MERGE_ROWS, merge_width), "int64")
            best = T.alloc_fragment((MERGE_ROWS,), "int64")
            for i, j in T.Parallel(MERGE_ROWS, merge_width):
                row = bx * MERGE_ROWS + i
                keys[i, j] = T.if_then_else(row < M and j < split * k, picks[row, j], T.min_value("int64"))
            for r in T.serial(k):
                T.reduce_max(keys, best, dim=1)
                for i, j in T.Parallel(MERGE_ROWS, merge_width):
                    if keys[i, j] == best[i]:
                        keys[i, j] = T.min_value("int64")
                write_picks(values, indices, best, bx, r, MERGE_ROWS, M, N)

    return main_split


@T.macro
def load_rows(X, ord_, bx, first, M, s):
    """The block's rows (from column `first`) as ordered values; past the last row or column: TAKEN
    (never chosen)."""
    for i, t, e in T.Parallel(s.rows, s.tpr, s.per_thread):
        row, col = bx * s.rows + i, s.column(t, e, first)
        ord_[i, t, e] = T.if_then_else(row < M and col < s.N, ordered(T.Cast("float32", X[row, col])), T.int32(TAKEN))


@T.macro
def thread_max(ord_, top, partial, i, t, first, s):
    """partial[i, t] = the largest key among thread t's entries of row i, in two 32-bit passes over
    the unrolled entries (registers only), cheaper than packing and comparing a 64-bit key for each:
    the largest ordered value, then the lowest column holding it."""
    top[i, t] = ord_[i, t, 0]
    for e in T.unroll(1, s.per_thread):
        top[i, t] = T.max(top[i, t], ord_[i, t, e])
    col = T.alloc_var("int32")
    col = s.column(t, s.per_thread - 1, first)
    for e in T.unroll(s.per_thread - 1):
        if ord_[i, t, s.per_thread - 2 - e] == top[i, t]:
            col = s.column(t, s.per_thread - 2 - e, first)
    partial[i, t] = pack(top[i, t], col, s.N)


@T.macro
def take_largest(ord_, top, partial, best, first, s):
    """best[i] = the largest key left in row i; the thread holding it masks the entry (found by its
    column) and finds its next-largest (every other thread's partial is unchanged)."""
    T.reduce_max(partial, best, dim=1)
    for i, t in T.Parallel(s.rows, s.tpr):
        if partial[i, t] == best[i]:
            for e in T.unroll(s.per_thread):
                if s.column(t, e, first) == index_of(best[i], s.N):
                    ord_[i, t, e] = T.int32(TAKEN)
            thread_max(ord_, top, partial, i, t, first, s)


@T.macro
def write_picks(values, indices, best, bx, r, rows, M, N):
    """Pick r of each of the block's rows: its value and column."""
    for i in T.Parallel(rows):
        if bx * rows + i < M:
            values[bx * rows + i, r] = T.Cast(values.dtype, value_of(best[i]))
            indices[bx * rows + i, r] = index_of(best[i], N)


def check_topk(X, values, indices, k):
    """values equal torch.topk's exactly; indices are checked through the values they point at (torch
    does not promise which of equal values it returns; ours: the lowest index), distinct, and equal
    values come in increasing index order."""
    ref_values, _ = torch.topk(X.float(), k, dim=-1)
    torch.testing.assert_close(values.float(), ref_values, rtol=0, atol=0)
    idx = indices.long()
    torch.testing.assert_close(torch.gather(X, 1, idx), values, rtol=0, atol=0)
    assert (idx.sort(dim=-1).values.diff(dim=-1) > 0).all(), "an index was chosen twice"
    ties = values[:, 1:] == values[:, :-1]
    assert (idx[:, 1:] > idx[:, :-1])[ties].all(), "equal values must come lowest index first"


def main(M=4096, N=4096, k=8, rows=1, threads=256, split=1, dtype="float32", device=None):
    device = device or ("cuda" if torch.cuda.is_available() else "cpu")
    torch_dtype = getattr(torch, dtype)
    with tilelang.use_target(device):  # the kernels compile for where the tensors live
        kernel = topk(M, N, k, rows, threads, split, dtype)
        X = torch.randn(M, N, device=device).to(torch_dtype)
        # Ties, and the edges of the row: equal maxima at both ends and in the middle of row 0.
        X[0, 0] = X[0, N // 2] = X[0, N - 1] = 100.0
        X[1] = -X[1].abs() - 1  # all negative: entries past the row's end must still lose
        values, indices = kernel(X)
        check_topk(X, values, indices, k)
        assert indices[0, :3].tolist() == [0, N // 2, N - 1][:k]
        ms = do_bench(lambda: kernel(X), return_mode="median", device=device)
        name = f"topk, rows split in {split}" if split > 1 else "topk"
        print(f"{name} M={M} N={N} k={k} {dtype}: {ms * 1e3:.1f} us; all checks passed")


if __name__ == "__main__":
    parser = argparse.ArgumentParser()
    parser.add_argument("--m", type=int, default=4096)
    parser.add_argument("--n", type=int, default=4096)
    parser.add_argument("--k", type=int, default=8)
    parser.add_argument("--rows", type=int, default=1, help="rows a block")
    parser.add_argument("--threads", type=int, default=256)
    parser.add_argument("--split", type=int, default=1, help="blocks a row (long rows): a second kernel merges")
    parser.add_argument("--dtype", choices=["float32", "float16"], default="float32")
    parser.add_argument("--device", choices=["cuda", "cpu"], help="default: cuda when torch sees a GPU, else cpu")
    args = parser.parse_args()
    main(args.m, args.n, args.k, args.rows, args.threads, args.split, args.dtype, device=args.device)

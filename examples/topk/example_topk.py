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

`example_moe_routing.py` builds the fused softmax + top-k router on the same pieces.
"""

import argparse

import torch

import tilelang
import tilelang.language as T
from tilelang.profiler import do_bench

TAKEN = -(2**31)  # the ordered value of an entry already taken (or past the row's end): below every float
INT32_MAX = 2**31 - 1


def ordered(x):
    """The float32 x as an int32 whose signed order is x's (NaN above +inf, as torch.topk ranks it)."""
    bits = T.reinterpret(x, "int32")
    return T.if_then_else(x != x, T.int32(INT32_MAX), T.if_then_else(bits < 0, bits ^ T.int32(INT32_MAX), bits))


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


def row_layouts(rows, threads, per_thread):
    """Fragments of `rows` rows, each row on `threads // rows` consecutive threads (a warp or more:
    the row's reduction is a shuffle butterfly, then shared memory across its warps); `ord` has
    per_thread registers a thread, `partial` one."""
    tpr = threads // rows
    entries = T.Fragment(
        (rows, tpr, per_thread), forward_thread_fn=lambda i, t, e: i * tpr + t, forward_index_fn=lambda i, t, e: e
    )
    partials = T.Fragment((rows, tpr), forward_thread_fn=lambda i, t: i * tpr + t, forward_index_fn=lambda i, t: 0)
    return entries, partials


def column(t, e, tpr):
    """Entry e of the row's thread t: a warp's 32 threads read 32 consecutive columns (128 bytes of
    fp32) per load, and a thread's columns increase with e."""
    return e * tpr + t


def check_sizes(N, k, rows, threads):
    if threads % rows or (threads // rows) & (threads // rows - 1):
        raise ValueError(f"rows={rows} must split threads={threads} into power-of-two groups of threads")
    if not 1 <= k <= N:
        raise ValueError(f"k={k} must be in 1..N={N}")
    if N >= 2**31:
        raise ValueError("a column must fit in the key's low 32 bits")


@tilelang.jit(out_idx=[-2, -1])
def topk(M, N, k, rows=1, threads=128, dtype="float32"):
    """values [M, k] (X's dtype) and indices [M, k] (int32) of each row's k largest entries, largest
    first; `rows` rows a block."""
    check_sizes(N, k, rows, threads)
    tpr = threads // rows
    per_thread = -(-N // tpr)  # the last entries of a row's threads may pass its end: TAKEN there
    entries_layout, partials_layout = row_layouts(rows, threads, per_thread)

    @T.prim_func
    def main(X: T.Tensor((M, N), dtype), values: T.Tensor((M, k), dtype), indices: T.Tensor((M, k), "int32")):
        with T.Kernel(T.ceildiv(M, rows), threads=threads) as bx:
            ord_ = T.alloc_fragment((rows, tpr, per_thread), "int32")
            partial = T.alloc_fragment((rows, tpr), "int64")
            top = T.alloc_fragment((rows, tpr), "int32")
            best = T.alloc_fragment((rows,), "int64")
            T.annotate_layout({ord_: entries_layout, partial: partials_layout, top: partials_layout})
            load_rows(X, ord_, bx, M, N, rows, tpr, per_thread)
            for i, t in T.Parallel(rows, tpr):
                thread_max(ord_, top, partial, i, t, N, tpr, per_thread)
            for r in T.serial(k):
                take_largest(ord_, top, partial, best, N, rows, tpr, per_thread)
                for i in T.Parallel(rows):
                    if bx * rows + i < M:
                        values[bx * rows + i, r] = T.Cast(dtype, value_of(best[i]))
                        indices[bx * rows + i, r] = index_of(best[i], N)

    return main


@T.macro
def load_rows(X, ord_, bx, M, N, rows, tpr, per_thread):
    """The block's rows as ordered values; past the last row or column: TAKEN (never chosen)."""
    for i, t, e in T.Parallel(rows, tpr, per_thread):
        row, col = bx * rows + i, column(t, e, tpr)
        ord_[i, t, e] = T.if_then_else(row < M and col < N, ordered(T.Cast("float32", X[row, col])), T.int32(TAKEN))


@T.macro
def thread_max(ord_, top, partial, i, t, N, tpr, per_thread):
    """partial[i, t] = the largest key among thread t's entries of row i, in two 32-bit passes over
    the unrolled entries (registers only), cheaper than packing and comparing a 64-bit key for each:
    the largest ordered value, then the lowest column holding it (the entries' columns increase)."""
    top[i, t] = ord_[i, t, 0]
    for e in T.unroll(1, per_thread):
        top[i, t] = T.max(top[i, t], ord_[i, t, e])
    col = T.alloc_var("int32")
    col = column(t, per_thread - 1, tpr)
    for e in T.unroll(per_thread - 1):
        if ord_[i, t, per_thread - 2 - e] == top[i, t]:
            col = column(t, per_thread - 2 - e, tpr)
    partial[i, t] = pack(top[i, t], col, N)


@T.macro
def take_largest(ord_, top, partial, best, N, rows, tpr, per_thread):
    """best[i] = the largest key left in row i; the thread holding it masks the entry (found by its
    column) and finds its next-largest (every other thread's partial is unchanged)."""
    T.reduce_max(partial, best, dim=1)
    for i, t in T.Parallel(rows, tpr):
        if partial[i, t] == best[i]:
            for e in T.unroll(per_thread):
                if column(t, e, tpr) == index_of(best[i], N):
                    ord_[i, t, e] = T.int32(TAKEN)
            thread_max(ord_, top, partial, i, t, N, tpr, per_thread)


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


def main(M=4096, N=4096, k=8, rows=1, threads=256, dtype="float32", device=None):
    device = device or ("cuda" if torch.cuda.is_available() else "cpu")
    torch_dtype = getattr(torch, dtype)
    with tilelang.use_target(device):  # the kernels compile for where the tensors live
        kernel = topk(M, N, k, rows, threads, dtype=dtype)
        X = torch.randn(M, N, device=device).to(torch_dtype)
        # Ties, and the edges of the row: equal maxima at both ends and in the middle of row 0.
        X[0, 0] = X[0, N // 2] = X[0, N - 1] = 100.0
        X[1] = -X[1].abs() - 1  # all negative: entries past the row's end must still lose
        values, indices = kernel(X)
        check_topk(X, values, indices, k)
        assert indices[0, :3].tolist() == [0, N // 2, N - 1]
        ms = do_bench(lambda: kernel(X), return_mode="median", device=device)
        print(f"topk M={M} N={N} k={k} {dtype}: {ms * 1e3:.1f} us; all checks passed")


if __name__ == "__main__":
    parser = argparse.ArgumentParser()
    parser.add_argument("--m", type=int, default=4096)
    parser.add_argument("--n", type=int, default=4096)
    parser.add_argument("--k", type=int, default=8)
    parser.add_argument("--rows", type=int, default=1, help="rows a block")
    parser.add_argument("--threads", type=int, default=256)
    parser.add_argument("--dtype", choices=["float32", "float16"], default="float32")
    parser.add_argument("--device", choices=["cuda", "cpu"], help="default: cuda when torch sees a GPU, else cpu")
    args = parser.parse_args()
    main(args.m, args.n, args.k, args.rows, args.threads, args.dtype, device=args.device)

"""Atomics against torch on random inputs (GPU): return_prev, max/min of every element type, memory
orders, tile forms at ragged edges, the 2- and 4-wide adds in global and shared memory, atomic
loads and stores, and the bulk add of use_tma=True (sm_90)."""

import pytest
import torch

import tilelang
import tilelang.language as T

pytestmark = pytest.mark.gpu

TORCH = {
    "float16": torch.float16,
    "bfloat16": torch.bfloat16,
    "float32": torch.float32,
    "float64": torch.float64,
    "int32": torch.int32,
    "int64": torch.int64,
}


def _random(shape, dtype):
    if dtype.startswith("int"):
        return torch.randint(-1000, 1000, shape, device="cuda", dtype=TORCH[dtype])
    return torch.randn(shape, device="cuda", dtype=TORCH[dtype]) * 10


@tilelang.jit
def hand_out_slots(blocks, threads):
    @T.prim_func
    def main(Count: T.Tensor((2,), "int32"), Slots: T.Tensor((blocks * threads,), "int32")):
        with T.Kernel(blocks, threads=threads) as bx:
            tx = T.get_thread_binding()
            pos = T.atomic_add(Count[0], 1, return_prev=True)
            Slots[pos] = bx * threads + tx
            T.atomic_add(Count[1], 2, memory_order="acq_rel")

    return main


def test_return_prev_hands_out_every_slot_once():
    count = torch.zeros(2, dtype=torch.int32, device="cuda")
    slots = torch.full((64 * 128,), -1, dtype=torch.int32, device="cuda")
    hand_out_slots(64, 128)(count, slots)
    assert count.tolist() == [64 * 128, 2 * 64 * 128]
    assert torch.equal(slots.sort().values, torch.arange(64 * 128, dtype=torch.int32, device="cuda"))


@tilelang.jit
def extremes(n, dtype, order):
    @T.prim_func
    def main(X: T.Tensor((n,), dtype), Out: T.Tensor((2,), dtype), Prev: T.Tensor((n,), dtype)):
        with T.Kernel(T.ceildiv(n, 128), threads=128) as bx:
            i = bx * 128 + T.get_thread_binding()
            if i < n:
                Prev[i] = T.atomic_max(Out[0], X[i], memory_order=order, return_prev=True)
                T.atomic_min(Out[1], X[i], memory_order=order)

    return main


@pytest.mark.parametrize("dtype", sorted(TORCH))
@pytest.mark.parametrize("order", [None, "release", "seq_cst"])
def test_max_min_of_every_element_type(dtype, order):
    n = 3000
    x = _random((n,), dtype)
    if dtype.startswith("float"):
        x[:100] = -x[:100].abs()  # negative values on the unsigned side of the float trick
    out = torch.stack([x[0], x[0]]).clone()
    prev = torch.empty_like(x)
    extremes(n, dtype, order)(x, out, prev)
    assert out[0] == x.max() and out[1] == x.min()
    assert (prev <= x.max()).all()  # each old value is one the maximum passed through


@tilelang.jit
def tile_atomics(M, N, block):
    @T.prim_func
    def main(A: T.Tensor((M, N), "float32"), Sum: T.Tensor((M, N), "float32"), Max: T.Tensor((M, N), "float32")):
        with T.Kernel(T.ceildiv(N, block), T.ceildiv(M, block), 3, threads=128) as (bx, by, bz):
            f = T.alloc_fragment((block, block), "float32")
            T.copy(A[by * block, bx * block], f)
            for i, j in T.Parallel(block, block):
                f[i, j] = f[i, j] * (bz + 1)
            T.atomic_add(Sum[by * block, bx * block], f, memory_order="relaxed")
            T.atomic_max(Max[by * block, bx * block], f)
            T.atomic_add(Sum[by * block : by * block + block, bx * block : bx * block + block], 1.0)

    return main


def test_tile_forms_at_ragged_edges():
    A = torch.randn(100, 70, device="cuda")
    total = torch.zeros_like(A)
    best = torch.full_like(A, -1e30)
    tile_atomics(100, 70, 32)(A, total, best)
    torch.testing.assert_close(total, 6 * A + 3, rtol=1e-5, atol=1e-5)  # (1 + 2 + 3) A, plus 1 per copy
    torch.testing.assert_close(best, torch.maximum(torch.maximum(A, 2 * A), 3 * A))


@tilelang.jit
def vector_adds(n, dtype, lanes, via_shared):
    @T.prim_func
    def main(X: T.Tensor((n,), dtype), Out: T.Tensor((n,), dtype), Prev: T.Tensor((n,), dtype)):
        with T.Kernel(4, threads=128) as bx:
            tx = T.get_thread_binding()
            S = T.alloc_shared((n,), dtype)
            Acc = T.alloc_shared((n,), dtype)
            T.copy(X, S)
            T.fill(Acc, 0)
            T.sync_threads()
            for r in T.serial(n // (128 * lanes)):
                base = (r * 128 + tx) * lanes
                if via_shared:
                    if lanes == 2:
                        T.atomic_addx2(Acc[base], S[base])
                    else:
                        T.atomic_addx4(Acc[base], S[base])
                else:
                    if lanes == 2:
                        pair = T.alloc_local((2,), dtype)
                        pair[0:2] = T.atomic_addx2(Out[base], S[base], return_prev=True)
                        if bx == 0:
                            Prev[base] = pair[0]
                            Prev[base + 1] = pair[1]
                    else:
                        T.atomic_addx4(Out[base], S[base])
            T.sync_threads()
            if via_shared:
                for i in T.serial(n // 128):
                    T.atomic_add(Out[i * 128 + tx], Acc[i * 128 + tx])

    return main


@pytest.mark.parametrize("dtype", ["float32", "float16", "bfloat16"])
@pytest.mark.parametrize("lanes", [2, 4])
@pytest.mark.parametrize("via_shared", [False, True])
def test_vector_adds(dtype, lanes, via_shared):
    n = 1024
    x = torch.randn(n, device="cuda", dtype=TORCH[dtype])
    out = torch.zeros(n, device="cuda", dtype=TORCH[dtype])
    prev = torch.zeros(n, device="cuda", dtype=TORCH[dtype])
    vector_adds(n, dtype, lanes, via_shared)(x, out, prev)
    tol = 1e-5 if dtype == "float32" else 3e-2
    torch.testing.assert_close(out.float(), 4 * x.float(), rtol=tol, atol=tol)
    if lanes == 2 and not via_shared:  # block 0 saw what 0 to 3 blocks had added before it
        seen = [torch.isclose(prev.float(), k * x.float(), rtol=tol, atol=tol) for k in range(4)]
        assert torch.stack(seen).any(0).all()


@tilelang.jit
def flag_handoff(n):
    @T.prim_func
    def main(Data: T.Tensor((n,), "float32"), Flag: T.Tensor((1,), "int32"), Out: T.Tensor((n,), "float32")):
        with T.Kernel(2, threads=128) as bx:
            tx = T.get_thread_binding()
            if bx == 0:
                for i in T.serial(n // 128):
                    Data[i * 128 + tx] = T.cast(i * 128 + tx, "float32")
                T.sync_threads()
                if tx == 0:
                    T.atomic_store(Flag[0], 1, memory_order="release")
            else:
                while T.atomic_load(Flag[0], memory_order="acquire") == 0:
                    pass
                for i in T.serial(n // 128):
                    Out[i * 128 + tx] = Data[i * 128 + tx]

    return main


def test_release_store_and_acquire_load_hand_data_over():
    n = 4096
    data = torch.zeros(n, device="cuda")
    flag = torch.zeros(1, dtype=torch.int32, device="cuda")
    out = torch.zeros(n, device="cuda")
    flag_handoff(n)(data, flag, out)
    assert torch.equal(out, torch.arange(n, device="cuda", dtype=torch.float32))


@tilelang.jit
def bulk_add(rows, cols, dtype):
    @T.prim_func
    def main(A: T.Tensor((256, cols), dtype), C: T.Tensor((2, rows, 4, cols), dtype)):
        with T.Kernel(T.ceildiv(rows, 64), 2, threads=128) as (bx, by):
            S = T.alloc_shared((64, cols), dtype)
            F = T.alloc_fragment((64, cols), "float32")
            for k in T.serial(4):
                T.copy(A[bx * 64, 0], F)
                for i, j in T.Parallel(64, cols):
                    F[i, j] = F[i, j] * (k + 1)
                T.copy(F, S)
                T.atomic_add(C[by, bx * 64 : bx * 64 + 64, k, :], S, use_tma=True)
                T.atomic_add(C[by, bx * 64 : bx * 64 + 64, 0, :], S, use_tma=True)

    return main


@pytest.mark.skipif(
    not torch.cuda.is_available() or torch.cuda.get_device_capability()[0] < 9, reason="bulk adds need sm_90"
)
@pytest.mark.parametrize("dtype", ["float32", "float16", "bfloat16"])
def test_use_tma_bulk_add(dtype):
    rows, cols = 130, 64
    a = torch.randn(256, cols, device="cuda", dtype=TORCH[dtype])
    c = torch.randn(2, rows, 4, cols, device="cuda", dtype=TORCH[dtype])
    ref = c.float().clone()
    tiles = a[:rows].float()
    for k in range(4):
        ref[:, :, k, :] += (k + 1) * tiles
        ref[:, :, 0, :] += (k + 1) * tiles
    bulk_add(rows, cols, dtype)(a, c)
    atol = {"float32": 1e-4, "float16": 0.25, "bfloat16": 1.0}[dtype]  # eight rounded adds of values up to ~40
    torch.testing.assert_close(c.float(), ref, rtol=0.02, atol=atol)


@tilelang.jit
def set_bits(n):
    @T.prim_func
    def main(Bits: T.Tensor((n,), "int32"), Mask: T.Tensor((n // 32,), "int32")):
        with T.Kernel(T.ceildiv(n, 128), threads=128) as bx:
            i = bx * 128 + T.get_thread_binding()
            if Bits[i] != 0:
                T.atomic_or(Mask[i // 32], 1 << (i % 32), memory_order="relaxed")

    return main


def test_atomic_or_sets_each_threads_bit():
    n = 4096
    bits = torch.randint(0, 2, (n,), dtype=torch.int32, device="cuda")
    mask = torch.zeros(n // 32, dtype=torch.int32, device="cuda")
    set_bits(n)(bits, mask)
    weights = torch.tensor([1 << k for k in range(32)], dtype=torch.int64, device="cuda")
    ref = ((bits.view(-1, 32).long() * weights).sum(1) & 0xFFFFFFFF).to(torch.int64)
    assert torch.equal(mask.long() & 0xFFFFFFFF, ref)


@pytest.mark.parametrize("out_dtype", ["float32", "float16"])
@pytest.mark.parametrize("M", [256, 200])  # 200: the last row tile is partial (each pair guarded)
def test_split_k_adds_in_pairs(out_dtype, M):
    import sys

    sys.path.insert(0, __file__.rsplit("/", 1)[0])
    from test_atomic import split_k_gemm

    a = torch.randn(M, 256, device="cuda", dtype=torch.float16)
    b = torch.randn(256, 128, device="cuda", dtype=torch.float16)
    c = torch.zeros(M, 128, device="cuda", dtype=TORCH[out_dtype])
    kernel = tilelang.compile(split_k_gemm(M=M, out_dtype=out_dtype, splits=4))
    kernel(a, b, c)
    want = (a.float() @ b.float()).to(TORCH[out_dtype])
    tol = 1e-2 if out_dtype == "float32" else 5e-2
    torch.testing.assert_close(c, want, rtol=tol, atol=tol)

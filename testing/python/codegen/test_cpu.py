"""The CPU target: tile programs compiled by LLVM and run on CPU torch tensors, checked against torch
(no GPU needed: these run in CI). Element-wise work, copies with partial tiles, GEMM in every
transpose and dtype, reductions, cumsum, atomics across blocks, dynamic shapes, thread branches,
the disk cache, argument checks and `tilelang.use_target`."""

import os
import sys

import pytest
import torch

import tilelang
import tilelang.language as T
from tilelang.utils.target import determine_target, is_cpu

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "..", "fuzz"))
import fuzz_kernels  # noqa: E402  (the fuzzer's kernel families: the same GEMM, run here on the CPU)


@pytest.fixture(autouse=True)
def _seed():
    torch.manual_seed(0)


@pytest.mark.parametrize("trans_a, trans_b", [(False, False), (False, True), (True, False), (True, True)])
@pytest.mark.parametrize("dtype, a_fragment", [("float32", False), ("float16", True), ("bfloat16", False)])
def test_gemm_every_transpose_and_dtype_with_ragged_shapes(trans_a, trans_b, dtype, a_fragment):
    M, N, K = 100, 70, 90  # not multiples of the 32 x 32 x 16 tiles: partial tiles at every edge
    func = fuzz_kernels.gemm(M, N, K, 32, 32, 16, 2, 128, trans_a, trans_b, dtype, "float32", a_fragment)
    kernel = tilelang.compile(func, out_idx=[-1], target="cpu")
    tdt = getattr(torch, dtype)
    a = torch.randn((K, M) if trans_a else (M, K)).to(tdt)
    b = torch.randn((N, K) if trans_b else (K, N)).to(tdt)
    ref = fuzz_kernels.gemm_reference(a, b, trans_a, trans_b)
    torch.testing.assert_close(kernel(a, b), ref, rtol=1e-4, atol=1e-3)  # fp32 accumulation, exact inputs


def test_int8_gemm_accumulates_in_int32():
    M = N = K = 64

    @T.prim_func
    def main(A: T.Tensor((M, K), "int8"), B: T.Tensor((N, K), "int8"), C: T.Tensor((M, N), "int32")):
        with T.Kernel(2, 2, threads=128) as (bx, by):
            A_s = T.alloc_shared((32, K), "int8")
            B_s = T.alloc_shared((32, K), "int8")
            C_l = T.alloc_fragment((32, 32), "int32")
            T.copy(A[by * 32, 0], A_s)
            T.copy(B[bx * 32, 0], B_s)
            T.gemm(A_s, B_s, C_l, transpose_B=True, clear_accum=True)
            T.copy(C_l, C[by * 32, bx * 32])

    a = torch.randint(-100, 100, (M, K), dtype=torch.int8)
    b = torch.randint(-100, 100, (N, K), dtype=torch.int8)
    c = tilelang.compile(main, out_idx=[-1], target="cpu")(a, b)
    torch.testing.assert_close(c, a.int() @ b.int().T)


@pytest.mark.parametrize("kind", ["sum", "max", "min", "abssum", "absmax"])
def test_reductions_along_rows_and_columns(kind):
    M, N = 64, 48

    @T.prim_func
    def main(A: T.Tensor((M, N), "float32"), R: T.Tensor((M,), "float32"), S: T.Tensor((N,), "float32")):
        with T.Kernel(1, threads=128):
            A_f = T.alloc_fragment((M, N), "float32")
            rows = T.alloc_fragment((M,), "float32")
            cols = T.alloc_shared((N,), "float32")
            A_s = T.alloc_shared((M, N), "float32")
            T.copy(A, A_f)
            T.copy(A, A_s)
            T.reduce(A_f, rows, kind, dim=1)
            T.reduce(A_s, cols, kind, dim=0)
            T.copy(rows, R)
            T.copy(cols, S)

    a = torch.randn(M, N)
    r, s = tilelang.compile(main, out_idx=[1, 2], target="cpu")(a)
    ops = {"sum": torch.sum, "max": lambda x, dim: x.amax(dim), "min": lambda x, dim: x.amin(dim)}
    ops["abssum"] = lambda x, dim: x.abs().sum(dim)
    ops["absmax"] = lambda x, dim: x.abs().amax(dim)
    torch.testing.assert_close(r, ops[kind](a, dim=1), rtol=1e-5, atol=1e-5)
    torch.testing.assert_close(s, ops[kind](a, dim=0), rtol=1e-5, atol=1e-5)


def test_cumsum_forward_and_reverse():
    N = 37

    @T.prim_func
    def main(A: T.Tensor((4, N), "float32"), F: T.Tensor((4, N), "float32"), R: T.Tensor((4, N), "float32")):
        with T.Kernel(1, threads=64):
            S = T.alloc_shared((4, N), "float32")
            D = T.alloc_shared((4, N), "float32")
            T.copy(A, S)
            T.cumsum(S, D, dim=1)
            T.copy(D, F)
            T.cumsum(S, D, dim=1, reverse=True)
            T.copy(D, R)

    a = torch.randn(4, N)
    f, r = tilelang.compile(main, out_idx=[1, 2], target="cpu")(a)
    torch.testing.assert_close(f, a.cumsum(1), rtol=1e-5, atol=1e-5)
    torch.testing.assert_close(r, a.flip(1).cumsum(1).flip(1), rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("dtype", ["float32", "float16", "bfloat16", "int32", "float64"])
def test_atomic_add_from_every_block_into_one_tensor(dtype):
    blocks, N = 64, 32

    @T.prim_func
    def main(A: T.Tensor((blocks, N), dtype), S: T.Tensor((N,), dtype)):
        with T.Kernel(blocks, threads=32) as b:
            tile = T.alloc_fragment((N,), dtype)
            T.copy(A[b, 0], tile)
            T.atomic_add(S[0:N], tile)  # every block adds its row: blocks run on several cores at once

    tdt = getattr(torch, dtype)
    a = torch.randint(-3, 4, (blocks, N)).to(tdt)  # small integers: every sum exact in every dtype
    s = torch.zeros(N, dtype=tdt)
    tilelang.compile(main, target="cpu")(a, s)
    torch.testing.assert_close(s, a.sum(0).to(tdt))


def test_element_atomics_return_the_previous_value_and_take_max_min():
    @T.prim_func
    def main(A: T.Tensor((64,), "float32"), Mx: T.Tensor((1,), "float32"), Mn: T.Tensor((1,), "float32"),
             Cnt: T.Tensor((1,), "int32"), Slot: T.Tensor((64,), "int32")):  # fmt: skip
        with T.Kernel(64, threads=32) as b:
            T.atomic_max(Mx[0], A[b])
            T.atomic_min(Mn[0], A[b])
            Slot[b] = T.atomic_add(Cnt[0], 1, return_prev=True)

    a = torch.randn(64)
    mx, mn = torch.full((1,), -1e30), torch.full((1,), 1e30)
    cnt, slot = torch.zeros(1, dtype=torch.int32), torch.empty(64, dtype=torch.int32)
    tilelang.compile(main, target="cpu")(a, mx, mn, cnt, slot)
    assert mx.item() == a.max().item() and mn.item() == a.min().item()
    assert cnt.item() == 64 and sorted(slot.tolist()) == list(range(64))  # each block got its own slot


def test_dynamic_shapes_and_partial_tiles():
    M = T.symbolic("M")

    @T.prim_func
    def main(A: T.Tensor((M, 48), "float16"), B: T.Tensor((M, 48), "float16")):
        with T.Kernel(T.ceildiv(M, 32), threads=128) as bx:
            tile = T.alloc_fragment((32, 48), "float32")
            T.copy(A[bx * 32, 0], tile)
            for i, j in T.Parallel(32, 48):
                tile[i, j] = T.exp(tile[i, j]) * 0.5
            T.copy(tile, B[bx * 32, 0])

    kernel = tilelang.compile(main, out_idx=[-1], target="cpu")
    for m in (1, 31, 100):
        a = torch.randn(m, 48).half()
        torch.testing.assert_close(kernel(a), (a.float().exp() * 0.5).half(), rtol=1e-2, atol=1e-2)


def test_whole_warp_branches_run_in_program_order():
    @T.prim_func
    def main(A: T.Tensor((4, 64), "float32"), B: T.Tensor((4, 64), "float32")):
        with T.Kernel(4, threads=256) as b:
            S = T.alloc_shared((64,), "float32")
            tx = T.get_thread_binding()
            T.copy(A[b, 0], S)
            if tx < 128:  # the first warpgroup doubles the tile ...
                for i in T.Parallel(64):
                    S[i] = S[i] * 2.0
            T.sync_threads()
            if tx >= 128:  # ... and the second adds one and stores it
                for i in T.Parallel(64):
                    B[b, i] = S[i] + 1.0

    a = torch.randn(4, 64)
    torch.testing.assert_close(tilelang.compile(main, out_idx=[-1], target="cpu")(a), a * 2 + 1)


def test_reshape_view_of_a_tile():
    @T.prim_func
    def main(A: T.Tensor((8, 16), "float32"), B: T.Tensor((128,), "float32")):
        with T.Kernel(1, threads=128):
            S = T.alloc_shared((8, 16), "float32")
            flat = T.reshape(S, (128,))
            T.copy(A, S)
            for i in T.Parallel(128):
                B[i] = flat[i] + 1.0

    a = torch.randn(8, 16)
    torch.testing.assert_close(tilelang.compile(main, out_idx=[-1], target="cpu")(a), a.flatten() + 1)


def _add_one(N):
    @T.prim_func
    def main(A: T.Tensor((N,), "float32"), B: T.Tensor((N,), "float32")):
        with T.Kernel(T.ceildiv(N, 64), threads=64) as bx:
            for i in T.Parallel(64):
                B[bx * 64 + i] = A[bx * 64 + i] + 1.0

    return main


def test_argument_errors_name_the_cpu():
    kernel = tilelang.compile(_add_one(100), out_idx=[-1], target="cpu")
    with pytest.raises(ValueError, match="dtype float16 instead of float32"):
        kernel(torch.randn(100).half())
    with pytest.raises(ValueError, match="shape"):
        kernel(torch.randn(99))


@tilelang.jit(out_idx=[-1])
def scaled(N, factor):
    @T.prim_func
    def main(A: T.Tensor((N,), "float32"), B: T.Tensor((N,), "float32")):
        with T.Kernel(T.ceildiv(N, 128), threads=128) as bx:
            for i in T.Parallel(128):
                B[bx * 128 + i] = A[bx * 128 + i] * factor

    return main


def test_use_target_and_the_disk_cache(tmp_path, monkeypatch):
    monkeypatch.setenv("TILELANG_CACHE_DIR", str(tmp_path))
    with tilelang.use_target("cpu"):
        assert is_cpu(determine_target("auto"))
        kernel = scaled(300, 3.0)
        a = torch.randn(300)
        torch.testing.assert_close(kernel(a), a * 3)
        assert "T.parallel" in kernel.get_kernel_source()  # the blocks' loop, as LLVM gets it
    # A new factory object (a new process, as far as caches go) loads the library from disk.
    fresh = tilelang.jit(out_idx=[-1])(scaled.factory)
    with tilelang.use_target("cpu"):
        again = fresh(300, 3.0)
        assert again.compile_times == {}  # nothing traced or compiled: the disk cache's entry
        torch.testing.assert_close(again(a), a * 3)


def test_auto_picks_the_cpu_without_a_gpu(monkeypatch, caplog):
    from tilelang.utils import target as targets

    monkeypatch.setattr(targets, "detect_arch", lambda: None)
    monkeypatch.setattr(targets, "_said_cpu", False)
    monkeypatch.delenv("TILELANG_DEFAULT_TARGET", raising=False)
    with caplog.at_level("INFO", logger="tilelang"):
        assert is_cpu(determine_target("auto"))
    assert "compiled for the CPU" in caplog.text


def test_profiler_and_export_on_the_cpu(tmp_path):
    kernel = tilelang.compile(_add_one(1000), out_idx=[-1], target="cpu")
    profiler = kernel.get_profiler(tilelang.TensorSupplyType.Randn)
    profiler.assert_allclose(lambda a: a + 1, rtol=1e-6, atol=1e-6)
    assert profiler.do_bench(warmup=1, rep=5) > 0  # the wall clock, on the CPU
    path = str(tmp_path / "add_one.so")
    kernel.export_library(path)
    loaded = tilelang.load_library(path)
    a = torch.randn(1000)
    torch.testing.assert_close(loaded(a), a + 1)


def test_autotune_on_the_cpu(tmp_path, monkeypatch):
    monkeypatch.setenv("TILELANG_CACHE_DIR", str(tmp_path))

    @tilelang.autotune(configs=[{"block": 64}, {"block": 256}], warmup=1, rep=3)
    @tilelang.jit(out_idx=[-1], target="cpu")
    def add(N, block=64):
        @T.prim_func
        def main(A: T.Tensor((N,), "float32"), B: T.Tensor((N,), "float32")):
            with T.Kernel(T.ceildiv(N, block), threads=128) as bx:
                for i in T.Parallel(block):
                    B[bx * block + i] = A[bx * block + i] * 2.0

        return main

    kernel = add(N=4096)
    assert kernel.config["block"] in (64, 256) and kernel.latency > 0
    a = torch.randn(4096)
    torch.testing.assert_close(kernel(a), a * 2)


@tilelang.jit
def eager_double(A):
    N = T.const("N")
    A: T.Tensor((N,), "float32")
    B = T.empty((N,), "float32")
    with T.Kernel(T.ceildiv(N, 64), threads=64) as bx:
        for i in T.Parallel(64):
            B[bx * 64 + i] = A[bx * 64 + i] * 2.0
    return B


def test_an_eager_kernel_runs_on_cpu_tensors():
    a = torch.randn(300)
    with tilelang.use_target("cpu"):
        torch.testing.assert_close(eager_double(a), a * 2)

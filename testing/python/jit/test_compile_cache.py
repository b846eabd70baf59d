"""`tilelang.compile` called again on the same function (a module compiling on every forward): the kernel
comes from the in-memory cache, keyed by the function's structure and every option that changes code."""

import time

import pytest
import tvm_ffi

import tilelang
import tilelang.language as T
from tilelang import cache
from tilelang.jit import clear_memory_cache


def gemm(M, N, K, block=64, dtype="float16"):
    @T.prim_func
    def main(A: T.Tensor((M, K), dtype), B: T.Tensor((K, N), dtype), C: T.Tensor((M, N), dtype)):
        with T.Kernel(T.ceildiv(N, block), T.ceildiv(M, block), threads=128) as (bx, by):
            A_shared = T.alloc_shared((block, 32), dtype)
            B_shared = T.alloc_shared((32, block), dtype)
            C_local = T.alloc_fragment((block, block), "float32")
            T.clear(C_local)
            for k in T.Pipelined(T.ceildiv(K, 32), num_stages=2):
                T.copy(A[by * block, k * 32], A_shared)
                T.copy(B[k * 32, bx * block], B_shared)
                T.gemm(A_shared, B_shared, C_local)
            T.copy(C_local, C[by * block, bx * block])

    return main


FUNC = gemm(512, 512, 256)


def _timed(fn, repeat=7):
    best = float("inf")
    for _ in range(repeat):
        start = time.perf_counter()
        out = fn()
        best = min(best, time.perf_counter() - start)
    return out, best


def test_repeated_compile_is_a_cache_hit_in_milliseconds():
    first = tilelang.compile(FUNC, out_idx=[-1], target="sm_90a")
    again, seconds = _timed(lambda: tilelang.compile(FUNC, out_idx=[-1], target="sm_90a"))
    assert again is first
    assert seconds < 2e-3, f"a repeated compile took {seconds * 1e3:.2f} ms"


def test_a_retraced_equal_function_hits_too():
    first = tilelang.compile(gemm(256, 256, 256), out_idx=[-1], target="sm_90a")
    assert tilelang.compile(gemm(256, 256, 256), out_idx=[-1], target="sm_90a") is first


def test_a_different_kernel_or_option_compiles_anew():
    base = tilelang.compile(FUNC, out_idx=[-1], target="sm_80")
    assert tilelang.compile(gemm(512, 512, 256, block=128), out_idx=[-1], target="sm_80") is not base
    assert tilelang.compile(gemm(512, 512, 256, dtype="bfloat16"), out_idx=[-1], target="sm_80") is not base
    assert tilelang.compile(FUNC, out_idx=None, target="sm_80") is not base
    assert tilelang.compile(FUNC, out_idx=[-1], target="sm_89") is not base
    assert tilelang.compile(FUNC, out_idx=[-1], target="sm_80", pass_configs={"tl.enable_fast_math": True}) is not base
    assert tilelang.compile(FUNC, out_idx=[-1], target="sm_80", compile_flags="-DNDEBUG") is not base
    assert tilelang.compile(FUNC, out_idx=[-1], target="sm_80") is base


def test_equal_hashes_are_checked_for_equal_functions(monkeypatch):
    monkeypatch.setattr(tvm_ffi, "structural_hash", lambda func: 7)  # every function collides
    clear_memory_cache()
    one = tilelang.compile(gemm(128, 128, 128), target="sm_80")
    other = tilelang.compile(gemm(128, 256, 128), target="sm_80")
    assert other is not one and [p.shape for p in other.params][1] == (128, 256)
    assert tilelang.compile(gemm(128, 256, 128), target="sm_80") is other


def test_no_reuse_while_the_cache_is_disabled():
    first = tilelang.compile(FUNC, target="sm_80")
    cache.disable()
    try:
        assert tilelang.compile(FUNC, target="sm_80") is not first
    finally:
        cache.enable()
    assert tilelang.compile(FUNC, target="sm_80") is first


class Model:
    """A module that compiles its kernel on every forward (as user code does)."""

    def __init__(self, M, N, K):
        self.shape = (M, N, K)

    def forward_kernel(self):
        return tilelang.compile(gemm(*self.shape), out_idx=[-1], target="sm_90a")


@pytest.mark.parametrize("shape", [(1024, 1024, 512)])
def test_compile_on_every_forward(shape):
    model = Model(*shape)
    first = model.forward_kernel()
    kernel, seconds = _timed(model.forward_kernel, repeat=5)
    assert kernel is first
    # Tracing the factory again is most of what is left (TVM's parser); the compile is a lookup.
    func = gemm(*shape)
    _, compile_seconds = _timed(lambda: tilelang.compile(func, out_idx=[-1], target="sm_90a"))
    assert compile_seconds < 2e-3, f"compile {compile_seconds * 1e3:.2f} ms (forward {seconds * 1e3:.1f} ms)"

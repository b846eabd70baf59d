"""Atomics (tilelang/op/atomic.py, tl_templates/cuda/atomic.h) on the CPU: the calls each form
builds, the CUDA generated for sm_80 and sm_90a (compiled with nvcc), the bulk add of
use_tma=True, and the errors, at the user's line."""

import re

import pytest
from tvm import tirx

import tilelang
import tilelang.language as T
from tilelang import intrinsics
from tilelang.codegen import cuda
from tilelang.errors import UserError
from tilelang.op import atomic, base
from tilelang.utils.ir import collect


def _device_calls(func) -> list:
    """(name, template) of the atomics' device calls: intrinsics, and the plain add's extern call."""
    out = []
    for call in collect(func.body, tirx.Call):
        found = intrinsics.lookup(call)
        if found is not None:
            out.append((found.name, found.template(call)))
        elif call.op.name == "tirx.call_extern":
            out.append((str(call.args[0].value), {}))
    return out


def _raises_at(message: str, line: str):
    """A UserError whose message matches `message` and that shows `line` of this file."""
    return pytest.raises(UserError, match=rf"(?s){message}.*--> [^\n]*test_atomic\.py:\d+.*\|[^\n]*{re.escape(line)}")


def _many_forms():
    @T.prim_func
    def main(
        A: T.Tensor((256, 64), "float32"),
        C: T.Tensor((64,), "float32"),
        H: T.Tensor((64,), "float16"),
        I: T.Tensor((4,), "int32"),
        O: T.Tensor((256,), "int32"),
    ):
        with T.Kernel(4, threads=128) as bx:
            S = T.alloc_shared((64, 64), "float32")
            F = T.alloc_fragment((64, 64), "float32")
            T.copy(A[bx * 64, 0], S)
            T.copy(S, F)
            for i, j in T.Parallel(64, 64):
                T.atomic_add(C[j], F[i, j], memory_order="release")
                T.atomic_max(H[j], F[i, j])
            tx = T.get_thread_binding()
            O[bx * 64 + tx % 64] = T.atomic_add(I[0], 1, return_prev=True)
            T.atomic_min(I[1], tx, memory_order="acq_rel")
            T.atomic_max(C[0:64], S[3, 0:64])
            T.atomic_addx4(C[tx % 16 * 4], S[1, tx % 16 * 4])
            for i, j in T.Parallel(64, 32):
                T.atomic_addx2(H[j * 2], S[i, j * 2])
            T.atomic_store(I[2], T.atomic_load(I[3], memory_order="acquire") + 1, memory_order="release")
            T.atomic_add(I[0:4], 2)
            T.atomic_or(I[3], 1 << (tx % 8), memory_order="release")

    return main


def test_element_calls_name_the_op_and_order():
    calls = _device_calls(_many_forms())
    assert ("atomic_add", {"order": 3}) in calls  # release
    assert ("atomic_add_ret", {"order": 0}) in calls and ("atomic_min", {"order": 4}) in calls
    assert ("atomic_max", {"order": 0}) in calls
    assert ("atomic_addx4", {"shared": 0}) in calls and ("atomic_addx2", {"shared": 0}) in calls
    assert ("atomic_load", {"order": 2}) in calls and ("atomic_store", {"order": 3}) in calls
    assert ("atomic_or", {"order": 3}) in calls
    ops = [type(op).__name__ for op in map(base.parse, collect(_many_forms().body, tirx.Evaluate)) if op]
    assert ops.count("AtomicMax") == 1 and ops.count("AtomicAdd") == 1  # the two tile forms


def test_element_atomics_are_recognized_with_their_target():
    x = tirx.decl_buffer((8,), "float32", "X")
    load = tirx.BufferLoad(x, [tirx.const(1, "int32")])
    plain = atomic.element_atomic_add_call(load, 1.0)
    assert str(plain.args[0].value) == atomic.ELEMENT  # the form legalize_safe_memory_access guards
    for call in (plain, atomic.element_call("max", load, 1.0, 2, True), atomic.element_call("min", load, 2.0, 5)):
        assert atomic.is_element_atomic(call)
        target, value = atomic.element_target(call)
        assert target.same_as(load) and str(value.ty.dtype) == "float32"
    vector = atomic.atomic_addx2(tirx.BufferLoad(tirx.decl_buffer((8,), "float16", "H"), [0]), load.source)
    assert not atomic.is_element_atomic(vector)


@pytest.mark.parametrize("target", ["sm_80", "sm_90a"])
def test_generated_cuda_compiles(target):
    kernel = tilelang.compile(_many_forms(), target=target)
    src = kernel.get_kernel_source()
    assert '#include "tl_templates/cuda/atomic.h"' in src
    assert "= tl::atomic_add_ret<0>((&(I_ptr[0])), 1);" in src and "tl::atomic_add<3>((&(C_ptr[" in src
    assert "tl::atomic_addx4<false>((&(C_ptr[" in src and "*(float4*)(S_ptr" in src  # one 16-byte load
    assert "tl::atomic_store<3>((&(I_ptr[2])), (tl::atomic_load<2>((&(I_ptr[3]))) + 1));" in src
    cuda.compile_object(src, kernel.target)


def test_vector_old_values_go_through_a_local_array():
    @T.prim_func
    def main(X: T.Tensor((64,), "float32"), P: T.Tensor((64,), "float32")):
        with T.Kernel(1, threads=32):
            tx = T.get_thread_binding()
            old = T.alloc_local((4,), "float32")
            S = T.alloc_shared((64,), "float32")
            T.copy(X, S)
            old[0:4] = T.atomic_addx4(X[tx % 16 * 4], S[tx % 16 * 4], return_prev=True)
            P[tx] = old[1]

    kernel = tilelang.compile(main, target="sm_90a")
    src = kernel.get_kernel_source()
    # One call (a float4-typed call would be printed once per lane, adding four times).
    assert src.count("tl::atomic_addx4_ret<false>(") == 1 and "(&(atomic_prev_ptr[0])));" in src
    cuda.compile_object(src, kernel.target)


_INSTANTIATIONS = r"""
#include "tl_templates/cuda/common.h"
#include "tl_templates/cuda/atomic.h"
struct half4 { half x, y, z, w; };
struct nv_bfloat164 { nv_bfloat16 x, y, z, w; };
extern "C" __global__ void every_form(float* f, double* d, half* h, nv_bfloat16* b, int* i, unsigned* u, int64_t* l,
                                      uint64_t* ul, float* out) {
  __shared__ __align__(16) float s[64];
  tl::atomic_add(f, 1.0f); tl::atomic_add<2>(d, 1.0); tl::atomic_add<5>(h, 1.0f); tl::atomic_add<3>(b, 1.0f);
  tl::atomic_add(i, 1); tl::atomic_add(u, 1); tl::atomic_add<4>(l, 1); tl::atomic_add(ul, 1);
  out[0] = tl::atomic_add_ret(f, 2.0f) + (float)tl::atomic_add_ret<2>(h, 2.0f) + (float)tl::atomic_add_ret(l, 3);
  tl::atomic_max(f, -1.0f); tl::atomic_min<4>(f, 2.0f); tl::atomic_max(d, 3.0); tl::atomic_min(d, -3.0);
  tl::atomic_max(h, 1.0f); tl::atomic_min(b, 1.0f); tl::atomic_max(i, 4); tl::atomic_min(u, 4u);
  tl::atomic_max(l, 4); tl::atomic_min(ul, 4);
  out[1] = tl::atomic_max_ret(f, 1.0f) + (float)tl::atomic_min_ret<5>(b, 2.0f) + tl::atomic_max_ret(i, 3);
  out[2] = tl::atomic_load(f) + tl::atomic_load<2>(i) + (float)tl::atomic_load<0>(h) + tl::atomic_load<1>(d);
  tl::atomic_store(f, 1.0f); tl::atomic_store<3>(h, 2.0f); tl::atomic_store<0>(l, 3);
  tl::atomic_or(i, 4); tl::atomic_or<5>(u, 4u); tl::atomic_or(l, 4); tl::atomic_or<2>(ul, 4);
  tl::atomic_addx2(h, *(half2*)(h + 2)); tl::atomic_addx2(b, *(nv_bfloat162*)(b + 2));
  tl::atomic_addx2(f, *(float2*)(s + 2)); tl::atomic_addx2<true>(s, *(float2*)(f + 2));
  tl::atomic_addx4<true>(s, 1.f, 2.f, 3.f, 4.f); tl::atomic_addx4<true>((half*)s, h[0], h[1], h[2], h[3]);
  float2 r2; tl::atomic_addx2_ret(f, *(float2*)(s), (float*)&r2);
  half2 h2; tl::atomic_addx2_ret<true>((half*)s, h[0], h[1], (half*)&h2);
  tl::atomic_addx4(f, *(float4*)(s)); tl::atomic_addx4(h, *(half4*)(h)); tl::atomic_addx4(b, *(nv_bfloat164*)(b));
  tl::atomic_addx4(f, 1.f, 2.f, 3.f, 4.f); tl::atomic_addx4(h, h[0], h[1], h[2], h[3]); tl::atomic_addx2(b, b[0], b[1]);
  float4 r4;
  tl::atomic_addx4_ret(f, *(float4*)(s), (float*)&r4);
  tl::atomic_addx4_ret<true>(s, 1.f, 2.f, 3.f, 4.f, (float*)&r4);
  out[3] = r2.x + r4.y + (float)h2.x;
#if __CUDA_ARCH__ >= 900
  tl::atomic_bulk_fence();
  tl::atomic_bulk_add(f, s, 256); tl::atomic_bulk_add(h, (half*)s, 256); tl::atomic_bulk_add(b, (nv_bfloat16*)s, 256);
  tl::atomic_bulk_add(d, (double*)s, 256); tl::atomic_bulk_add(i, (int*)s, 256);
  tl::atomic_bulk_add(ul, (uint64_t*)s, 256);
  tl::atomic_bulk_wait_read();
#endif
}
"""


@pytest.mark.parametrize("arch", ["sm_80", "sm_89", "sm_90a"])
def test_every_template_instantiates(arch):
    """Each element type and order of every template, including the forms no kernel above reaches."""
    from tilelang.utils.target import determine_target

    cuda.compile_object(_INSTANTIATIONS, determine_target(arch))


# ---- tile forms --------------------------------------------------------------------------------------


def _tile_max(M=100, N=70):
    @T.prim_func
    def main(A: T.Tensor((M, N), "float32"), Out: T.Tensor((M, N), "float32")):
        with T.Kernel(T.ceildiv(N, 32), T.ceildiv(M, 32), threads=128) as (bx, by):
            f = T.alloc_fragment((32, 32), "float32")
            T.copy(A[by * 32, bx * 32], f)
            T.atomic_max(Out[by * 32, bx * 32], f, memory_order="relaxed")
            T.atomic_min(Out[by * 32 : by * 32 + 32, bx * 32 : bx * 32 + 32], 0.5)

    return main


def test_tile_max_min_skip_elements_past_the_edge():
    kernel = tilelang.compile(_tile_max(), target="sm_80")
    src = kernel.get_kernel_source()
    lines = src.splitlines()
    for name in ("tl::atomic_max<0>((&(Out_ptr", "tl::atomic_min<0>((&(Out_ptr"):
        k = next(n for n, line in enumerate(lines) if name in line)
        guard = lines[k - 1] if "if (" in lines[k - 1] else lines[k - 2]
        assert "< 35)" in guard  # columns past the tensor's 70 skipped (the guard simplified per pair)
    assert "0x1p-1f" in src  # the scalar 0.5 against every element
    cuda.compile_object(src, kernel.target)


# ---- use_tma: bulk adds ------------------------------------------------------------------------------


def _bulk(dtype="float32", rows=130, cols=64, where="global"):
    @T.prim_func
    def main(A: T.Tensor((256, cols), dtype), C: T.Tensor((2, rows, 4, cols), dtype)):
        with T.Kernel(4, 2, threads=128) as (bx, by):
            S = T.alloc_shared((64, cols), dtype)
            F = T.alloc_fragment((64, cols), "float32")
            for k in T.serial(3):
                T.copy(A[bx * 64, 0], F)
                for i, j in T.Parallel(64, cols):
                    F[i, j] = F[i, j] * k
                T.copy(F, S)
                T.atomic_add(C[by, bx * 64 : bx * 64 + 64, k, :], S, use_tma=True)

    return main


@pytest.mark.parametrize("dtype", ["float32", "float16", "bfloat16"])
def test_use_tma_is_one_bulk_add_per_row(dtype):
    kernel = tilelang.compile(_bulk(dtype), target="sm_90a")
    src = kernel.get_kernel_source()
    body = src[src.index("tl::atomic_bulk_fence();") :]
    order = [body.index(s) for s in ("atomic_bulk_fence", "__syncthreads", "atomic_bulk_add", "atomic_bulk_wait_read")]
    assert order == sorted(order)  # fence, barrier, the adds, then the wait before the tile is written again
    assert f"(uint){64 * tilelang.DataType(dtype).bits // 8}" in body  # one 64-element row
    assert "< 130)" in body  # rows past the tensor's edge skipped
    cuda.compile_object(src, kernel.target)


def test_use_tma_needs_sm_90a():
    with _raises_at(r"needs sm_90a; sm_80 has none", "T.atomic_add(C[by, bx * 64 : bx * 64 + 64, k, :], S, use_tma"):
        tilelang.compile(_bulk(), target="sm_80")


def test_use_tma_rows_must_be_16_byte_multiples():
    with _raises_at(r"multiple of 16 bytes", "T.atomic_add(C[by, bx * 64 : bx * 64 + 64, k, :], S, use_tma"):
        tilelang.compile(_bulk(cols=2), target="sm_90a")


def test_use_tma_refuses_a_swizzled_tile():
    from tilelang.layout import make_swizzled_layout

    @T.prim_func
    def main(A: T.Tensor((64, 64), "float16"), C: T.Tensor((64, 64), "float16")):
        with T.Kernel(1, threads=128):
            S = T.alloc_shared((64, 64), "float16")
            T.annotate_layout({S: make_swizzled_layout(S)})
            T.copy(A, S)
            T.atomic_add(C, S, use_tma=True)

    with _raises_at(r"'S' has a swizzled layout", "T.atomic_add(C, S, use_tma=True)"):
        tilelang.compile(main, target="sm_90a")


# ---- errors while tracing ------------------------------------------------------------------------------


def test_errors_at_the_users_line():
    with _raises_at(r"holds int8; CUDA atomics on any target \(sm_80, sm_89, sm_90a\)", "T.atomic_add(X[0], 1)"):

        @T.prim_func
        def int8_add(X: T.Tensor((4,), "int8")):
            with T.Kernel(1, threads=32):
                T.atomic_add(X[0], 1)

    with _raises_at(r"'r' is in local.fragment memory", "T.atomic_max(r[0], 1.0)"):

        @T.prim_func
        def fragment_dst(X: T.Tensor((4,), "float32")):
            with T.Kernel(1, threads=32):
                r = T.alloc_fragment((4,), "float32")
                T.atomic_max(r[0], 1.0)

    with _raises_at(r"memory_order must be one of", 'T.atomic_add(X[0], 1.0, memory_order="strong")'):

        @T.prim_func
        def bad_order(X: T.Tensor((4,), "float32")):
            with T.Kernel(1, threads=32):
                T.atomic_add(X[0], 1.0, memory_order="strong")

    with _raises_at(r"return_prev=True returns the old value of one element", "T.atomic_min(X, Y, return_prev=True)"):

        @T.prim_func
        def tile_prev(X: T.Tensor((4,), "float32"), Y: T.Tensor((4,), "float32")):
            with T.Kernel(1, threads=32):
                T.atomic_min(X, Y, return_prev=True)

    with _raises_at(r"tiles of different shapes", "T.atomic_add(X[0:4], Y[0:2])"):

        @T.prim_func
        def shapes(X: T.Tensor((4,), "float32"), Y: T.Tensor((4,), "float32")):
            with T.Kernel(1, threads=32):
                T.atomic_add(X[0:4], Y[0:2])


def test_vector_and_load_store_errors():
    with _raises_at(r"must start at a multiple of 2", "T.atomic_addx2(X[1], Y[0])"):

        @T.prim_func
        def odd(X: T.Tensor((8,), "float16"), Y: T.Tensor((8,), "float16")):
            with T.Kernel(1, threads=32):
                T.atomic_addx2(X[1], Y[0])

    with _raises_at(r"return_prev=True is for float32 quads", "T.atomic_addx4(X[0], Y[0], return_prev=True)"):

        @T.prim_func
        def half_quad(X: T.Tensor((8,), "float16"), Y: T.Tensor((8,), "float16"), Z: T.Tensor((8,), "float16")):
            with T.Kernel(1, threads=32):
                v = T.atomic_addx4(X[0], Y[0], return_prev=True)
                Z[0] = v[0]

    with _raises_at(r"holds int32; CUDA atomics .* take float16, bfloat16, float32", "T.atomic_addx2(X[0], X[2])"):

        @T.prim_func
        def int_pair(X: T.Tensor((8,), "int32")):
            with T.Kernel(1, threads=32):
                T.atomic_addx2(X[0], X[2])

    with _raises_at(r"T.atomic_or: 'X' holds float32", "T.atomic_or(X[0], 1)"):

        @T.prim_func
        def float_or(X: T.Tensor((8,), "float32")):
            with T.Kernel(1, threads=32):
                T.atomic_or(X[0], 1)

    with _raises_at(r"T.atomic_load: memory_order must be one of", 'T.atomic_load(X[0], memory_order="release")'):

        @T.prim_func
        def load_release(X: T.Tensor((8,), "int32"), Y: T.Tensor((8,), "int32")):
            with T.Kernel(1, threads=32):
                Y[0] = T.atomic_load(X[0], memory_order="release")

    with _raises_at(r"T.atomic_store: memory_order must be one of", 'T.atomic_store(X[0], 1, memory_order="acquire")'):

        @T.prim_func
        def store_acquire(X: T.Tensor((8,), "int32")):
            with T.Kernel(1, threads=32):
                T.atomic_store(X[0], 1, memory_order="acquire")


def test_use_tma_errors_while_tracing():
    with _raises_at(r"a tile allocated with T.alloc_shared", "T.atomic_add(X, F, use_tma=True)"):

        @T.prim_func
        def from_fragment(X: T.Tensor((64, 64), "float32")):
            with T.Kernel(1, threads=128):
                F = T.alloc_fragment((64, 64), "float32")
                T.clear(F)
                T.atomic_add(X, F, use_tma=True)

    with _raises_at(r"the bulk add does not convert", "T.atomic_add(X, S, use_tma=True)"):

        @T.prim_func
        def converting(X: T.Tensor((64, 64), "float32")):
            with T.Kernel(1, threads=128):
                S = T.alloc_shared((64, 64), "float16")
                T.atomic_add(X, S, use_tma=True)

    with _raises_at(r"bulk adds are relaxed", 'T.atomic_add(X, S, use_tma=True, memory_order="release")'):

        @T.prim_func
        def ordered(X: T.Tensor((64, 64), "float32")):
            with T.Kernel(1, threads=128):
                S = T.alloc_shared((64, 64), "float32")
                T.atomic_add(X, S, use_tma=True, memory_order="release")


def split_k_gemm(M=256, N=128, K=256, out_dtype="float32", splits=2):
    """Each of `splits` blocks along z multiplies one slice of K and adds its accumulator to C with
    element atomics in a T.Parallel loop (the public split-K GEMM's epilogue)."""
    part = K // splits

    @T.prim_func
    def main(A: T.Tensor((M, K), "float16"), B: T.Tensor((K, N), "float16"), C: T.Tensor((M, N), out_dtype)):
        with T.Kernel(T.ceildiv(N, 128), T.ceildiv(M, 128), splits, threads=128) as (bx, by, bz):
            A_s = T.alloc_shared((128, 32), "float16")
            B_s = T.alloc_shared((32, 128), "float16")
            C_f = T.alloc_fragment((128, 128), "float32")
            T.clear(C_f)
            for k in T.Pipelined(part // 32, num_stages=2):
                T.copy(A[by * 128, bz * part + k * 32], A_s)
                T.copy(B[bz * part + k * 32, bx * 128], B_s)
                T.gemm(A_s, B_s, C_f)
            for i, j in T.Parallel(128, 128):
                T.atomic_add(C[by * 128 + i, bx * 128 + j], C_f[i, j])

    return main


@pytest.mark.parametrize("arch", ["sm_80", "sm_90a"])
@pytest.mark.parametrize("out_dtype", ["float32", "float16"])
def test_adds_along_contiguous_elements_go_two_at_a_time(arch, out_dtype):
    """The accumulator holds column pairs: each pair is one T.atomic_addx2 (one 64-bit float atomic
    on sm_90, a half2 atomic for float16), at half the atomics of one per element."""
    k = tilelang.compile(split_k_gemm(out_dtype=out_dtype), target=arch)
    src = k.get_kernel_source()
    assert "tl::atomic_addx2<false>((&(C_ptr[" in src and "tl::atomic_add((&(C_ptr" not in src, src
    cuda.compile_object(src, k.target, host_src=k.host_source)


def test_adds_into_one_element_stay_one_at_a_time():
    @T.prim_func
    def main(X: T.Tensor((64, 64), "float32"), S: T.Tensor((64,), "float32")):
        with T.Kernel(1, threads=128):
            for i, j in T.Parallel(64, 64):
                T.atomic_add(S[i], X[i, j])

    src = tilelang.compile(main, target="sm_90a").get_kernel_source()
    assert "tl::atomic_add((&(S_ptr[" in src and "atomic_addx" not in src

"""T.gemm against torch on random inputs (GPU): dtypes, transposes, warp policies, ss/rs/sr, partial tiles."""

import pytest
import torch

import tilelang
import tilelang.language as T

pytestmark = pytest.mark.gpu


@tilelang.jit(out_idx=[-1])
def matmul(
    M, N, K, bm, bn, bk, dtype, accum, out_dtype, trans_a=False, trans_b=False, policy=0, kind="ss", threads=128
):
    a_shape = (K, M) if trans_a else (M, K)
    b_shape = (N, K) if trans_b else (K, N)
    a_tile = (bk, bm) if trans_a else (bm, bk)
    b_tile = (bn, bk) if trans_b else (bk, bn)

    @T.prim_func
    def main(A: T.Tensor(a_shape, dtype), B: T.Tensor(b_shape, dtype), C: T.Tensor((M, N), out_dtype)):
        with T.Kernel(T.ceildiv(N, bn), T.ceildiv(M, bm), threads=threads) as (bx, by):
            A_s = T.alloc_shared(a_tile, dtype) if kind[0] == "s" else T.alloc_fragment(a_tile, dtype)
            B_s = T.alloc_shared(b_tile, dtype) if kind[1] == "s" else T.alloc_fragment(b_tile, dtype)
            C_f = T.alloc_fragment((bm, bn), accum)
            T.clear(C_f)
            for k in T.Pipelined(T.ceildiv(K, bk), num_stages=2):
                if trans_a:
                    T.copy(A[k * bk, by * bm], A_s)
                else:
                    T.copy(A[by * bm, k * bk], A_s)
                if trans_b:
                    T.copy(B[bx * bn, k * bk], B_s)
                else:
                    T.copy(B[k * bk, bx * bn], B_s)
                T.gemm(A_s, B_s, C_f, trans_a, trans_b, policy=policy)
            T.copy(C_f, C[by * bm, bx * bn])

    return main


def _inputs(M, N, K, dtype, trans_a, trans_b):
    t = getattr(torch, dtype)
    if dtype == "int8":
        a, b = torch.randint(-8, 8, (M, K), device="cuda"), torch.randint(-8, 8, (K, N), device="cuda")
    else:
        a, b = torch.randn(M, K, device="cuda"), torch.randn(K, N, device="cuda")
    A = (a.t().contiguous() if trans_a else a).to(t)
    B = (b.t().contiguous() if trans_b else b).to(t)
    ref = a.to(t).double() @ b.to(t).double()
    return A, B, ref


CASES = [
    ("float16", "float32", "float32", 1e-2),
    ("float16", "float16", "float16", 2e-2),
    ("bfloat16", "float32", "float32", 1e-2),
    ("float32", "float32", "float32", 1e-2),
    ("int8", "int32", "int32", 0),
    ("float8_e4m3fn", "float32", "float32", 1e-2),
    ("float8_e5m2", "float32", "float32", 1e-2),
]


@pytest.mark.parametrize("dtype,accum,out,tol", CASES)
def test_dtypes(dtype, accum, out, tol):
    M = N = K = 256
    A, B, ref = _inputs(M, N, K, dtype, False, dtype.startswith("float8"))
    C = matmul(M, N, K, 64, 64, 64, dtype, accum, out, trans_b=dtype.startswith("float8"))(A, B)
    err = (C.double() - ref).norm() / ref.norm()
    assert err <= max(tol, 1e-6), f"relative error {err}"


@pytest.mark.parametrize("dtype,accum,out,tol", [c for c in CASES if c[0] in ("float32", "int8") or "float8" in c[0]])
def test_k_major_dtypes_on_two_warpgroups(dtype, accum, out, tol):
    # B transposed (both operands K-major): on sm_90a tf32, int8 and fp8 run as wgmma.
    M, N, K = 256, 384, 320
    A, B, ref = _inputs(M, N, K, dtype, False, True)
    C = matmul(M, N, K, 128, 128, 64, dtype, accum, out, trans_b=True, threads=256)(A, B)
    err = (C.double() - ref).norm() / ref.norm()
    assert err <= max(tol, 1e-6), f"relative error {err}"


@pytest.mark.parametrize("trans_a", [False, True])
@pytest.mark.parametrize("trans_b", [False, True])
def test_transposes(trans_a, trans_b):
    A, B, ref = _inputs(192, 128, 96, "float16", trans_a, trans_b)
    C = matmul(192, 128, 96, 64, 64, 32, "float16", "float32", "float32", trans_a, trans_b)(A, B)
    assert (C.double() - ref).norm() / ref.norm() < 1e-3


# Every transpose with both operands in shared memory; with one in registers, the shared one's both
# ways (an operand in registers is not transposed: a UserError, test_gemm.py).
TF32_CASES = [("ss", a, b) for a in (False, True) for b in (False, True)]
TF32_CASES += [("rs", False, b) for b in (False, True)] + [("sr", a, False) for a in (False, True)]


@pytest.mark.parametrize("kind,trans_a,trans_b", TF32_CASES)
def test_tf32_swizzled_operands(kind, trans_a, trans_b):
    # float32 tiles of 32- and 64-float rows, swizzled in 4-float chunks, read by mma.sync (wgmma takes
    # tf32 only K-major: trans_a False and trans_b True, from shared memory).
    A, B, ref = _inputs(192, 128, 128, "float32", trans_a, trans_b)
    C = matmul(192, 128, 128, 64, 64, 32, "float32", "float32", "float32", trans_a, trans_b, kind=kind)(A, B)
    assert (C.double() - ref).norm() / ref.norm() < 1e-3


@pytest.mark.parametrize("policy", [0, 1, 2])
@pytest.mark.parametrize("kind", ["ss", "rs", "sr"])
def test_policies_and_operand_places(policy, kind):
    A, B, ref = _inputs(128, 128, 64, "float16", False, False)
    C = matmul(128, 128, 64, 64, 64, 32, "float16", "float32", "float32", policy=policy, kind=kind)(A, B)
    assert (C.double() - ref).norm() / ref.norm() < 1e-3


def test_sizes_not_divisible_by_the_tile():
    A, B, ref = _inputs(1000, 1000, 1000, "float16", False, False)
    C = matmul(1000, 1000, 1000, 128, 128, 32, "float16", "float32", "float16")(A, B)
    assert (C.double() - ref).norm() / ref.norm() < 1e-2


@pytest.mark.parametrize("stages", [1, 2, 3, 4])
def test_pipelined_stages(stages):
    @tilelang.jit(out_idx=[-1])
    def staged(M, N, K, stages):
        @T.prim_func
        def main(A: T.Tensor((M, K), "float16"), B: T.Tensor((K, N), "float16"), C: T.Tensor((M, N), "float32")):
            with T.Kernel(T.ceildiv(N, 64), T.ceildiv(M, 64), threads=128) as (bx, by):
                A_s = T.alloc_shared((64, 32), "float16")
                B_s = T.alloc_shared((32, 64), "float16")
                C_f = T.alloc_fragment((64, 64), "float32")
                T.clear(C_f)
                for k in T.Pipelined(T.ceildiv(K, 32), num_stages=stages):
                    T.copy(A[by * 64, k * 32], A_s)
                    T.copy(B[k * 32, bx * 64], B_s)
                    T.gemm(A_s, B_s, C_f)
                T.copy(C_f, C[by * 64, bx * 64])

        return main

    A, B, ref = _inputs(200, 136, 72, "float16", False, False)  # 3 K-tiles, the last partial
    C = staged(200, 136, 72, stages)(A, B)
    assert (C.double() - ref).norm() / ref.norm() < 1e-3


@pytest.mark.parametrize("threads", [128, 256])
def test_tf32_a_in_registers(threads):
    # On sm_90a, wgmma.m64nNk8 with A from registers (B K-major); mma.sync elsewhere.
    M, N, K = 256, 192, 128
    A, B, ref = _inputs(M, N, K, "float32", False, True)
    C = matmul(M, N, K, 128, 64, 32, "float32", "float32", "float32", trans_b=True, kind="rs", threads=threads)(A, B)
    assert (C.double() - ref).norm() / ref.norm() < 1e-2


def test_tf32_and_bf16_accumulators_summed():
    # A tf32 gemm (A in registers) and a bf16 gemm whose accumulators one T.Parallel loop combines.
    from test_gemm_wgmma import _tf32_and_bf16_gemms_summed

    kernel = tilelang.compile(_tf32_and_bf16_gemms_summed(), out_idx=[-1])
    a1, b1 = torch.randn(128, 64, device="cuda"), torch.randn(32, 64, device="cuda")
    a2, b2 = torch.randn(64, 128, device="cuda").bfloat16(), torch.randn(64, 32, device="cuda").bfloat16()
    C = kernel(a1, b1, a2, b2)
    ref = a1.double() @ b1.double().t() - a2.double().t() @ b2.double()
    assert (C.double() - ref).norm() / ref.norm() < 1e-2

"""TensorCoreIntrinEmitter kernels against torch on random inputs (GPU): fp16, bf16, tf32 and int8,
every operand order, 8-wide tiles, T.Parallel or pipelined T.copy loads, and an eager kernel."""

import pytest
import torch
from mma_kernels import eager_gemm, gemm

import tilelang

pytestmark = pytest.mark.gpu


def _operands(M, N, K, dtype, a_transposed, b_transposed):
    t = getattr(torch, dtype)
    if dtype == "int8":
        a, b = torch.randint(-8, 8, (M, K), device="cuda"), torch.randint(-8, 8, (K, N), device="cuda")
    else:
        a, b = torch.randn(M, K, device="cuda"), torch.randn(K, N, device="cuda")
    a, b = a.to(t), b.to(t)
    ref = a.double() @ b.double()
    A = a.t().contiguous() if a_transposed else a
    B = b.t().contiguous() if b_transposed else b
    return A, B, ref


CASES = [
    # dtype, accum, out, tolerance, kernel options
    ("float16", "float32", "float16", 2e-2, dict()),
    ("float16", "float16", "float16", 5e-2, dict(a_transposed=True)),
    ("bfloat16", "float32", "float32", 2e-2, dict(b_transposed=False)),
    ("bfloat16", "float32", "float32", 2e-2, dict(a_transposed=True, b_transposed=False, warp_tile=(32, 8))),
    ("float32", "float32", "float32", 2e-2, dict(chunk=16)),  # tf32
    ("float32", "float32", "float32", 2e-2, dict(a_transposed=True, b_transposed=False, chunk=16)),
    ("int8", "int32", "int32", 0, dict(warp_tile=(64, 64))),
    ("int8", "int32", "int32", 0, dict(a_transposed=True, b_transposed=False, chunk=64)),
    ("float16", "float32", "float32", 1e-2, dict(tile_copies=True, stages=3)),
    ("int8", "int32", "int32", 0, dict(tile_copies=True, warps=(1, 4), warp_tile=(32, 16), is_m_first=True)),
]


@pytest.mark.parametrize("dtype,accum,out,tol,kw", CASES)
def test_emitter_gemm_matches_torch(dtype, accum, out, tol, kw):
    M, N, K = 256, 384, 512
    a_t, b_t = kw.get("a_transposed", False), kw.get("b_transposed", True)
    kernel = tilelang.compile(gemm(M, N, K, dtype, accum, out, **kw), out_idx=[-1])
    A, B, ref = _operands(M, N, K, dtype, a_t, b_t)
    C = kernel(A, B)
    if tol == 0:
        torch.testing.assert_close(C.long(), ref.long(), rtol=0, atol=0)
    else:
        scale = ref.abs().max().item()
        torch.testing.assert_close(C.double(), ref, rtol=tol, atol=tol * scale)


def test_eager_emitter_kernel_matches_torch():
    A = torch.randn(512, 256, device="cuda", dtype=torch.float16)
    B = torch.randn(320, 256, device="cuda", dtype=torch.float16)
    C = eager_gemm(A, B, dtype="float16", accum="float32", out_dtype="float32")
    torch.testing.assert_close(C, (A.float() @ B.float().T), rtol=1e-2, atol=1e-2)


@pytest.mark.parametrize(
    "stages,configs",
    [(2, None), (3, None), (4, None), (3, {"tl.disable_warp_specialized": True})],
)
def test_pipelined_tile_copies_match_torch(stages, configs):
    # TMA loads into the stages the emitter's ldmatrix reads (the consumers fence their reads before
    # a stage is freed; without it the next load overwrote reads in flight), run a few times: the
    # race showed as a share of wrong elements that changed from run to run.
    M, N, K = 256, 384, 1024
    func = gemm(M, N, K, "float16", "float32", "float32", tile_copies=True, stages=stages)
    kernel = tilelang.compile(func, out_idx=[-1], pass_configs=configs)
    A, B, ref = _operands(M, N, K, "float16", False, True)
    for _ in range(5):
        C = kernel(A, B)
        torch.testing.assert_close(C.double(), ref, rtol=1e-2, atol=1e-2 * ref.abs().max().item())

"""T.gemm_sp against torch on random 2:4-sparse inputs (GPU): dtypes, metadata widths, transposes,
operand places, warp policies, thread counts and pipeline depths. The reference is the dense matmul
of the uncompressed A; A is compressed here in the public TileLang's format (test_gemm_sp.py checks
the format against the lanes' metadata)."""

import itertools

import pytest
import torch

import tilelang
import tilelang.language as T
from tilelang.op.gemm_sp import e_factor

pytestmark = pytest.mark.gpu


@tilelang.jit(out_idx=[-1])
def matmul_sp(
    M,
    N,
    K,
    bm,
    bn,
    bk,
    dtype,
    accum,
    e_dtype,
    trans_a=False,
    trans_e=False,
    trans_b=False,
    kind="ss",
    policy=0,
    threads=128,
    stages=2,
):
    ef = e_factor(dtype, e_dtype)
    a_shape, a_tile = ((K // 2, M), (bk // 2, bm)) if trans_a else ((M, K // 2), (bm, bk // 2))
    e_shape, e_tile = ((K // ef, M), (bk // ef, bm)) if trans_e else ((M, K // ef), (bm, bk // ef))
    b_shape, b_tile = ((N, K), (bn, bk)) if trans_b else ((K, N), (bk, bn))

    @T.prim_func
    def main(
        A: T.Tensor(a_shape, dtype),
        E: T.Tensor(e_shape, e_dtype),
        B: T.Tensor(b_shape, dtype),
        C: T.Tensor((M, N), accum),
    ):
        with T.Kernel(T.ceildiv(N, bn), T.ceildiv(M, bm), threads=threads) as (bx, by):
            A_s = T.alloc_shared(a_tile, dtype) if kind[0] == "s" else T.alloc_fragment(a_tile, dtype)
            E_s = T.alloc_shared(e_tile, e_dtype)
            B_s = T.alloc_shared(b_tile, dtype) if kind[1] == "s" else T.alloc_fragment(b_tile, dtype)
            C_f = T.alloc_fragment((bm, bn), accum)
            T.clear(C_f)
            for k in T.Pipelined(T.ceildiv(K, bk), num_stages=stages):
                if trans_a:
                    T.copy(A[k * bk // 2, by * bm], A_s)
                else:
                    T.copy(A[by * bm, k * bk // 2], A_s)
                if trans_e:
                    T.copy(E[k * bk // ef, by * bm], E_s)
                else:
                    T.copy(E[by * bm, k * bk // ef], E_s)
                if trans_b:
                    T.copy(B[bx * bn, k * bk], B_s)
                else:
                    T.copy(B[k * bk, bx * bn], B_s)
                T.gemm_sp(A_s, E_s, B_s, C_f, trans_a, trans_e, trans_b, policy=policy)
            T.copy(C_f, C[by * bm, bx * bn])

    return main


def _sparse(M, K, dtype):
    """A random (M, K) matrix with two nonzeros in every group of four along K (as float32)."""
    if dtype == "int8":
        values = torch.randint(-8, 9, (M, K // 4, 2), device="cuda").float()
    else:
        values = torch.randn(M, K // 4, 2, device="cuda").to(getattr(torch, dtype)).float()
    keep = torch.rand(M, K // 4, 4, device="cuda").topk(2, dim=-1).indices.sort(dim=-1).values
    dense = torch.zeros(M, K // 4, 4, device="cuda").scatter_(-1, keep, values)
    return dense.view(M, K)


def _compress(dense, e_dtype):
    """(A_sparse, E) of a 2:4 matrix in the public format: the two kept elements of each group of
    four in order, and 4 bits a group (positions in bits 1:0 and 3:2) packed little-endian into E."""
    M, K = dense.shape
    groups = dense.view(M, K // 4, 4)
    # The nonzeros first, then the lowest positions; in increasing order (mma.sp::ordered_metadata).
    score = (groups != 0).int() * 8 + (3 - torch.arange(4, device=dense.device))
    keep = score.topk(2, dim=-1).indices.sort(dim=-1).values
    values = groups.gather(-1, keep).reshape(M, K // 2)
    bits = torch.iinfo(e_dtype).bits
    nibbles = (keep[..., 0] | (keep[..., 1] << 2)).view(M, K // bits, bits // 4)
    packed = sum(nibbles[..., j].long() << (4 * j) for j in range(bits // 4))
    packed = (packed + 2 ** (bits - 1)) % 2**bits - 2 ** (bits - 1)  # two's complement of `bits`
    return values, packed.to(e_dtype)


def _run(M, N, K, blocks, dtype, accum, e_dtype, trans_a=False, trans_e=False, trans_b=False, tol=1e-2, **kw):
    a = _sparse(M, K, dtype)
    b = torch.randint(-8, 9, (K, N), device="cuda").float() if dtype == "int8" else torch.randn(K, N, device="cuda")
    torch_dtype = getattr(torch, dtype)
    b = b.to(torch_dtype)
    a_sparse, e = _compress(a, getattr(torch, e_dtype))
    a_sparse = a_sparse.to(torch_dtype)
    A = a_sparse.t().contiguous() if trans_a else a_sparse
    E = e.t().contiguous() if trans_e else e
    B = b.t().contiguous() if trans_b else b
    kernel = matmul_sp(M, N, K, *blocks, dtype, accum, e_dtype, trans_a, trans_e, trans_b, **kw)
    c = kernel(A, E, B)
    ref = a.double() @ b.double()
    if tol == 0:
        assert torch.equal(c.double(), ref)
    else:
        torch.testing.assert_close(c.double(), ref, rtol=tol, atol=tol * K**0.5)


@pytest.mark.parametrize(
    "dtype,accum,e_dtype,tol",
    [
        ("float16", "float32", "int16", 1e-2),
        ("float16", "float16", "int16", 2e-2),
        ("bfloat16", "float32", "int16", 1e-2),
        ("int8", "int32", "int32", 0),
        ("float8_e4m3fn", "float32", "int32", 1e-2),
        ("float8_e5m2", "float32", "int32", 1e-2),
    ],
)
def test_dtypes(dtype, accum, e_dtype, tol):
    if "float8" in dtype and torch.cuda.get_device_capability() < (8, 9):
        pytest.skip("fp8 mma.sp needs sm_89")
    bk = 128 if dtype in ("int8",) or "float8" in dtype else 64
    _run(256, 256, 512, (128, 128, bk), dtype, accum, e_dtype, tol=tol)


@pytest.mark.parametrize(
    "dtype,e_dtype",
    [(d, e) for d in ("float16", "int8") for e in ("int8", "int16", "int32")],
)
def test_metadata_widths(dtype, e_dtype):
    accum, tol, bk = ("int32", 0, 128) if dtype == "int8" else ("float32", 1e-2, 64)
    _run(128, 128, 256, (64, 64, bk), dtype, accum, e_dtype, tol=tol)


@pytest.mark.parametrize("trans_a,trans_e,trans_b", list(itertools.product([False, True], repeat=3)))
def test_transposes(trans_a, trans_e, trans_b):
    _run(128, 128, 256, (64, 64, 64), "float16", "float32", "int16", trans_a, trans_e, trans_b)


@pytest.mark.parametrize(
    "kind,policy", [("ss", 0), ("ss", 1), ("ss", 2), ("rs", 0), ("rs", 1), ("sr", 0), ("sr", 2), ("rr", 0), ("rr", 1)]
)
def test_operand_places_and_policies(kind, policy):
    _run(128, 128, 256, (64, 64, 64), "float16", "float32", "int16", kind=kind, policy=policy)


@pytest.mark.parametrize(
    "blocks,threads,stages",
    [((128, 128, 64), 128, 2), ((128, 256, 128), 256, 2), ((128, 128, 128), 128, 3), ((64, 64, 64), 128, 1)],
)
def test_example_tiles(blocks, threads, stages):
    # The public example's tiles (128 x 128 x 64, 128 threads; its script's 128 x 256 x 128, 256 threads).
    _run(512, 512, 1024, blocks, "float16", "float32", "int16", threads=threads, stages=stages)

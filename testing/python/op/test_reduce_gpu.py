"""Tile reductions, cumsum and atomics against torch on random inputs (GPU)."""

import pytest
import torch

import tilelang
import tilelang.language as T

pytestmark = pytest.mark.gpu

REFS = {
    "max": lambda x: x.max(dim=1).values,
    "min": lambda x: x.min(dim=1).values,
    "sum": lambda x: x.sum(dim=1),
    "abssum": lambda x: x.abs().sum(dim=1),
    "absmax": lambda x: x.abs().max(dim=1).values,
}


@tilelang.jit(out_idx=[-1])
def row_reduce(M, N, blk_m, threads, kind, clear, via):
    @T.prim_func
    def main(A: T.Tensor((M, N), "float32"), Init: T.Tensor((M,), "float32"), B: T.Tensor((M,), "float32")):
        with T.Kernel(T.ceildiv(M, blk_m), threads=threads) as bx:
            if via == "fragment":
                x = T.alloc_fragment((blk_m, N), "float32")
                r = T.alloc_fragment((blk_m,), "float32")
            else:
                x = T.alloc_shared((blk_m, N), "float32")
                r = T.alloc_shared((blk_m,), "float32")
            T.copy(A[bx * blk_m, 0], x)
            T.copy(Init[bx * blk_m], r)
            T.reduce(x, r, kind, dim=1, clear=clear)
            T.copy(r, B[bx * blk_m])

    return main


@pytest.mark.parametrize("kind", sorted(REFS))
@pytest.mark.parametrize(
    "M,N,blk_m,threads", [(256, 64, 16, 128), (100, 1000, 4, 128), (8, 4096, 1, 256), (64, 96, 8, 64)]
)
@pytest.mark.parametrize("clear", [True, False])
def test_fragment_row_reductions(kind, M, N, blk_m, threads, clear):
    A = torch.randn(M, N, device="cuda")
    init = torch.randn(M, device="cuda")
    B = row_reduce(M, N, blk_m, threads, kind, clear, "fragment")(A, init)
    ref = REFS[kind](A)
    if not clear:
        ref = (
            torch.maximum(ref, init)
            if kind in ("max", "absmax")
            else (torch.minimum(ref, init) if kind == "min" else ref + init)
        )
    torch.testing.assert_close(B, ref, rtol=1e-4, atol=1e-3)


@pytest.mark.parametrize("kind", ["max", "sum"])
def test_shared_row_reductions(kind):
    A = torch.randn(64, 200, device="cuda")
    init = torch.zeros(64, device="cuda")
    B = row_reduce(64, 200, 16, 128, kind, True, "shared")(A, init)
    torch.testing.assert_close(B, REFS[kind](A), rtol=1e-4, atol=1e-3)


@tilelang.jit(out_idx=[-1])
def prefix_sum(M, N, reverse):
    @T.prim_func
    def main(A: T.Tensor((M, N), "float32"), B: T.Tensor((M, N), "float32")):
        with T.Kernel(1, threads=128):
            s = T.alloc_shared((M, N), "float32")
            T.copy(A, s)
            T.cumsum(s, dim=1, reverse=reverse)
            T.copy(s, B)

    return main


@pytest.mark.parametrize("reverse", [False, True])
def test_cumsum(reverse):
    A = torch.randn(33, 64, device="cuda")
    ref = A.flip(1).cumsum(1).flip(1) if reverse else A.cumsum(1)
    torch.testing.assert_close(prefix_sum(33, 64, reverse)(A), ref, rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("inplace", [True, False])
def test_cumsum_of_a_pipelined_tile(inplace):
    import sys

    sys.path.insert(0, __file__.rsplit("/", 1)[0])
    from test_cumsum import chunked_prefix_sums

    G = torch.randn(256, device="cuda")
    out = tilelang.compile(chunked_prefix_sums(inplace), out_idx=[-1])(G)
    torch.testing.assert_close(out, G.view(4, 64).cumsum(1).view(-1), rtol=1e-4, atol=1e-4)


@tilelang.jit
def accumulate(M, N, block):
    @T.prim_func
    def main(A: T.Tensor((M, N), "float32"), Out: T.Tensor((M, N), "float32"), Total: T.Tensor((1,), "float32")):
        with T.Kernel(T.ceildiv(N, block), T.ceildiv(M, block), 4, threads=128) as (bx, by, bz):
            f = T.alloc_fragment((block, block), "float32")
            T.copy(A[by * block, bx * block], f)
            T.atomic_add(Out[by * block, bx * block], f)
            T.atomic_add(Total[0], 1.0)

    return main


def test_atomic_add_tile_and_scalar():
    A = torch.randn(100, 70, device="cuda")
    out = torch.zeros_like(A)
    total = torch.zeros(1, device="cuda")
    accumulate(100, 70, 32)(A, out, total)  # 4 copies of the grid each add A once
    torch.testing.assert_close(out, 4 * A, rtol=1e-5, atol=1e-5)
    assert total.item() == 4 * 4 * 3 * 128  # every thread of every block adds 1


@tilelang.jit(out_idx=[-1])
def swizzled_transpose(M, N, block, swizzle_blocks):
    from tilelang.layout import make_swizzled_layout

    @T.prim_func
    def main(A: T.Tensor((M, N), "float16"), B: T.Tensor((N, M), "float16")):
        with T.Kernel(T.ceildiv(N, block), T.ceildiv(M, block), threads=128) as (bx, by):
            tile = T.alloc_shared((block, block), "float16")
            T.annotate_layout({tile: make_swizzled_layout(tile)})
            if swizzle_blocks:
                T.use_swizzle(3)
            T.copy(A[by * block, bx * block], tile)
            for i, j in T.Parallel(block, block):
                B[bx * block + i, by * block + j] = tile[j, i]

    return main


@pytest.mark.parametrize("swizzle_blocks", [False, True])
def test_swizzled_shared_layout_and_block_rasterization(swizzle_blocks):
    A = torch.randn(500, 333, device="cuda", dtype=torch.float16)
    B = swizzled_transpose(500, 333, 64, swizzle_blocks)(A)
    assert torch.equal(B, A.t().contiguous())

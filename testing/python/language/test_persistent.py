"""T.Persistent: a persistent kernel's blocks visit every tile of the grid exactly once, in grouped
order (CPU: the loop it becomes, its tiles evaluated for every wave and block; GPU: numbers)."""

import pytest
import tvm_ffi
from tvm import ir, sym, tirx

import tilelang
import tilelang.language as T
from tilelang.layout.fragment import substitute


def persistent_add(M=1000, N=700, bm=128, bn=128, blocks=7, group_size=3):
    """B = A + 1 with `blocks` persistent blocks; Visits[tile] counts the blocks that took each tile."""
    mb, nb = T.ceildiv(M, bm), T.ceildiv(N, bn)

    @T.prim_func
    def main(
        A: T.Tensor((M, N), "float32"),
        B: T.Tensor((M, N), "float32"),
        Visits: T.Tensor((mb, nb), "int32"),
    ):
        with T.Kernel(blocks, threads=128) as block_id:
            for bx, by in T.Persistent([mb, nb], blocks, block_id, group_size=group_size):
                for i, j in T.Parallel(bm, bn):
                    if bx * bm + i < M and by * bn + j < N:
                        B[bx * bm + i, by * bn + j] = A[bx * bm + i, by * bn + j] + 1
                if T.get_thread_binding() == 0:
                    T.atomic_add(Visits[bx, by], 1)

    return main


def _tiles_taken(func, blocks):
    """[(wave, block, (bx, by))] of the tiles the loop gives each block, evaluated from its IR."""
    loops = []
    tvm_ffi.structural_walk(func.body, [(tirx.For, lambda f: loops.append(f) if f.loop_var.name == "w" else None)])
    (loop,) = loops
    binds, guard = list(loop.body.seq[:-1]), loop.body.seq[-1]
    block_var = [v for v in _free_vars(binds[0].value) if v.name == "block_id"][0]
    ana = sym.Analyzer()
    out = []
    for w in range(int(loop.extent)):
        for b in range(blocks):
            values = {loop.loop_var: w, block_var: b}
            coords = []
            for bind in binds:
                v = int(ana.simplify(substitute(bind.value, _consts(values))))
                values[bind.var] = v
                coords.append(v)
            if bool(ana.simplify(substitute(guard.condition, _consts(values)))):
                out.append((w, b, tuple(coords)))
    return out


def _consts(values):
    return {k: tirx.const(v, "int32") for k, v in values.items()}


def _free_vars(expr):
    found = []
    tvm_ffi.structural_walk(expr, [(ir.Var, found.append)])
    return found


def test_every_tile_once_in_grouped_order():
    func = persistent_add()
    taken = _tiles_taken(func, blocks=7)
    tiles = sorted(t for _, _, t in taken)
    assert tiles == [(x, y) for x in range(8) for y in range(6)]  # 8 x 6 tiles, each exactly once
    # Grouped along the last dimension in threes: the first 3 tile numbers are (0, 0..2), then (1, 0..2).
    order = [t for _, _, t in sorted(taken)]
    assert order[:7] == [(0, 0), (0, 1), (0, 2), (1, 0), (1, 1), (1, 2), (2, 0)]


@pytest.mark.parametrize("group_size", [1, 8, 100])
def test_group_sizes_cover_the_grid(group_size):
    taken = _tiles_taken(persistent_add(blocks=5, group_size=group_size), blocks=5)
    assert sorted(t for _, _, t in taken) == [(x, y) for x in range(8) for y in range(6)]


def test_persistent_compiles():
    src = tilelang.compile(persistent_add(), target="sm_90a").get_kernel_source()
    assert "for (int w = 0; w < 7; ++w)" in src


@pytest.mark.gpu
def test_persistent_kernel_matches_torch():
    import torch

    kernel = tilelang.compile(persistent_add())
    a = torch.randn(1000, 700, device="cuda")
    b = torch.zeros_like(a)
    visits = torch.zeros(8, 6, dtype=torch.int32, device="cuda")
    kernel(a, b, visits)
    torch.testing.assert_close(b, a + 1)
    assert bool((visits == 1).all())

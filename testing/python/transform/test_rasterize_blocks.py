"""T.use_swizzle: block indices remapped panel by panel, as a permutation of the grid."""

import numpy as np
import pytest
import tvm_ffi
from tvm import tirx

import tilelang.language as T
from tilelang.layout.evaluate import evaluate
from tilelang.transform.rasterize_blocks import rasterize_blocks


def _kernel(gx, gy, panel, order="row"):
    @T.prim_func
    def main(A: T.Tensor((1024, 1024), "float32")):
        with T.Kernel(gx, gy, threads=32) as (bx, by):
            T.use_swizzle(panel, order)
            A[by, bx] = 1.0

    return main


def _remapped(func):
    binds = []
    tvm_ffi.structural_walk(func.body, [(tirx.Bind, binds.append)])
    return binds


@pytest.mark.parametrize("gx,gy,panel,order", [(8, 8, 4, "row"), (7, 10, 4, "row"), (10, 7, 3, "column")])
def test_remap_is_a_permutation_of_the_grid(gx, gy, panel, order):
    func = rasterize_blocks(_kernel(gx, gy, panel, order))
    nbx, nby = _remapped(func)
    attrs = {}
    tvm_ffi.structural_walk(func.body, [(tirx.AttrStmt, lambda a: attrs.update({a.node.thread_tag: a.node.var}))])
    bx, by = attrs["blockIdx.x"], attrs["blockIdx.y"]
    gy_idx, gx_idx = np.indices((gy, gx)).reshape(2, -1)
    x = evaluate(nbx.value, {bx: gx_idx, by: gy_idx})
    y = evaluate(nby.value, {bx: gx_idx, by: gy_idx})
    assert len(set(zip(x.tolist(), y.tolist()))) == gx * gy
    assert x.min() == 0 and x.max() == gx - 1 and y.min() == 0 and y.max() == gy - 1
    assert "tl_use_swizzle" not in func.script() and "bx_r" in func.script()


def test_needs_a_two_dimensional_grid():
    @T.prim_func
    def main(A: T.Tensor((1024,), "float32")):
        with T.Kernel(8, threads=32) as bx:
            T.use_swizzle(4)
            A[bx] = 1.0

    with pytest.raises(Exception, match="2-D grid"):
        rasterize_blocks(main)

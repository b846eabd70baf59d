"""stage_fragment_stores: a whole fragment stored to global memory goes through a new shared tile
on sm_90a when the kernel has room for it; otherwise (or switched off, or on other targets) the
store stays direct."""

import os
import re
import sys

import pytest
from tvm import tirx

import tilelang
import tilelang.language as T
from tilelang.codegen import cuda
from tilelang.options import CompileOptions
from tilelang.transform.stage_fragment_stores import stage_fragment_stores
from tilelang.utils.ir import collect
from tilelang.utils.target import determine_target

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "..", "..", "examples", "gemm"))
from example_gemm import matmul  # noqa: E402


def _kernel(rows, cols, target="sm_90a", guarded=False, gemm=True):
    @T.prim_func
    def main(A: T.Tensor((1024, 1024), "float16"), C: T.Tensor((1024, 1024), "float16")):
        with T.Kernel(4, 4, threads=128) as (bx, by):
            a = T.alloc_shared((rows, 64), "float16")
            b = T.alloc_shared((64, cols), "float16")
            acc = T.alloc_fragment((rows, cols), "float32")
            T.copy(A[by * rows, 0], a)
            T.copy(A[0, bx * cols], b)
            if gemm:
                T.gemm(a, b, acc, clear_accum=True)
            else:
                for i, j in T.Parallel(rows, cols):
                    acc[i, j] = b[i % 64, j]
            if guarded:
                if bx < 3:
                    T.copy(acc, C[by * rows, bx * cols])
            else:
                T.copy(acc, C[by * rows, bx * cols])

    return main.with_attr("target", determine_target(target))


def _copies(func):
    return [e.value for e in collect(func.body, tirx.Evaluate) if "tl.copy" in str(getattr(e.value, "op", ""))]


def test_store_goes_through_a_shared_tile_of_the_output_dtype():
    func = stage_fragment_stores(_kernel(64, 128))
    (tile,) = [a.buffer for a in collect(func.body, tirx.AllocBuffer) if a.buffer.name == "acc_staged"]
    assert tile.scope() == "shared.dyn" and str(tile.dtype) == "float16" and [int(n) for n in tile.shape] == [64, 128]
    copies = _copies(func)
    # A -> a, A -> b, acc -> acc_staged, acc_staged -> C
    assert [(c.args[0].source.name, c.args[1].source.name) for c in copies][-2:] == [
        ("acc", "acc_staged"),
        ("acc_staged", "C"),
    ]


@pytest.mark.parametrize("case", ["narrow rows", "switched off", "under a condition", "not a gemm accumulator"])
def test_left_direct(case):
    # (On other targets than sm_90a the pass does not run: test_pass_list.py.)
    func = {
        "narrow rows": _kernel(64, 32),
        "switched off": _kernel(64, 128),
        "under a condition": _kernel(64, 128, guarded=True),
        "not a gemm accumulator": _kernel(64, 128, gemm=False),
    }[case]
    configs = {"tl.disable_fragment_store_staging": True} if case == "switched off" else {}
    out = stage_fragment_stores(func, CompileOptions.from_pass_configs(configs))
    assert not [a for a in collect(out.body, tirx.AllocBuffer) if a.buffer.name.endswith("_staged")]


@pytest.mark.parametrize("stages", [3, 4])
def test_gemm_epilogue_is_staged_in_the_bytes_of_the_pipeline_stages(stages):
    # 128 x 256 tiles: 48 KiB per stage. The fp16 C tile (64 KiB) is used only after the loop, so the
    # shared-memory merge places it over the stage buffers: 4 stages (192 KiB) still fit in 227 KiB.
    func = matmul.factory(4096, 4096, 4096, 128, 256, 64, "float16", "float", 256, stages, 8)
    kernel = tilelang.compile(func, out_idx=[-1], target="sm_90a")
    src = kernel.get_kernel_source()
    stores = re.findall(r"\*\((\w+)\*\)\(C_ptr \+", src)
    assert stores and set(stores) == {"uint4"} and "tl::setmaxnreg_dec" in src  # staged, still warp-specialized
    assert str(stages * 48 * 1024) in kernel.host_source  # the launch's dynamic shared memory: the stages only
    cuda.compile_object(src, kernel.target)

"""TensorCoreIntrinEmitter reading tiles that a pipelined T.copy fills (CPU): what the compiler builds
around the hand-written ldmatrix reads.

On sm_90a the copies become TMA loads into multi-buffered stages, by a producer warpgroup (or by
thread 0 without warp specialization). The TMA unit writes through the async proxy and ldmatrix
reads through the generic one: before a stage is handed back to the loads, each consumer thread
fences its reads (fence.proxy.async). Without it ptxas issued the consumer warp's arrival on the
"empty" barrier right after its ldmatrix instructions, before their results were used, and the next
load into the stage could land under reads still in flight: the H200 computed 70% of a 3-stage fp16
GEMM wrong. wgmma reads through the async proxy and needs no fence.

A tile's T.annotate_layout follows it to its multi-buffered version: the copies write (TMA boxes
with the hardware swizzle, or cp.async) and ldmatrix reads the layout the user asked for.
"""

import re

import numpy as np
import pytest
import tvm
from mma_kernels import gemm
from tvm import tirx

import tilelang
import tilelang.language as T
from tilelang.codegen import cuda
from tilelang.engine import pipeline
from tilelang.layout.evaluate import evaluate, grid
from tilelang.layout.layout import shared_layout_from_ir
from tilelang.options import CompileOptions
from tilelang.transform.infer_layout import ANNOTATED_LAYOUTS
from tilelang.utils.ir import collect
from tilelang.utils.target import determine_target

WS_OFF = {"tl.disable_warp_specialized": True}
FENCE = "tl::fence_proxy_async_shared();"


def _kw8():
    """The GPU case that failed: fp16 -> fp32, T.copy loads in a 3-stage T.Pipelined loop."""
    return gemm(256, 384, 512, "float16", "float32", "float32", tile_copies=True, stages=3)


def _compile(func, arch="sm_90a", configs=None):
    return tilelang.compile(func, out_idx=[-1], target=arch, pass_configs=configs)


def _statements(src):
    return [line.strip() for line in src.splitlines() if line.strip()]


def test_consumer_warps_fence_their_reads_before_freeing_a_stage():
    src = _compile(_kw8()).get_kernel_source()
    assert "tl::tma_load(" in src and "tl::setmaxnreg_inc<240>()" in src  # TMA loads, a producer warpgroup
    lines = _statements(src)
    arrivals = [j for j, line in enumerate(lines) if line.startswith("tl::mbarrier_arrive_warp(")]
    assert len(arrivals) == 1
    # The fence comes after the loop body's last ldmatrix / mma.sync and right before the arrival.
    assert lines[arrivals[0] - 1] == FENCE
    assert src.count(FENCE) == 1
    # The consumers keep thread indices 0..127, those the emitter's warp ids were computed from.
    assert "if (((int)threadIdx.x) < 128) {" in src


def test_without_warp_specialization_the_fence_comes_before_the_block_barrier():
    src = _compile(_kw8(), configs=WS_OFF).get_kernel_source()
    assert "tl::tma_load(" in src and "mbarrier_arrive_warp" not in src
    loop = _statements(src[src.index("for (int i = 0; i < 16; ++i) {") :])
    # Thread 0 loads into the stage the previous iteration read once every thread passed the barrier.
    assert loop[1:4] == [FENCE, "__syncthreads();", "if ((((int)threadIdx.x) == 0) && (i < 14)) {"]


def _tgemm(bk=32):
    M = N = K = 512
    bm, bn = 128, 128

    @T.prim_func
    def main(A: T.Tensor((M, K), "float16"), B: T.Tensor((N, K), "float16"), C: T.Tensor((M, N), "float32")):
        with T.Kernel(N // bn, M // bm, threads=128) as (bx, by):
            A_s = T.alloc_shared((bm, bk), "float16")
            B_s = T.alloc_shared((bn, bk), "float16")
            C_l = T.alloc_fragment((bm, bn), "float32")
            T.clear(C_l)
            for ko in T.Pipelined(K // bk, num_stages=3):
                T.copy(A[by * bm, ko * bk], A_s)
                T.copy(B[bx * bn, ko * bk], B_s)
                T.gemm(A_s, B_s, C_l, transpose_B=True)
            T.copy(C_l, C[by * bm, bx * bn])

    return main


def test_wgmma_consumers_need_no_fence_and_mma_sync_ones_get_it():
    src = _compile(_tgemm()).get_kernel_source()
    assert "tl::wgmma" in src and "tl::mbarrier_arrive_warp(" in src and FENCE not in src
    # T.gemm on mma.sync reads its operands with ldmatrix too (gemm_mma.h).
    src = _compile(_tgemm(), configs={"tl.disable_wgmma": True}).get_kernel_source()
    assert "tl::wgmma" not in src and "tl::tma_load(" in src
    lines = _statements(src)
    j = next(j for j, line in enumerate(lines) if line.startswith("tl::mbarrier_arrive_warp("))
    assert lines[j - 1] == FENCE


# ---- the annotated layout follows the tile to its stages ---------------------------------------------


def _after(func, arch, last):
    """`func` after the tile pass `last` of the pipeline for `arch`."""
    target = determine_target(arch)
    mod = tirx.transform.BindTarget(target)(tvm.IRModule({"main": func.with_attr("global_symbol", "main")}))
    f = mod["main"]
    for name, p in pipeline._tile_passes(CompileOptions(), target):
        f = p(f)
        if name == last:
            return f
    raise AssertionError(f"no pass {last}")


@pytest.mark.parametrize("arch,last", [("sm_80", "inject_cp_async_pipelines"), ("sm_90a", "inject_tma_pipelines")])
def test_annotated_layout_moves_to_the_multi_buffered_tile(arch, last):
    func = _kw8()
    (before,) = [v for b, v in func.attrs[ANNOTATED_LAYOUTS].items() if b.name == "A_s"]
    tile = shared_layout_from_ir(before)
    f = _after(func, arch, last)
    layouts = {b.name: (b, v) for b, v in f.attrs[ANNOTATED_LAYOUTS].items()}
    assert sorted(layouts) == ["A_s", "B_s"]
    buf, value = layouts["A_s"]
    staged = shared_layout_from_ir(value)
    # The annotation is on the buffer the loop uses now (3 stages), not the one it replaced.
    assert [int(n) for n in buf.shape] == [3, 64, 32] and tuple(staged.shape) == (3, 64, 32)
    assert any(a.buffer.same_as(buf) for a in collect(f.body, tirx.AllocBuffer))
    assert staged.physical_size == 3 * tile.physical_size and staged.is_bijective()
    got = evaluate(staged.forward, dict(zip(staged.vars, grid(staged.shape))))
    one = evaluate(tile.forward, dict(zip(tile.vars, grid(tile.shape))))
    want = np.concatenate([s * tile.physical_size + one.reshape(-1) for s in range(3)])
    np.testing.assert_array_equal(got.reshape(-1), want)


def _xor_chunk(address):
    """Whether a shared address picks its 16-byte chunk through an XOR (the swizzle)."""
    return "^" in address


def test_tma_writes_and_ldmatrix_reads_the_annotated_swizzle():
    k = _compile(_kw8())
    src = k.get_kernel_source()
    loads = re.findall(r"tl::ldmatrix<4, false>\(.*", src)
    assert len(loads) == 4 and all(_xor_chunk(line) for line in loads)
    # make_mma_swizzle_layout of a tile with 64-byte rows is the TMA unit's 64-byte swizzle.
    encodes = [line for line in k.get_host_source().splitlines() if "tensor_map_encode_tiled(" in line]
    assert len(encodes) == 2 and all("static_cast<CUtensorMapSwizzle>(2)" in line for line in encodes)


def test_cp_async_writes_the_annotated_swizzle():
    src = _compile(_kw8(), arch="sm_80").get_kernel_source()
    stores = re.findall(r"tl::cp_async<16>\(\(&\(\(\(half\*\)buf_dyn_shmem_ptr\)\[(.*?)\]\)\)", src)
    loads = re.findall(r"tl::ldmatrix<4, false>\(.*", src)
    assert stores and all(_xor_chunk(a) for a in stores)
    assert len(loads) == 4 and all(_xor_chunk(line) for line in loads)


@pytest.mark.parametrize("arch,configs", [("sm_90a", None), ("sm_90a", WS_OFF), ("sm_80", None)])
def test_nvcc_compiles(arch, configs):
    k = _compile(_kw8(), arch=arch, configs=configs)
    cuda.compile_object(k.get_kernel_source(), k.target)

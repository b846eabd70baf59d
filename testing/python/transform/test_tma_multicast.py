"""2-block clusters with TMA multicast (`tl.enable_tma_multicast`, sm_90a): which loops get them,
the loads each block issues, the barrier counts, the block remap that keeps pairs together, and nvcc
compiling the result (pipeline_tma_checks.cluster_plan, pipeline_tma, rasterize_blocks)."""

import itertools
import os
import re
import sys

import numpy as np
import pytest
from tvm import tirx

import tilelang
from tilelang.codegen import cuda
from tilelang.layout.evaluate import evaluate
from tilelang.transform.rasterize_blocks import _remap_grid

_EXAMPLES = os.path.join(os.path.dirname(__file__), "..", "..", "..", "examples")
for sub in ("gemm", "flash_attention", "deepseek_mla"):
    sys.path.insert(0, os.path.join(_EXAMPLES, sub))
import example_gemm  # noqa: E402
import example_mha_fwd_bshd  # noqa: E402
import example_mla_decode  # noqa: E402

ON = {"tl.enable_tma_multicast": True}


def _source(func, out_idx, configs):
    return tilelang.compile(func, out_idx=out_idx, target="sm_90a", pass_configs=configs)


def _count(src, pattern):
    return len(re.findall(pattern, src))


def test_gemm_blocks_of_one_column_share_the_b_tile():
    func = example_gemm.matmul.factory(1024, 1024, 1024, 128, 256, 64, "float16", "float", 256, 4, 8)
    kernel = _source(func, [-1], ON)
    src = kernel.get_kernel_source()
    # Blocks (bx, 2c) and (bx, 2c + 1) read the same B tile: a cluster along y.
    assert "__cluster_dims__(1, 2, 1)" in src
    # A (128 x 64, one box) per block; B (64 x 256, four 64-column boxes): two boxes each, to both.
    assert _count(src, r"tl::tma_load\(A_tma") == 1 and _count(src, r"tl::tma_load\(B_tma") == 0
    assert _count(src, r"tl::tma_load_multicast\(B_tma") == 2 and "tl::cluster_rank() * 128" in src
    # Each block still expects the whole B tile on its own barrier.
    assert "(uint)32768" in src
    # A stage is free once the 8 consumer warps of both blocks are done; they arrive on both.
    assert _count(src, r"tl::mbarrier_init\(\(&\(k_empty_ptr\[\d\]\)\), 16\)") == 4
    assert "tl::mbarrier_arrive_cluster_warp" in src and "tl::mbarrier_arrive_warp" not in src
    # Cluster barriers after the barriers' initialization and before the blocks exit.
    assert src.count("tl::cluster_sync();") == 2 and src.rstrip().endswith("tl::cluster_sync();\n}")
    cuda.compile_object(src, kernel.target)


def test_off_by_default():
    func = example_gemm.matmul.factory(1024, 1024, 1024, 128, 256, 64, "float16", "float", 256, 4, 8)
    src = _source(func, [-1], {}).get_kernel_source()
    assert "cluster" not in src and "multicast" not in src


@pytest.mark.parametrize("causal", [False, True])
def test_flash_attention_pairs_query_blocks_unless_their_loops_differ(causal):
    func = example_mha_fwd_bshd.flashattn.factory(2, 4, 512, 128, causal, 128, 128, 2, 256)
    src = _source(func, [3], {**ON, "tl.enable_fast_math": True}).get_kernel_source()
    if causal:  # the loop's length depends on the query block: the two blocks would not agree
        assert "cluster" not in src
    else:  # K and V do not depend on the query block (bx): pairs along x share both
        assert "__cluster_dims__(2, 1, 1)" in src
        assert _count(src, r"tl::tma_load_multicast\(K_tma") == 1 and _count(src, r"tl::tma_load_multicast\(V_tma") == 1


def test_mla_head_blocks_share_the_latent_kv_tile():
    func = example_mla_decode.mla_decode.factory(2, 128, 1, 1024, 512, 64, 64, 64, 1, "float16")
    kernel = _source(func, [6], ON)
    src = kernel.get_kernel_source()
    # The KV head is hid // 2, the same for head blocks 2c and 2c + 1.
    assert "__cluster_dims__(2, 1, 1)" in src
    assert _count(src, r"tl::tma_load_multicast\(KV_tma") == 4  # 8 boxes of 64 columns, 4 per block
    assert _count(src, r"tl::tma_load\(K_pe_tma") == 1  # one box: not split, each block loads its own
    cuda.compile_object(src, kernel.target)


@pytest.mark.parametrize("cluster,order", list(itertools.product([0, 1], [0, 1])))
def test_block_remap_keeps_the_pairs_together(cluster, order):
    gx, gy, panel = 6, 8, 4
    bx, by = tirx.Var("bx", "int32"), tirx.Var("by", "int32")
    nbx, nby = _remap_grid(bx, by, tirx.const(gx, "int32"), tirx.const(gy, "int32"), panel, order, cluster)
    ys, xs = np.indices((gy, gx))
    x = np.asarray(evaluate(nbx, {bx: xs, by: ys}))
    y = np.asarray(evaluate(nby, {bx: xs, by: ys}))
    assert len(set(zip(x.ravel().tolist(), y.ravel().tolist()))) == gx * gy  # a permutation of the grid
    if cluster == 1:  # blocks (bx, 2c), (bx, 2c + 1): same new bx, new by one apart
        assert (x[0::2] == x[1::2]).all() and (y[1::2] == y[0::2] + 1).all()
    else:
        assert (y[:, 0::2] == y[:, 1::2]).all() and (x[:, 1::2] == x[:, 0::2] + 1).all()

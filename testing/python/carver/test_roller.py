"""tilelang.carver.roller: launch orders, the Hint record, and the tensor-core GEMM tile ranking on
described devices (CUDA.from_arch: no GPU)."""

import math

import pytest

from tilelang.carver.arch import CUDA
from tilelang.carver.roller import Hint, matmul_hints
from tilelang.carver.roller.rasterization import NoRasterization, Rasterization2DColumn, Rasterization2DRow
from tilelang.errors import UserError

H100 = CUDA.from_arch("sm_90a", sm_count=132)


def _hints(M, N, K, arch=H100, in_dtype="float16", topk=20, accum_dtype="float32", out_dtype="float16"):
    return matmul_hints(M, N, K, in_dtype, accum_dtype, out_dtype, arch, topk=topk)


def _smem(hint, in_bytes=2, out_bytes=2):
    (bm, bn), (bk,) = hint.block, hint.rstep
    return max(hint.pipeline_stage * (bm + bn) * bk * in_bytes, bm * bn * out_bytes)


def test_rasterization_plans_name_their_swizzle():
    assert Rasterization2DRow(11).swizzle_args() == {"panel_size": 11, "order": "row", "enable": True}
    assert Rasterization2DColumn(4).swizzle_args() == {"panel_size": 4, "order": "column", "enable": True}
    assert NoRasterization().swizzle_args()["enable"] is False
    assert repr(Rasterization2DRow(8)) == "Rasterization2DRow(8)" and repr(NoRasterization()) == "NoRasterization()"
    assert Rasterization2DRow(8) == Rasterization2DRow(8) != Rasterization2DColumn(8)
    # raised at the call: the traceback shows the user's line
    with pytest.raises(UserError, match="panel_width must be a positive int, got 0"):
        Rasterization2DRow(0)


def test_hint_record():
    hint = Hint()
    assert hint.pipeline_stage == 1 and isinstance(hint.rasterization_plan, NoRasterization)
    hint = Hint(block=[128, 256], warp=[64, 64], rstep=[64], pipeline_stage=3, use_async=True)
    assert hint.threads == 256
    assert repr(hint) == "Hint(block=128x256, warp=64x64, block_k=64, stages=3, threads=256, async, NoRasterization())"
    assert Hint.from_dict(hint.to_dict()) == hint


def test_hints_are_distinct_fit_and_split_into_warps():
    hints = _hints(8192, 8192, 8192)
    assert len(hints) == 20
    keys = {(tuple(h.block), tuple(h.warp), tuple(h.rstep), h.pipeline_stage) for h in hints}
    assert len(keys) == len(hints)
    for h in hints:
        assert _smem(h) <= H100.smem_optin_cap == 227 * 1024
        (bm, bn), (wm, wn) = h.block, h.warp
        assert bm % wm == 0 and bn % wn == 0 and h.threads in (128, 256)
        assert bm * bn // h.threads <= 128  # float32 accumulators a thread holds
        assert h.rstep[0] in (32, 64) and 2 <= h.pipeline_stage <= 4 and h.use_async


def test_topk_is_respected():
    assert len(_hints(4096, 4096, 4096, topk=3)) == 3
    assert _hints(4096, 4096, 4096, topk=3) == _hints(4096, 4096, 4096, topk=20)[:3]
    # raised at the call: the traceback shows the user's line
    with pytest.raises(UserError, match="topk must be a positive int, got 0"):
        _hints(4096, 4096, 4096, topk=0)


def test_large_problem_gets_a_large_tile_first():
    best = _hints(8192, 8192, 8192)[0]
    assert best.block in ([128, 256], [128, 128])
    assert isinstance(best.rasterization_plan, Rasterization2DRow)  # 2048 tiles: many waves
    assert best.rasterization_plan.panel_width == math.isqrt(132)


def test_small_problem_does_not_get_wide_tiles_first():
    hints = _hints(256, 256, 1024)
    assert max(hints[0].block) < 256
    assert all(isinstance(h.rasterization_plan, NoRasterization) for h in hints)  # one wave
    # A tile larger than the problem pays for its padding: 64 rows for 16 rows of output.
    assert _hints(16, 4096, 4096)[0].block[0] == 64


def test_short_k_limits_block_k_and_stages():
    hints = _hints(4096, 4096, 32)
    assert {h.rstep[0] for h in hints} == {32} and {h.pipeline_stage for h in hints} == {2}


@pytest.mark.parametrize("arch, limit_kb", [("sm_80", 163), ("sm_89", 99), ("sm_90a", 227)])
def test_shared_memory_limit_is_the_arch_opt_in_limit(arch, limit_kb):
    device = CUDA.from_arch(arch, sm_count=108)
    assert device.smem_optin_cap == limit_kb * 1024
    hints = _hints(8192, 8192, 8192, arch=device, topk=1000)
    assert all(_smem(h) <= limit_kb * 1024 for h in hints)
    assert all(h.block != [256, 256] for h in hints)  # 256 float32 accumulators a thread: too many


def test_block_k_rows_are_64_or_128_bytes():
    fp8 = _hints(8192, 8192, 8192, arch=CUDA.from_arch("sm_89", sm_count=128), in_dtype="float8_e4m3", topk=1000)
    assert {h.rstep[0] for h in fp8} == {64, 128}
    assert all(_smem(h, in_bytes=1) <= 99 * 1024 for h in fp8)
    assert fp8[0].pipeline_stage >= 3  # a deeper pipeline before a wider K row
    fp32 = _hints(8192, 8192, 8192, in_dtype="float32", topk=1000)
    assert {h.rstep[0] for h in fp32} == {16, 32}

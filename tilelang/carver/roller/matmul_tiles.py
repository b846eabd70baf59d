"""Rank tensor-core GEMM tiles on a CUDA device: the heuristic behind `MatmulTemplate.recommend_hints`.

For C[M, N] = A[M, K] @ B[N, K]^T the candidates are every combination of
  - block_m, block_n in {64, 128, 256};
  - block_k whose row is 64 or 128 bytes of the input dtype (32 or 64 for float16): the widths the
    shared-memory swizzles cover, and a whole number of mma/wgmma K steps;
  - 4 or 8 warps (128 or 256 threads), split over the tile as T.gemm splits them
    (`op/gemm/policy.warp_partition`, square policy), so the hint's warp tile is the one that runs;
  - 2 to 4 pipeline stages,
kept when they fit the device:
  - shared memory: stages * (block_m + block_n) * block_k * bytes, or the output tile staged
    through shared memory after the loop if larger, within the block's opt-in limit
    (`arch.smem_optin_cap`: 227 KB on sm_90, 163 KB on sm_80, 99 KB on sm_89), less 1 KB for
    barriers and alignment;
  - registers: the float32 accumulators take at most 128 of the 255 registers a thread may hold
    (the rest hold A/B fragments and addresses), so 128 x 256 needs 8 warps and 256 x 256 is out;
  - block_k no longer than K (but the shortest is kept), stages no more than the K steps (but 2).

They are ranked by an estimate of the time, fastest first:
  waves = ceil(tiles / SMs), tiles = ceil(M / block_m) * ceil(N / block_n): the busiest SM computes
          `waves` tiles of block_m * block_n * K multiply-adds, however many blocks share it;
  intensity = block_m * block_n / (block_m + block_n): multiply-adds per element loaded. Below
          `_INTENSITY_NEEDED` (about the SM's tensor-core rate over its share of L2 bandwidth:
          96 on sm_90, 64 before) the loads, not the tensor cores, bound the tile;
  estimate = waves * block_m * block_n / min(1, intensity / needed).
Padding is in the estimate: a tile larger than the problem costs its full size. Ties go to the
higher intensity, then to wider-than-tall tiles (wgmma's N reaches 256 while its M is 64 per
warpgroup), then to warp tiles near 64 x 64 (128 accumulators a thread), then to pipelines of 3 or
more stages (a load in flight beyond the one being consumed), then to 128-byte K rows, then to 3
stages over 4 (the fourth rarely hides more latency and takes shared memory), then 2.

The launch order: grids of more than one wave get `Rasterization2DRow` with panels of about
sqrt(SMs) block-rows, so that each wave covers a near-square patch of the output; a grid that runs
in one wave keeps launch order (`NoRasterization`).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import tvm

from tilelang.carver.roller.hint import Hint
from tilelang.carver.roller.rasterization import NoRasterization, Rasterization2DRow
from tilelang.errors import UserError
from tilelang.op.gemm.policy import GemmWarpPolicy, warp_partition

__all__ = ["matmul_hints"]

BLOCK_SIZES = (64, 128, 256)
K_ROW_BYTES = (64, 128)
WARPS = (4, 8)
STAGES = (3, 4, 2)  # in order of preference
_MAX_ACCUMULATOR_REGISTERS = 128
_RESERVED_SMEM = 1024  # mbarriers and alignment of the merged shared block


def _intensity_needed(sm_version: int) -> int:
    return 96 if sm_version >= 90 else 64


@dataclass(frozen=True)
class _Candidate:
    block_m: int
    block_n: int
    block_k: int
    warps: int
    stages: int


def _bits(dtype) -> int:
    return tvm.DataType(str(dtype)).bits


def _block_ks(K: int, in_bits: int) -> list[int]:
    ks = [row * 8 // in_bits for row in K_ROW_BYTES]
    return [k for k in ks if k <= K] or ks[:1]


def _candidates(M, N, K, in_bits, accum_bits, out_bits, smem_limit):
    for bm in BLOCK_SIZES:
        for bn in BLOCK_SIZES:
            for warps in WARPS:
                if bm * bn * accum_bits // 32 // (32 * warps) > _MAX_ACCUMULATOR_REGISTERS:
                    continue
                for bk in _block_ks(K, in_bits):
                    k_steps = math.ceil(K / bk)
                    for stages in STAGES:
                        if stages > max(2, k_steps):
                            continue
                        pipeline = stages * (bm + bn) * bk * in_bits // 8
                        if max(pipeline, bm * bn * out_bits // 8) <= smem_limit:
                            yield _Candidate(bm, bn, bk, warps, stages)


def _estimate(c: _Candidate, M, N, sms, needed):
    tiles = math.ceil(M / c.block_m) * math.ceil(N / c.block_n)
    intensity = c.block_m * c.block_n / (c.block_m + c.block_n)
    time = math.ceil(tiles / sms) * c.block_m * c.block_n / min(1.0, intensity / needed)
    return time, intensity


def _warp_tile(c: _Candidate) -> tuple[int, int]:
    rows, cols = warp_partition(c.block_m, c.block_n, c.warps, GemmWarpPolicy.Square)
    return c.block_m // rows, c.block_n // cols


def _rank_key(c: _Candidate, M, N, sms, needed, in_bits):
    time, intensity = _estimate(c, M, N, sms, needed)
    warp_m, warp_n = _warp_tile(c)
    return (
        time,
        -intensity,
        c.block_m > c.block_n,
        abs(math.log2(warp_m * warp_n / 4096)),
        c.stages < 3,
        c.block_k * in_bits != 128 * 8,
        STAGES.index(c.stages),
    )


def _rasterization(c: _Candidate, M, N, sms):
    grid_m, grid_n = math.ceil(M / c.block_m), math.ceil(N / c.block_n)
    if grid_m * grid_n <= sms or grid_m == 1:
        return NoRasterization()
    return Rasterization2DRow(min(grid_m, max(2, math.isqrt(sms))))


def matmul_hints(M, N, K, in_dtype, accum_dtype, out_dtype, arch, topk: int = 10) -> list[Hint]:
    """The `topk` best tensor-core tiles for C[M, N] = A[M, K] @ B[N, K]^T on `arch` (a CUDA
    description), best first (see the module docstring for the rules).

    Raises: UserError when topk is not a positive int or no tile fits the device."""
    if not isinstance(topk, int) or topk <= 0:
        raise UserError(f"recommend_hints: topk must be a positive int, got {topk!r}")
    in_bits, accum_bits, out_bits = _bits(in_dtype), _bits(accum_dtype), _bits(out_dtype)
    sms, needed = arch.compute_max_core, _intensity_needed(arch.sm_version)
    smem_limit = (arch.smem_optin_cap or arch.smem_cap) - _RESERVED_SMEM
    found = list(_candidates(M, N, K, in_bits, accum_bits, out_bits, smem_limit))
    if not found:
        raise UserError(
            f"recommend_hints: no {in_dtype} GEMM tile of 64 or more rows fits the {smem_limit // 1024} KB of "
            f"shared memory of {arch.name}"
        )
    found.sort(key=lambda c: _rank_key(c, M, N, sms, needed, in_bits))
    return [
        Hint(
            block=[c.block_m, c.block_n],
            warp=list(_warp_tile(c)),
            rstep=[c.block_k],
            pipeline_stage=c.stages,
            use_async=arch.sm_version >= 80,  # cp.async from sm_80, TMA on sm_90
            rasterization_plan=_rasterization(c, M, N, sms),
        )
        for c in found[:topk]
    ]

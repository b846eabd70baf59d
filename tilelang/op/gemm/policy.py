"""How the warps of a block share a gemm's M x N output: `T.GemmWarpPolicy` and the warp partition
that mma.sync uses (wgmma partitions by warpgroup in `wgmma.plan`, reading the same policy)."""

from __future__ import annotations

import enum

from tilelang.errors import at_span


class GemmWarpPolicy(enum.IntEnum):
    """How the warps of a block tile the M x N output."""

    Square = 0  # as square a warp tile as the shape allows
    FullRow = 1  # all warps along M (each warp owns whole rows)
    FullCol = 2  # all warps along N (each warp owns whole columns)


def warp_partition(M: int, N: int, num_warps: int, policy: GemmWarpPolicy, span=None) -> tuple[int, int]:
    """(WarpM, WarpN) with WarpM * WarpN = num_warps, each warp tile a whole number of 16 x 8 atoms."""
    candidates = [(wm, num_warps // wm) for wm in range(1, num_warps + 1) if num_warps % wm == 0]
    fits = [(wm, wn) for wm, wn in candidates if M % (16 * wm) == 0 and N % (8 * wn) == 0]
    if not fits:
        raise at_span(
            f"T.gemm: {num_warps} warps cannot tile a {M} x {N} output in 16 x 8 mma atoms; use M a "
            f"multiple of 16 and N a multiple of 8 (with enough rows/columns for the warps)",
            span,
        )
    if policy == GemmWarpPolicy.FullRow:  # as many warps along M as fit
        return max(fits, key=lambda f: f[0])
    if policy == GemmWarpPolicy.FullCol:
        return max(fits, key=lambda f: f[1])
    return min(fits, key=lambda f: (abs(M / f[0] - N / f[1]), -f[0]))

"""Rasterization plans: the order in which a GEMM's blocks are launched, as a hint carries it.

Blocks launch in order of their linear id. In plain row-major order, the blocks running together
cover a few rows of the output grid and all of its columns, so they read few A tiles but every B
tile, and L2 holds little of what the next wave reads. A 2-D rasterization cuts the grid into panels
of `panel_width` block-rows (or block-columns) and walks each panel across: a wave then covers a
near-square patch and re-reads tiles that are still in L2. A kernel applies a plan with
`T.use_swizzle(**plan.swizzle_args())` (`transform/rasterize_blocks.py` does the remapping).

    from tilelang.carver.roller.rasterization import NoRasterization, Rasterization2DRow
    Rasterization2DRow(11).swizzle_args()   # {'panel_size': 11, 'order': 'row', 'enable': True}
    NoRasterization().swizzle_args()        # {'panel_size': 1, 'order': 'row', 'enable': False}
"""

from __future__ import annotations

from dataclasses import dataclass

from tilelang.errors import UserError

__all__ = ["NoRasterization", "Rasterization", "Rasterization2DColumn", "Rasterization2DRow"]


class Rasterization:
    """A launch order of a kernel's blocks. `panel_width` is 0 for launch order itself."""

    panel_width: int = 0
    order: str = "row"

    def swizzle_args(self) -> dict:
        """Keyword arguments of `T.use_swizzle` that launch the blocks in this order."""
        return {"panel_size": max(self.panel_width, 1), "order": self.order, "enable": self.panel_width > 0}


@dataclass(frozen=True)
class NoRasterization(Rasterization):
    """Blocks in launch order: for grids that run in one wave, where the order changes nothing."""

    def __repr__(self) -> str:
        return "NoRasterization()"


@dataclass(frozen=True)
class _Panels(Rasterization):
    panel_width: int = 4

    def __post_init__(self):
        if not isinstance(self.panel_width, int) or self.panel_width <= 0:
            raise UserError(f"{type(self).__name__}: panel_width must be a positive int, got {self.panel_width!r}")

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self.panel_width})"


@dataclass(frozen=True, repr=False)
class Rasterization2DRow(_Panels):
    """Panels of `panel_width` block-rows; inside a panel, blocks walk down a column, then right."""

    order = "row"


@dataclass(frozen=True, repr=False)
class Rasterization2DColumn(_Panels):
    """Panels of `panel_width` block-columns; inside a panel, blocks walk along a row, then down."""

    order = "column"

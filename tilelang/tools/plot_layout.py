"""`plot_layout`: draw a `Fragment` (which thread holds each element, in which register) or a
`Layout` (where each element sits in memory) as a grid, to pdf/png/svg files, as the public
TileLang's `tilelang.tools.plot_layout` does.

    from tilelang.layout import Fragment, make_swizzled_layout
    from tilelang.tools import plot_layout
    plot_layout(fragment, name="acc")                           # ./tmp/acc.pdf
    plot_layout(layout, save_directory="out", formats="png,svg", view="output")

A fragment's cell shows "T<thread>" (every holder, "/"-separated, when the fragment is replicated)
and "L<register>", coloured by its first holder (the 32 lanes of the first warp in distinct hues).
A layout's cell shows, in the input view, the element's physical offset, coloured by the column
of memory it lands in, and, in the output view (the grid is physical memory, rows as long as the
tile's last dimension), the logical index stored there, coloured by its logical column: either way
a swizzle shows as a permutation of colours from row to row.
Tiles of more than two dimensions are drawn with their leading dimensions folded into rows.

matplotlib is optional (`pip install matplotlib`); without it the call raises a UserError.
"""

from __future__ import annotations

import math
import os

import numpy as np

from tilelang.errors import UserError
from tilelang.layout.evaluate import evaluate, grid
from tilelang.layout.fragment import Fragment
from tilelang.layout.layout import Layout

_FORMATS = ("pdf", "png", "svg")


def plot_layout(
    layout,
    save_directory: str = "./tmp",
    name: str = "layout",
    colormap: str | None = None,
    verbose: bool = False,
    formats: str | list[str] = "pdf",
    view: str = "input",
    grid_shape: tuple[int, int] | None = None,
) -> list[str]:
    """Draw `layout` (a Fragment or a Layout) to `save_directory/name.<format>`.

    Args:
        colormap: a matplotlib colormap name (default "RdPu" for a fragment, "Spectral" for a layout).
        verbose: print each element's mapping.
        formats: "pdf", "png", "svg", "all", a comma-separated list of them, or a list.
        view: for a Layout: "input" (the grid is the tile) or "output" (the grid is memory).
        grid_shape: for a Layout's input view: (rows, cols) to fold the tile into.

    Returns the paths written. Raises: UserError for another kind of object, an unknown format or
    view, a grid_shape that does not hold the tile, or matplotlib missing.
    """
    wanted = _parse_formats(formats)
    if isinstance(layout, Fragment):
        rows, cols, labels, colors = _fragment_cells(layout, verbose)
        colormap = colormap or "RdPu"
    elif isinstance(layout, Layout):
        rows, cols, labels, colors = _layout_cells(layout, view, grid_shape, verbose)
        colormap = colormap or "Spectral"
    else:
        raise UserError(f"plot_layout: expected a Fragment or a Layout, got {type(layout).__name__}")
    fig = _draw(rows, cols, labels, colors, colormap, isinstance(layout, Fragment))
    os.makedirs(save_directory, exist_ok=True)
    paths = []
    for fmt in wanted:
        path = os.path.join(save_directory, f"{name}.{fmt}")
        fig.savefig(path, bbox_inches="tight", format=fmt, **({"dpi": 150} if fmt == "png" else {}))
        paths.append(path)
    return paths


def _parse_formats(formats) -> list[str]:
    if isinstance(formats, str):
        text = formats.strip().lower()
        items = list(_FORMATS) if text == "all" else [f.strip() for f in text.split(",")]
    elif isinstance(formats, (list, tuple)):
        items = [str(f).strip().lower() for f in formats]
    else:
        raise UserError(f"plot_layout: formats must be a string or a list of strings, got {formats!r}")
    unknown = [f for f in items if f not in _FORMATS]
    if unknown or not items:
        raise UserError(f"plot_layout: unknown format(s) {unknown}; use {', '.join(_FORMATS)} or 'all'")
    return list(dict.fromkeys(items))


def _rows_cols(shape) -> tuple[int, int]:
    """The 2-D grid a tile is drawn as: the last dimension across, the others folded into rows."""
    shape = [int(s) for s in shape]
    return (math.prod(shape[:-1]), shape[-1]) if shape else (1, 1)


def _fragment_cells(frag: Fragment, verbose: bool):
    rows, cols = _rows_cols(frag.shape)
    points = grid(frag.shape)
    holders = frag.holder_threads(points)  # [replicate, elements]
    index = evaluate(frag.index, dict(zip(frag.vars, points))).reshape(-1)
    labels = []
    for k in range(rows * cols):
        threads = "/".join(str(int(t)) for t in holders[:, k])
        labels.append((f"T{threads}", f"L{int(index[k])}"))
        if verbose:
            print(f"{[int(p[k]) for p in points]} -> threads {threads}, register {int(index[k])}")
    return rows, cols, labels, holders[0].astype(np.int64)


def _layout_cells(layout: Layout, view: str, grid_shape, verbose: bool):
    points = grid(layout.shape)
    offsets = evaluate(layout.forward, dict(zip(layout.vars, points))).reshape(-1)
    view = (view or "input").strip().lower()
    if view == "input":
        rows, cols = _rows_cols(layout.shape)
        if grid_shape is not None:
            rows, cols = (int(x) for x in grid_shape)
            if rows * cols != offsets.size:
                raise UserError(f"plot_layout: grid_shape {grid_shape} does not hold the {offsets.size} elements")
        labels = [(str(int(o)), "") for o in offsets]
        colors = offsets % _rows_cols(layout.shape)[1]
    elif view == "output":
        cols = _rows_cols(layout.shape)[1]
        rows = -(-int(layout.physical_size) // cols)
        labels = [("", "")] * (rows * cols)
        colors = np.full(rows * cols, -1, dtype=np.int64)  # -1: no element stored there (padding)
        for k, off in enumerate(offsets):
            labels[int(off)] = (str(tuple(int(p[k]) for p in points)), "")
            colors[int(off)] = k % cols
    else:
        raise UserError(f"plot_layout: view must be 'input' or 'output', got {view!r}")
    if verbose:
        for k, off in enumerate(offsets):
            print(f"{[int(p[k]) for p in points]} -> {int(off)}")
    return rows, cols, labels, colors


def _draw(rows: int, cols: int, labels, colors, colormap: str, by_thread: bool):
    try:
        from matplotlib import colormaps
        from matplotlib.figure import Figure
        from matplotlib.patches import Rectangle
    except ImportError:
        raise UserError("plot_layout needs matplotlib, which is not installed: pip install matplotlib") from None
    top = max(int(colors.max()) + 1, 1)
    cmap = colormaps[colormap].resampled(max(2 * top, 2))
    warp_hues = colormaps["hsv"].resampled(32 * 6)  # the first warp's lanes told apart at a glance
    cell = max(0.35, min(1.0, 24.0 / max(rows, cols)))
    fig = Figure(figsize=(cell * cols + 1.5, cell * rows + 1.0))
    ax = fig.add_subplot()
    font = 9 * cell
    for k, (top_text, bottom_text) in enumerate(labels):
        i, j = divmod(k, cols)
        c = int(colors[k])
        face = "white" if c < 0 else (warp_hues(c * 6) if by_thread and c < 32 else cmap(c))
        ax.add_patch(Rectangle((j, i), 1, 1, facecolor=face, edgecolor="black", linewidth=0.4))
        if bottom_text:
            ax.text(j + 0.5, i + 0.32, top_text, ha="center", va="center", fontsize=font * min(1, 4 / len(top_text)))
            ax.text(j + 0.5, i + 0.72, bottom_text, ha="center", va="center", fontsize=font)
        elif top_text:
            ax.text(j + 0.5, i + 0.5, top_text, ha="center", va="center", fontsize=font * min(1, 5 / len(top_text)))
    ax.set_xlim(0, cols)
    ax.set_ylim(rows, 0)
    ax.set_xticks([j + 0.5 for j in range(cols)], [str(j) for j in range(cols)], fontsize=font)
    ax.set_yticks([i + 0.5 for i in range(rows)], [str(i) for i in range(rows)], fontsize=font)
    ax.xaxis.tick_top()
    ax.set_aspect("equal")
    if by_thread:
        ax.set_title("T: thread, L: register index", fontsize=font * 1.2, pad=18)
    return fig

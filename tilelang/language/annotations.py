"""Kernel annotations: `T.annotate_layout` (pin a buffer's layout) and `T.use_swizzle` (block order).

`T.annotate_layout` records the layouts while the kernel is traced; `prim_func` stores them as the
function attribute `tl.annotated_layouts`, which layout inference reads at its strict level.
`T.use_swizzle` emits a `tl.use_swizzle` call that the `rasterize_blocks` pass turns into a
remapping of the block indices.
"""

from __future__ import annotations

import math

from tvm import tirx

from tilelang.errors import UserError

# {buffer var: layout object} recorded by T.annotate_layout during the current parse.
annotated_layouts: dict = {}


def annotate_layout(layout_map: dict):
    """Pin the layout of shared tiles (a `Layout`, e.g. a swizzle) or fragments (a `Fragment`).

    A value may also be a function of the buffer returning a layout.

    Example:
        T.annotate_layout({S_shared: tilelang.layout.make_swizzled_layout(S_shared)})
    """
    from tilelang.layout.fragment import Fragment
    from tilelang.layout.layout import Layout

    for buffer, layout in layout_map.items():
        if callable(layout) and not isinstance(layout, (Layout, Fragment)):
            layout = layout(buffer)
        if not all(isinstance(s, tirx.IntImm) for s in buffer.shape):
            raise UserError(
                f"T.annotate_layout: '{buffer.name}' has a dynamic shape {list(buffer.shape)}; a layout is "
                f"for a buffer of constant shape"
            )
        shape = tuple(int(s) for s in buffer.shape)
        if not isinstance(layout, (Layout, Fragment)):
            raise UserError(
                f"T.annotate_layout: the layout of '{buffer.name}' must be a Layout or a Fragment, "
                f"got {type(layout).__name__}"
            )
        if tuple(layout.shape) != shape:
            raise UserError(
                f"T.annotate_layout: the layout for '{buffer.name}' is for shape {list(layout.shape)}, "
                f"but the buffer has shape {list(shape)}"
            )
        if buffer.scope() == "local" and isinstance(layout, Fragment):
            continue  # a per-thread buffer: every thread has its own copy, nothing to pin
        is_fragment = buffer.scope() == "local.fragment"
        if is_fragment != isinstance(layout, Fragment):
            raise UserError(
                f"T.annotate_layout: '{buffer.name}' is in {buffer.scope()} memory and needs a "
                f"{'Fragment' if is_fragment else 'Layout'}, got a {type(layout).__name__}"
            )
        if buffer.scope() == "global":
            _check_global_layout(buffer, layout)
        annotated_layouts[buffer] = layout
    return None  # nothing to emit: prim_func stores the layouts as a function attribute


def _check_global_layout(buffer, layout) -> None:
    """A global tensor's memory holds its layout's output space (`apply_global_layouts`): it must
    fit in the tensor, and be addressed with 32-bit offsets."""
    elements = math.prod(int(s) for s in buffer.shape)
    if layout.physical_size > elements:
        raise UserError(
            f"T.annotate_layout: the layout of global tensor '{buffer.name}' places its elements over "
            f"{layout.physical_size} positions, but the tensor has {elements} elements; the layout's "
            f"outputs must cover exactly the tensor's memory"
        )
    if layout.physical_size >= 2**31:
        raise UserError(
            f"T.annotate_layout: global tensor '{buffer.name}' has {elements} elements; a layout on a "
            f"global tensor is supported up to 2**31 - 1 elements"
        )


def Fragment(shape, forward_thread_fn=None, forward_index_fn=None, replicate=1, forward_fn=None):  # noqa: N802
    """A fragment layout from Python functions of the element's indices (TileLang's `T.Fragment`):
    `forward_thread_fn(*idx)` gives the thread holding the element and `forward_index_fn(*idx)` its
    register; `forward_fn(*idx)` may give both as a pair.

    Example: T.annotate_layout({acc: T.Fragment(acc.shape, lambda i, j: i % 128, lambda i, j: j)})
    """
    from tilelang.layout import fragment as fl
    from tilelang.layout.evaluate import evaluate, grid

    shape = tuple(int(s) for s in shape)
    if int(replicate) != 1:
        raise UserError("T.Fragment: replicate other than 1 is not supported; use tilelang.layout fragments")
    vars_ = fl.placeholder_vars(len(shape))
    if forward_fn is not None:
        thread, index = forward_fn(*vars_)
    elif forward_thread_fn is not None:
        thread = forward_thread_fn(*vars_)
        index = forward_index_fn(*vars_) if forward_index_fn is not None else None
    else:
        raise UserError("T.Fragment: give forward_thread_fn (and forward_index_fn), or forward_fn")
    thread = tirx.IntImm("int32", thread) if isinstance(thread, int) else thread
    if index is None:  # one register per element of a thread, in row-major order
        flat = tirx.const(0, "int32")
        for v, n in zip(vars_, shape):
            flat = flat * n + v
        index = flat
    index = tirx.IntImm("int32", index) if isinstance(index, int) else index
    threads = int(evaluate(thread, dict(zip(vars_, grid(shape)))).max()) + 1
    return fl.Fragment(shape, vars_, thread, index, threads)


_ORDERS = {"row": 0, "column": 1, "col": 1}


def use_swizzle(panel_size: int, order: str = "row", enable: bool = True):
    """Launch blocks panel by panel so neighbouring blocks share input tiles in L2.

    Blocks are taken in panels of `panel_size` rows ("row") or columns ("column") of the grid,
    walking down each panel before moving along it.

    Example: T.use_swizzle(panel_size=10)
    """
    from tilelang.op import base

    if order not in _ORDERS:
        raise UserError(f"T.use_swizzle: order must be 'row' or 'column', got {order!r}")
    if not enable:  # panel 0: launch order, kept (the compiler chooses panels for GEMMs without a call)
        return base.make_call("use_swizzle", [tirx.const(0, "int32"), tirx.const(_ORDERS[order], "int32")])
    if int(panel_size) <= 0:
        raise UserError(f"T.use_swizzle: panel_size must be positive, got {panel_size}")
    return base.make_call("use_swizzle", [tirx.const(int(panel_size), "int32"), tirx.const(_ORDERS[order], "int32")])

"""`T.Layout(shape, forward_fn)`: a buffer layout from a Python function of the element's indices.

The function gives the element's position as a list of output indices; the layout stores the
buffer row-major over the output index space, whose extents are the ranges the outputs take over
the input shape (TileLang's `Layout.OutputShape()`). The result is a `tilelang.layout.Layout`, so
`T.annotate_layout` takes it like the swizzles of `tilelang.layout`.
"""

from __future__ import annotations

import math

from tvm import ir, sym, tirx

from tilelang.errors import UserError


def Layout(shape, forward_fn):  # noqa: N802  (TileLang's name)
    """A layout mapping element (i, j, ...) of a buffer of `shape` to `forward_fn(i, j, ...)`.

    Args:
        shape: the buffer's shape (compile-time constants).
        forward_fn: a function of one index per dimension returning the output indices (a list, a
            tuple or one expression), e.g. a swizzle or a permutation of the dimensions.

    Errors:
        UserError if the shape is not constant, or two elements map to the same position.

    Example:
        T.annotate_layout({A_shared: T.Layout((64, 64), lambda i, j: [i, (j // 8 ^ i % 8) * 8 + j % 8])})
    """
    from tilelang.layout import layout as layout_mod
    from tilelang.layout.evaluate import NotEvaluable, evaluate, grid
    from tilelang.layout.fragment import placeholder_vars

    try:
        dims = tuple(int(d) for d in shape)
    except TypeError:
        raise UserError(f"T.Layout: the shape must be compile-time constants, got {list(shape)}") from None
    vars_ = placeholder_vars(len(dims))
    out = forward_fn(*vars_)
    outs = list(out) if isinstance(out, (list, tuple)) else [out]
    outs = [tirx.const(o, "int32") if isinstance(o, int) else o for o in outs]
    extents = _affine_extents(vars_, dims, outs)  # (a global tensor's layout: millions of elements)
    proven = extents is not None  # a bijection, by TVM's iterator analysis
    if not proven:
        points = dict(zip(vars_, grid(dims)))
        try:
            values = [evaluate(o, points) for o in outs]
        except NotEvaluable as err:
            raise UserError(f"T.Layout: the layout function must be integer index arithmetic ({err})") from None
        if any(v.min() < 0 for v in values):
            raise UserError(f"T.Layout: the layout function gives a negative index over shape {list(dims)}")
        extents = [int(v.max()) + 1 for v in values]
    flat = tirx.const(0, "int32")
    for o, n in zip(outs, extents):
        flat = flat * n + o
    result = layout_mod.Layout(dims, vars_, sym.Analyzer().simplify(flat), math.prod(extents), "T.Layout")
    if not proven and not result.is_bijective():
        raise UserError(f"T.Layout: two elements of shape {list(dims)} map to the same position")
    result.output_shape = tuple(extents)
    return result


def _affine_extents(vars_, dims, outs):
    """The output extents when the outputs are splits and fusions of the inputs that TVM's iterator
    analysis proves a bijection onto their range (each output from 0), else None: evaluating the
    outputs at every point, the other way, takes seconds for a tensor of millions of elements."""
    domain = {v: ir.Range.from_min_extent(0, n) for v, n in zip(vars_, dims)}
    if not sym.detect_iter_map(outs, domain, check_level="bijective").indices:
        return None
    ana = sym.Analyzer()
    for v, n in zip(vars_, dims):
        ana.bind(v, ir.Range.from_min_extent(0, n))
    bounds = [ana.const_int_bound(o) for o in outs]
    if any(b.min_value != 0 for b in bounds):
        return None
    extents = [int(b.max_value) + 1 for b in bounds]
    return extents if math.prod(extents) == math.prod(dims) else None

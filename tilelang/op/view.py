"""Views: a buffer over another buffer's memory under a new shape or dtype, with nothing copied:
`T.reshape(src, shape)`, `T.view(src, shape=None, dtype=None)`, and `T.Tensor(shape, dtype, src.data)`.

In the IR a view is a `DeclBuffer` whose data is `buffer_data(src)`. The view and its source must
hold the same number of bits (`prod(shape) * bits(dtype)`); for dynamic shapes the equality must be
provable (`(M, K)` as `(M * K,)`).

  global tensors  kernel parameters, `T.make_tensor`s and their views: any shape, dynamic or not,
                  any dtype (the same bytes read as another type);
  shared tiles    constant shapes, any dtype;
  local arrays    constant shapes, any dtype (each thread's own array, reinterpreted);
  fragments       constant shapes, the same dtype: the view's element at row-major position f is
                  the source's element at position f, in the same thread's same register.

A view of a shared tile or a fragment is followed by a `tl.view(view, source)` statement, the
`View` op below. For a fragment it links the two layouts during layout inference (either one's
layout gives the other's, through the row-major index map), and its lowering checks that the view's
accesses go to the source's registers. For a shared tile its lowering checks that both have the
same layout in memory (a swizzle of one seen through the view's shape and dtype): data written
through one is then read back right through the other.
"""

from __future__ import annotations

import math

import numpy as np
import tvm_ffi
from tvm import ir, sym, tirx
from tvm.script.ir_builder import tirx as _tb

from tilelang.dtypes import canonical
from tilelang.errors import UserError, at_span
from tilelang.layout import layout as shared_layouts
from tilelang.layout.evaluate import evaluate, grid
from tilelang.layout.fragment import Fragment, placeholder_vars, substitute
from tilelang.op import base
from tilelang.utils.ir import const_int

NAME = "view"
__all__ = ["reshape", "view"]

FRAGMENT = "local.fragment"
_SHARED = ("shared", "shared.dyn")
_ON_CHIP = (*_SHARED, FRAGMENT, "local")


def reshape(src, shape):
    """`src`'s memory as a buffer of `shape` (same dtype, same number of elements); no copy.

    Args:
        src: a buffer: a kernel's tensor, a shared tile, a fragment or a local array.
        shape: the new shape; dynamic dimensions are allowed for global tensors.

    Errors:
        UserError if `src` is not a whole buffer, the sizes differ (or cannot be proven equal), or
        an on-chip view's shape is not constant.

    Example:
        s = T.alloc_fragment((block_N, block_Q * heads), "float32")
        s3 = T.reshape(s, (block_N, block_Q, heads))        # s3[n, q, h] is s[n, q * heads + h]
    """
    return declare(src, shape, None, "T.reshape")


def view(src, shape=None, dtype=None):
    """`src`'s memory as a buffer of `shape` and `dtype` (each defaults to `src`'s): the same bits,
    read as another type or shape; no copy.

    Errors:
        UserError if `src` is not a whole buffer, the sizes in bits differ, or the view is of a
        fragment with another dtype (a fragment's registers hold whole elements).

    Example:
        acc_shared = T.view(KV_shared, shape=[BS // 2, D], dtype="float32")   # bf16 tile as fp32
        flat = T.view(A, shape=[M * K])                                       # a global tensor, 1-D
    """
    return declare(src, shape, dtype, "T.view")


def alias(data, shape, dtype, what: str = "T.Tensor"):
    """`T.Tensor(shape, dtype, X.data)`: a view of buffer X (see `declare`), or None when `data`
    is not a buffer's data (a pointer, which `T.Tensor` declares a tensor at without checks)."""
    if isinstance(data, ir.Call) and isinstance(data.op, ir.Op) and data.op.name == "tirx.buffer_data":
        return declare(data.args[0], shape, dtype, what)
    return None


def declare(src, shape, dtype, what: str):
    """Declare the view (and, for a shared tile or fragment, the `tl.view` statement after it)."""
    if isinstance(src, ir.TensorRegion) or isinstance(src, ir.TensorLoad):
        raise UserError(f"{what}: expected a whole buffer, got a part of '{src.source.name}'; view the buffer itself")
    if not base.is_buffer(src):
        raise UserError(f"{what}: expected a buffer (a tensor, shared tile, fragment or local array), got {src!r}")
    scope = src.scope()
    if scope != "global" and scope not in _ON_CHIP:
        raise UserError(f"{what}: cannot view '{src.name}', a buffer in scope '{scope}'")
    dtype = canonical(dtype if dtype is not None else src.dtype)
    dims = _dims(src.shape if shape is None else shape, what)
    on_chip = scope != "global"
    if on_chip and not all(const_int(d) is not None for d in dims):
        raise UserError(f"{what}: a view of {_kind(scope)} '{src.name}' must have a constant shape, got {_fmt(dims)}")
    _check_size(src, dims, dtype, what, shape_given=shape is not None)
    if scope == FRAGMENT and dtype != str(src.dtype):
        raise UserError(
            f"{what}: fragment '{src.name}' holds {src.dtype} values in registers; a view of it must keep "
            f"that dtype (got {dtype}): convert with a T.Parallel loop into a fragment of {dtype} instead"
        )
    if len(src.strides) and shape is not None and not _same_dims(dims, src.shape):
        raise UserError(f"{what}: '{src.name}' has strides (is not contiguous); it can be viewed only with its shape")
    offset = src.elem_offset
    if const_int(offset) != 0 and dtype != str(src.dtype):
        raise UserError(f"{what}: '{src.name}' starts at an element offset; it can be viewed only with its dtype")
    strides = list(src.strides) if len(src.strides) else None
    if scope == "global" and strides is None:
        strides = compact_strides(dims)
    buf = _tb.decl_buffer(
        dims,
        dtype,
        data=src.data,
        strides=strides,
        elem_offset=offset if const_int(offset) != 0 else None,
        scope=scope,
    )
    if scope in _SHARED or scope == FRAGMENT:
        _tb.evaluate(base.make_call(NAME, [_whole(buf), _whole(src)]))
    return buf


def compact_strides(dims) -> list:
    """Row-major strides of `dims`, spelled out. A global tensor declared inside the kernel (a view,
    a T.make_tensor) gets them explicitly: the TMA planner leaves tensors with explicit strides to
    cp.async and thread copies, and it must, since it encodes its descriptors on the host, where
    such a tensor is not declared (a view) or not even known (an address read on the device)."""
    strides, stride = [], 1
    for d in reversed(dims):
        strides.append(stride if not isinstance(stride, int) else tirx.const(stride, _index_dtype(dims)))
        stride = d * stride if isinstance(stride, int) and isinstance(d, int) else stride * d
    return list(reversed(strides))


def _index_dtype(dims) -> str:
    return "int64" if any(not isinstance(d, int) and str(d.ty.dtype) == "int64" for d in dims) else "int32"


def _dims(shape, what):
    dims = tuple(shape) if isinstance(shape, (tuple, list, ir.Array)) else (shape,)
    out = []
    for d in dims:
        if isinstance(d, bool) or not (isinstance(d, int) or (ir.is_prim_expr(d) and "int" in str(d.ty.dtype))):
            raise UserError(f"{what}: a shape holds integers or integer expressions, got {d!r} in {_fmt(dims)}")
        if const_int(d) is not None and const_int(d) <= 0:
            raise UserError(f"{what}: every dimension must be positive, got shape {_fmt(dims)}")
        out.append(d)
    if not out:
        raise UserError(f"{what}: the shape must have at least one dimension")
    return tuple(out)


def _bits(shape, dtype):
    """Size of a buffer in bits: an int when the shape is constant, else an expression (in int64
    when a dimension is int64)."""
    width = tvm_ffi.dtype(dtype).bits * tvm_ffi.dtype(dtype).lanes
    if all(const_int(d) is not None for d in shape):
        return math.prod(const_int(d) for d in shape) * width
    wide = "int64" if any(not isinstance(d, int) and str(d.ty.dtype) == "int64" for d in shape) else "int32"
    total = tirx.const(width, wide)
    for d in shape:
        total = total * (d if isinstance(d, int) or str(d.ty.dtype) == wide else tirx.Cast(wide, d))
    return total


def _check_size(src, dims, dtype, what, shape_given=True):
    have, want = _bits(src.shape, src.dtype), _bits(dims, dtype)
    if isinstance(have, int) and isinstance(want, int):
        same = have == want
    else:
        wide = str((want if isinstance(have, int) else have).ty.dtype)
        same = sym.Analyzer().can_prove_equal(*(tirx.const(x, wide) if isinstance(x, int) else x for x in (have, want)))
    if same:
        return
    if not (isinstance(have, int) and isinstance(want, int)):
        why = "their sizes cannot be proven equal (a view must cover exactly the same memory)"
    else:
        why = "a view must cover exactly the same memory"
        width = tvm_ffi.dtype(dtype).bits * tvm_ffi.dtype(dtype).lanes
        last = const_int(src.shape[-1]) * tvm_ffi.dtype(str(src.dtype)).bits * tvm_ffi.dtype(str(src.dtype)).lanes
        if not shape_given and last % width == 0:
            why += f"; give the view's shape, e.g. shape={_fmt((*src.shape[:-1], last // width))}"
    raise UserError(
        f"{what}: '{src.name}' is {_fmt(src.shape)} {src.dtype} ({_describe_bits(have)}), but the view is "
        f"{_fmt(dims)} {dtype} ({_describe_bits(want)}); {why}"
    )


def _describe_bits(bits) -> str:
    if isinstance(bits, int):
        return f"{bits // 8} bytes" if bits % 8 == 0 else f"{bits} bits"
    return f"{bits} bits"


def _same_dims(a, b) -> bool:
    return len(a) == len(b) and all(base.same_extent(x, y) for x, y in zip(a, b))


def _whole(buf):
    return base.to_region(buf, "view").to_ir()


def _kind(scope) -> str:
    return {FRAGMENT: "fragment", "local": "local array"}.get(scope, "shared tile")


def _fmt(dims) -> str:
    return "(" + ", ".join(str(d) for d in dims) + ("," if len(dims) == 1 else "") + ")"


# ---- layouts through a view --------------------------------------------------------------------


def _row_major(vars_, shape):
    flat = tirx.const(0, "int32")
    for v, n in zip(vars_, shape):
        flat = flat * n + v
    return flat


def _unflatten(flat, shape):
    coords = []
    for n in reversed(shape):
        coords.append(tirx.floormod(flat, n))
        flat = tirx.floordiv(flat, n)
    return list(reversed(coords))


def _bound(vars_, shape):
    ana = sym.Analyzer()
    for v, n in zip(vars_, shape):
        ana.bind(v, ir.Range(0, n))
    return ana


def fragment_through(frag: Fragment, shape) -> Fragment:
    """The layout of a view of shape `shape` over a fragment laid out as `frag` (same dtype, same
    number of elements): the view's element at row-major position f lives where the fragment's
    element at position f lives."""
    shape = _ints(shape)
    vars_ = placeholder_vars(len(shape))
    ana = _bound(vars_, shape)
    old = dict(zip(frag.vars, _unflatten(_row_major(vars_, shape), frag.shape)))
    return Fragment(
        shape,
        vars_,
        ana.simplify(substitute(frag.base, old)),
        ana.simplify(substitute(frag.index, old)),
        frag.num_threads,
        list(frag.groups),
        math.gcd(frag.vector_size, shape[-1]),
    )


def shared_through(layout, src, view_buf):
    """The layout in memory a view `view_buf` of shared tile `src` has when `src` is laid out as
    `layout` (None: row-major): the bytes of each view element are where the same bytes of `src`
    are. Returns None when `src`'s layout splits a view element's bytes (a wider view dtype whose
    elements the swizzle does not keep whole)."""
    src_shape, shape = _ints(src.shape), _ints(view_buf.shape)
    if layout is None:
        layout = shared_layouts.linear(src_shape)
    src_bits = tvm_ffi.dtype(str(src.dtype)).bits * tvm_ffi.dtype(str(src.dtype)).lanes
    bits = tvm_ffi.dtype(str(view_buf.dtype)).bits * tvm_ffi.dtype(str(view_buf.dtype)).lanes
    vars_ = placeholder_vars(len(shape))
    flat = _row_major(vars_, shape)
    if bits >= src_bits:
        ratio = bits // src_bits
        first = layout.map(_unflatten(flat * ratio, src_shape))
        # Every source element of a view element must sit right after the first, which is aligned.
        points = dict(zip(vars_, grid(shape)))
        p0 = evaluate(first, points)
        for k in range(1, ratio):
            pk = evaluate(layout.map(_unflatten(flat * ratio + k, src_shape)), points)
            if not np.array_equal(pk, p0 + k):
                return None
        if np.any(p0 % ratio):
            return None
        forward, size = tirx.floordiv(first, ratio), layout.physical_size // ratio
    else:
        ratio = src_bits // bits
        forward = layout.map(_unflatten(tirx.floordiv(flat, ratio), src_shape)) * ratio + tirx.floormod(flat, ratio)
        size = layout.physical_size * ratio
    forward = _bound(vars_, shape).simplify(forward)
    return shared_layouts.Layout(shape, vars_, forward, size, f"{layout.name} (through a view)")


def _same_placement(a, b) -> bool:
    """Whether two layouts of one shape put every element at the same offset."""
    if tuple(a.shape) != tuple(b.shape):
        return False
    offsets_a = evaluate(a.forward, dict(zip(a.vars, grid(a.shape))))
    return np.array_equal(offsets_a, evaluate(b.forward, dict(zip(b.vars, grid(b.shape)))))


@base.register
class View(base.TileOp):
    """A parsed `tl.view(view, source)`: `view` is declared over `source`'s memory."""

    name = NAME

    def __init__(self, call, span=None):
        super().__init__(call, span)
        self.view = base.Region.from_ir(call.args[0]).buffer
        self.source = base.Region.from_ir(call.args[1]).buffer

    def describe(self) -> str:
        return f"the view '{self.view.name}' of '{self.source.name}'"

    def aliases(self) -> list:
        """(view, source) pairs this op declares to share memory."""
        return [(self.view, self.source)]

    def _is_fragment(self) -> bool:
        return self.view.scope() == FRAGMENT

    def fragments(self) -> list:
        return [self.view, self.source] if self._is_fragment() else []

    def infers_layouts(self) -> bool:
        return self._is_fragment()

    def common_layouts(self, known: dict) -> dict | None:
        """The view's layout from the source's, or the source's from the view's."""
        if not self._is_fragment():
            return None
        if self.source in known:
            return {self.view: fragment_through(known[self.source], self.view.shape)}
        if self.view in known:
            return {self.source: fragment_through(known[self.view], self.source.shape)}
        return None

    def shared_layouts(self, known: dict) -> dict | None:
        """For a shared view: the view's layout in memory from the source's (`known`: {tile:
        Layout}), or the source's from the view's; None when neither has one. Raises a UserError
        when a layout of the source cannot hold the view's wider elements whole."""
        if self._is_fragment():
            return None
        for a, b in ((self.source, self.view), (self.view, self.source)):
            if a in known:
                through = shared_through(known[a], a, b)
                if through is None:
                    raise at_span(
                        f"shared tile '{self.view.name}' is a view of '{self.source.name}' with wider elements, "
                        f"but the swizzle of '{a.name}' splits them",
                        self.span,
                    )
                return {b: through}
        return None

    def lower_cpu(self, analyzer) -> tirx.Stmt:
        """Nothing to run: on the CPU every tile is row-major, so a view and its source agree."""
        return tirx.Evaluate(0)

    def lower(self, ctx) -> tirx.Stmt:
        """Nothing to run: check that the view and its source agree on where each element is."""
        if self._is_fragment():
            if not ctx.local_of(self.view).same_as(ctx.local_of(self.source)):
                raise at_span(
                    f"fragment '{self.view.name}' is a view of fragment '{self.source.name}' (T.reshape / T.view), "
                    f"which this compiler cannot lower yet: the view would get registers of its own. Index "
                    f"'{self.source.name}' itself with the view's index map (row-major positions), or copy "
                    f"through a shared tile",
                    self.span,
                )
            return tirx.Evaluate(0)
        have, want = ctx.shared_layout(self.view), ctx.shared_layout(self.source)
        if have is None and want is None:
            return tirx.Evaluate(0)
        expected = shared_through(want, self.source, self.view)
        actual = have if have is not None else shared_layouts.linear(_ints(self.view.shape))
        if expected is None or not _same_placement(expected, actual):
            raise at_span(
                f"shared tile '{self.view.name}' is a view of '{self.source.name}', but they are laid out "
                f"differently in memory ('{self.source.name}' {_describe(want)}, '{self.view.name}' "
                f"{_describe(have)}), so data written through one would be read scrambled through the "
                f"other. A tile that T.gemm or a TMA copy reads is swizzled for it, and this compiler does "
                f"not yet give its views the same swizzle: use a T.alloc_shared tile of its own for the view",
                self.span,
            )
        return tirx.Evaluate(0)


def _ints(shape) -> tuple:
    return tuple(int(n) for n in shape)


def _describe(layout) -> str:
    if layout is None or _same_placement(layout, shared_layouts.linear(layout.shape)):
        return "row-major"
    return "swizzled"

"""`T.im2col(img, col, nhw_step, c_step, kernel, stride, dilation, pad)`: one tile of the im2col
matrix of a 2-D convolution, loaded into `col`.

`img` is an NHWC tensor (N, H, W, C); the convolution has a square `kernel` x `kernel` filter,
`stride`, `dilation` and zero padding `pad` on each side, so the output is OH x OW with
OH = (H + 2 * pad - dilation * (kernel - 1) - 1) // stride + 1 (OW likewise). The im2col matrix has
a row per output pixel, m = (n * OH + oh) * OW + ow, and a column per filter tap and channel,
k = (kh * kernel + kw) * C + c (the order of a (KH, KW, C, F) filter flattened to (KH * KW * C, F)):

    im2col[m, k] = img[n, oh * stride + kh * dilation - pad, ow * stride + kw * dilation - pad, c]

zero where the position falls in the padding or past the matrix (m >= N * OH * OW, k >= KH * KW * C).
`col`, of shape (block_M, block_K), receives rows nhw_step * block_M ... and columns
c_step * block_K ...: `T.gemm(col, filter_tile, acc)` then computes one tile of the convolution.

Lowering (every target): like a copy, a `T.Parallel` loop nest over `col` with the index map above,
which layout inference spreads over the threads and vectorizes along the channels (`op/vectorize`:
C a multiple of the vector). In a `T.Pipelined` loop, an im2col from global into shared memory is
a load the planner issues ahead into its own buffer per stage, with cp.async (zero-filling the
padding), as it does a `T.copy`.
"""

from __future__ import annotations

from tvm import ir, tirx

from tilelang.errors import UserError
from tilelang.log import hint_once
from tilelang.op import base
from tilelang.op.copy import ASYNC_COPY, EVICTION_POLICIES
from tilelang.op.loops import build_parallel_nest
from tilelang.utils.ir import const_int, is_one

NAME = "im2col"
__all__ = ["im2col"]


def im2col(img, col, nhw_step, c_step, kernel, stride, dilation, pad, eviction_policy=None):
    """Load tile (`nhw_step`, `c_step`) of the im2col matrix of NHWC tensor `img` into `col`.

    Args:
        img: the input, a 4-D (N, H, W, C) tensor in global or shared memory.
        col: the destination tile (block_M, block_K), shared or fragment (or a slice with that
            tile as its last two dimensions).
        nhw_step: which block of block_M output pixels (rows of the matrix).
        c_step: which block of block_K filter taps x channels (columns).
        kernel, stride, dilation, pad: the convolution's filter size (square), stride, dilation and
            zero padding, compile-time integers.
        eviction_policy: "evict_normal", "evict_first" or "evict_last": an L2 cache hint,
            accepted and not applied.

    Errors:
        UserError if `img` is not 4-D, `col` is not a 2-D tile, or the convolution parameters are not
        integers in range (kernel, stride, dilation >= 1, pad >= 0).

    Example:
        kernel_flat = T.Tensor((KH * KW * C, F), dtype, kernel.data)
        for k in T.Pipelined(T.ceildiv(KH * KW * C, block_K), num_stages=3):
            T.im2col(data, data_shared, by, k, KH, S, D, P)
            T.copy(kernel_flat[k * block_K, bx * block_N], kernel_shared)
            T.gemm(data_shared, kernel_shared, out_local)
    """
    src = base.to_region(img, "T.im2col image")
    dst = base.to_region(col, "T.im2col destination")
    if src is None or dst is None:
        raise UserError("T.im2col: `img` and `col` must be buffers or slices, not single elements")
    if len(src.buffer.shape) != 4:
        raise UserError(
            f"T.im2col: the image '{src.name}' must be a 4-D NHWC tensor (N, H, W, C), got shape "
            f"{tuple(src.buffer.shape)}"
        )
    if src.buffer.scope() not in ("global", "shared", "shared.dyn"):
        raise UserError(f"T.im2col: the image '{src.name}' must be in global or shared memory")
    if dst.buffer.scope() not in ("shared", "shared.dyn", "local.fragment"):
        raise UserError(f"T.im2col: the destination '{dst.name}' must be a shared tile or a fragment")
    extents = list(dst.extents)
    if len(extents) < 2 or not all(is_one(e) for e in extents[:-2]):
        raise UserError(
            f"T.im2col: the destination {dst.describe()} must be a 2-D tile (block_M, block_K): its "
            f"dimensions before the last two must have extent 1"
        )
    if any(const_int(e) is None for e in extents[-2:]):
        raise UserError(f"T.im2col: the destination tile {dst.describe()} must have a constant shape")
    params = [
        _int_arg("kernel", kernel, 1),
        _int_arg("stride", stride, 1),
        _int_arg("dilation", dilation, 1),
        _int_arg("pad", pad, 0),
    ]
    if eviction_policy is not None:
        if eviction_policy not in EVICTION_POLICIES:
            raise UserError(f"T.im2col: eviction_policy must be one of {EVICTION_POLICIES}, got {eviction_policy!r}")
        hint_once("im2col.eviction_policy", f"T.im2col(eviction_policy={eviction_policy!r}): a cache hint not applied")
    steps = [_index_arg("nhw_step", nhw_step), _index_arg("c_step", c_step)]
    args = [src.to_ir(), dst.to_ir(), *steps, *(tirx.const(p, "int32") for p in params)]
    return base.make_call(NAME, args)


def _int_arg(name: str, value, low: int) -> int:
    v = const_int(value)
    if isinstance(value, bool) or v is None:
        raise UserError(f"T.im2col: `{name}` must be a compile-time integer, got {value!r}")
    if v < low:
        raise UserError(f"T.im2col: `{name}` must be at least {low}, got {v}")
    return v


def _index_arg(name: str, value):
    if isinstance(value, bool) or not (
        isinstance(value, int) or (ir.is_prim_expr(value) and "int" in str(value.ty.dtype))
    ):
        raise UserError(
            f"T.im2col: `{name}` must be an integer or an integer expression (a block index), got {value!r}"
        )
    return tirx.const(value, "int32") if isinstance(value, int) else value


@base.register
class Im2Col(base.TileOp):
    """A parsed `tl.im2col(img, col, nhw_step, c_step, kernel, stride, dilation, pad)`."""

    name = NAME
    expands = True

    def __init__(self, call, span=None):
        super().__init__(call, span)
        self.src = base.Region.from_ir(call.args[0])
        self.dst = base.Region.from_ir(call.args[1])
        self.nhw_step, self.c_step = call.args[2], call.args[3]
        self.kernel, self.stride, self.dilation, self.pad = (const_int(a) for a in call.args[4:8])

        # Set by the pipeline planner: the load is issued asynchronously (cp.async).
        self.is_async = len(call.args) > 8 and const_int(call.args[8]) == 1

    def describe(self) -> str:
        return f"T.im2col({self.src.name}, {self.dst.name})"

    def writes(self) -> list:
        return [self.dst.buffer]

    def async_load(self) -> base.AsyncLoad | None:
        if self.src.buffer.scope() != "global" or not self.dst.buffer.scope().startswith("shared"):
            return None
        return base.AsyncLoad(self.src, self.dst, tma=False)  # (a gather: not a TMA tile)

    def issued_async(self):
        """The load with its asynchronous flag set: `expand` marks its loop for cp.async."""
        return base.make_call(NAME, list(self.call.args[:8]) + [tirx.const(1, "int32")])

    def expand(self, analyzer=None) -> tirx.Stmt:
        """A parallel loop over the destination tile loading each element through the index map."""
        img, d = self.src.buffer, self.dst
        block_m, block_k = d.extents[-2], d.extents[-1]
        dtype = str(d.buffer.dtype)

        def body(dst_idx, _loop_vars):
            m = self.nhw_step * block_m + dst_idx[-2] - d.starts[-2]
            col = self.c_step * block_k + dst_idx[-1] - d.starts[-1]
            index, inside = source_index(m, col, img.shape, self.kernel, self.stride, self.dilation, self.pad)
            value = tirx.BufferLoad(img, index)
            if img.dtype != d.buffer.dtype:
                value = tirx.Cast(dtype, value)
            value = tirx.if_then_else(inside, value, tirx.const(0, dtype))
            return tirx.BufferStore(d.buffer, value, dst_idx)

        return build_parallel_nest(d, body, span=self.span, annotations={ASYNC_COPY: 1} if self.is_async else None)


def source_index(m, col, img_shape, kernel: int, stride: int, dilation: int, pad: int):
    """([n, h, w, c] of the image element at row `m`, column `col` of the im2col matrix, whether it is
    inside the image and the matrix (else the element is a zero of the padding)."""
    n_dim, h_dim, w_dim, c_dim = img_shape
    out_h = tirx.floordiv(h_dim + 2 * pad - dilation * (kernel - 1) - 1, stride) + 1
    out_w = tirx.floordiv(w_dim + 2 * pad - dilation * (kernel - 1) - 1, stride) + 1
    ow = tirx.floormod(m, out_w)
    oh = tirx.floormod(tirx.floordiv(m, out_w), out_h)
    kh = tirx.floordiv(col, kernel * c_dim)
    kw = tirx.floormod(tirx.floordiv(col, c_dim), kernel)
    h = oh * stride + kh * dilation - pad
    w = ow * stride + kw * dilation - pad
    inside = tirx.all(m < n_dim * out_h * out_w, col < kernel * kernel * c_dim, h >= 0, h < h_dim, w >= 0, w < w_dim)
    return [tirx.floordiv(m, out_h * out_w), h, w, tirx.floormod(col, c_dim)], inside

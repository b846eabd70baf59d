"""`tl.tma_copy(src, dst, barrier)`: a global-to-shared tile copy through the Tensor Memory
Accelerator (sm_90a), made by the pipeline planner (`transform/pipelining/tma.py`) and
`lower_tma_copies` from a `T.copy`, or written by the user as `T.tma_copy`.

One thread issues it. The tile arrives as one or more boxes of a tensor map (the descriptor the
launcher encodes on the host before each launch, passed to the kernel as a `__grid_constant__`);
their bytes complete on the mbarrier `barrier`, which the consumers wait on. Elements of a box past
the tensor's edge arrive as zeros, so tiles at ragged edges need no guards.

The shared tile's layout decides the boxes. A row-major tile is one box (its rows at most 256
elements). A tile in 128/64/32-byte swizzled panels (`layout.gmma_panels`, what wgmma reads, and
the bank swizzle of 128-byte rows) is one box per panel, each box `panel` elements wide with the
hardware swizzle of the same width: the TMA unit writes exactly the panel's permutation.

Lowering, the compiler's copies: `tl::mbarrier_arrive_expect_tx(barrier, tile bytes)` (the copy
is the barrier's one arrival) and one `tl::tma_load(map, barrier, &dst[panel start],
coordinates...)` per box, under the condition the pass that made it put around it; the tensor maps
go to `LowerContext.tensor_maps`. A multicast copy (both blocks of a 2-block cluster copy the same
tile) issues this block's half of the boxes as `tl::tma_load_multicast(..., mask 0b11, ...)`: the
box lands in both blocks' shared memory.

The user's `T.tma_copy` (as in the public TileLang): one thread of each leader scope (default: the
threads running the copy, so one thread) announces the bytes, `tl::mbarrier_expect_tx`, without
arriving, and issues the loads; the threads arrive themselves (`T.barrier_arrive`), so a barrier
the 128 threads of a producer warpgroup arrive on is allocated with 128. With `emit_arrive` the
issuing thread also arrives once after its loads.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from tvm import ir, sym, tirx

from tilelang.dtypes import bits as dtype_bits
from tilelang.errors import CompilerError, at_span
from tilelang.layout import layout as sl
from tilelang.layout.evaluate import evaluate, grid
from tilelang.op import base
from tilelang.utils.ir import const_int, extern, seq

NAME = "tma_copy"

_SWIZZLE_BYTES = {0: 0, 1: 32, 2: 64, 3: 128}  # CUtensorMapSwizzle value -> span in bytes
_MAX_BOX = 256
_TENSOR_MAP_TYPE = ir.PointerType(tirx.TensorMapType(), "global")  # what T.handle("tensormap") declares
# `tile_of`'s reason for extents that are not constants (yet: `H1 - H0` of two bound values becomes
# one only after parsing; `transform/fold_tile_extents.py` folds it and checks the user's copy then).
DYNAMIC_EXTENTS = "the tile's extents are not constants"


def make(src: base.Region, dst: base.Region, barrier, multicast: bool = False) -> tirx.Stmt:
    """The compiler's copy, one arrival on `barrier` with the tile's bytes; the caller puts it
    under a one-thread condition. With `multicast`, in a 2-block cluster whose blocks copy the
    same tile: each block loads half of its boxes into both blocks' shared memory (`can_multicast`)."""
    args = [src.to_ir(), dst.to_ir(), barrier]
    if multicast:
        args.append(tirx.const(1, "int32"))
    return tirx.Evaluate(base.make_call(NAME, args))


def make_user(src: base.Region, dst: base.Region, barrier, leader_scope: int = 0, emit_arrive: bool = False):
    """The user's `T.tma_copy`: in each group of `leader_scope` threads (0: all the threads running
    it) one thread announces the tile's bytes on `barrier` without arriving and issues the loads
    (with `emit_arrive`, then arrives once)."""
    flags = [0, 1, leader_scope, int(emit_arrive)]  # multicast, user, leader scope, emit_arrive
    args = [src.to_ir(), dst.to_ir(), barrier] + [tirx.const(f, "int32") for f in flags]
    return tirx.Evaluate(base.make_call(NAME, args))


def can_multicast(tile: Tile, layout) -> bool:
    """Whether the tile splits into two halves of whole boxes (one per block of a cluster)."""
    plan = box_plan(tile, layout)
    return plan is not None and (tile.cols // plan[1]) % 2 == 0


@dataclass
class Tile:
    """The global side of a TMA copy: which tensor dimensions the tile spans."""

    src: base.Region
    dst: base.Region
    rows: int  # shared tile rows (product of the non-innermost extents)
    cols: int  # shared tile columns (the innermost extent, contiguous in global memory)
    bytes: int  # element size
    # A window of a wider shared tile (`window`): the tile's columns and the window's first column.
    full_cols: int | None = None
    first_col: object = None

    @property
    def tile_bytes(self) -> int:
        return self.rows * self.cols * self.bytes


def tile_of(src: base.Region, dst: base.Region, window: bool = False) -> Tile | str:
    """The copy as a TMA tile, or the reason it cannot be one. With `window` (the user's
    T.tma_copy), the destination may also be a block of whole columns of a wider shared tile
    (`KV_shared[:, j * 64:(j + 1) * 64]`): `box_plan` then needs it to be whole swizzle panels."""
    g, s = src.buffer, dst.buffer
    if g.scope() != "global" or not s.scope().startswith("shared"):
        return "not a global-to-shared copy"
    if str(g.dtype) != str(s.dtype):
        return f"the copy converts {g.dtype} to {s.dtype}"
    if len(g.shape) > 5:
        return "the tensor has more than 5 dimensions"
    if g.strides:
        return "the tensor has explicit strides"
    extents = [const_int(e) for e in src.extents]
    if any(e is None for e in extents):
        return DYNAMIC_EXTENTS
    nbytes = dtype_bits(str(g.dtype)) // 8
    if nbytes == 0:
        return "sub-byte element type"
    if extents[-1] == 1:
        return "the tile does not span the tensor's contiguous (last) dimension"
    if any(e > _MAX_BOX for e in extents[:-1]):
        return f"a tile extent past {_MAX_BOX} elements outside the contiguous dimension"
    inner = const_int(g.shape[-1])
    if inner is None:
        return "the tensor's contiguous dimension is dynamic (TMA needs row strides that are multiples of 16 bytes)"
    if inner * nbytes % 16:
        return f"the tensor's rows ({inner} x {nbytes} bytes) are not a multiple of 16 bytes"
    rows = int(np.prod([e for e in extents[:-1]], dtype=np.int64)) if len(extents) > 1 else 1
    d_ext = [const_int(e) for e in dst.nonunit_extents()]
    want = [rows, extents[-1]] if rows > 1 else [extents[-1]]
    shape = [const_int(n) for n in s.shape[-len(want) :]]
    if d_ext == want and shape == want:
        return Tile(src, dst, rows, extents[-1], nbytes)
    if window and len(want) == 2 and d_ext == want and shape[0] == rows and shape[1] is not None:
        if const_int(dst.starts[-2]) == 0:  # whole rows of the shared tile, some of its columns
            return Tile(src, dst, rows, extents[-1], nbytes, shape[1], dst.starts[-1])
    return "the shared tile is not a 2-d tile of the tensor's rows and contiguous columns"


def _tma_panels(rows: int, cols: int, nbytes: int, swizzle: int) -> np.ndarray:
    """Physical element offset of each (row, col) of a tile the TMA unit writes box by box with
    `swizzle` (CUtensorMapSwizzle), boxes of `span` bytes side by side along the columns."""
    span = _SWIZZLE_BYTES[swizzle] // nbytes if swizzle else cols
    r, c = np.meshgrid(np.arange(rows), np.arange(cols), indexing="ij")
    byte = (r * span + c % span) * nbytes
    if swizzle:
        # The 16-byte chunk index XORed with the low `swizzle` bits of the 128-byte line index.
        byte = byte ^ (((byte >> 7) & ((1 << swizzle) - 1)) << 4)
    return (c // span) * rows * span + byte // nbytes


def box_plan(tile: Tile, layout: sl.Layout | None) -> tuple[int, int] | None:
    """(CUtensorMapSwizzle, box width in elements) such that the TMA boxes write `layout` (None:
    row-major), or None when no swizzle mode writes it. A window of a wider tile is planned as the
    whole tile and must be whole panels of it (boxes of the window's own width would not have the
    wider tile's row pitch)."""
    if tile.full_cols is not None:
        whole = Tile(tile.src, tile.dst, tile.rows, tile.full_cols, tile.bytes)
        plan = box_plan(whole, layout)
        if plan is None or plan[0] == 0 or tile.cols % plan[1]:
            return None
        first = sym.Analyzer().simplify(tirx.floormod(tile.first_col, plan[1]))
        return plan if const_int(first) == 0 else None
    lead = tuple(int(n) for n in layout.shape[:-2]) if layout is not None else ()
    for swizzle in (3, 2, 1, 0):
        span = _SWIZZLE_BYTES[swizzle] // tile.bytes if swizzle else tile.cols
        if swizzle and (tile.cols % span or tile.rows < 8):
            continue
        if not swizzle and (tile.cols > _MAX_BOX or tile.cols * tile.bytes % 16):
            continue
        expect = _tma_panels(tile.rows, tile.cols, tile.bytes, swizzle)
        if layout is None:
            if swizzle == 0:
                return 0, span
            continue
        if _matches(layout, lead, tile, expect):
            return swizzle, span
    return None


def _matches(layout: sl.Layout, lead, tile: Tile, expect: np.ndarray) -> bool:
    if tuple(int(n) for n in layout.shape[-2:]) != (tile.rows, tile.cols):
        return False
    per_tile = tile.rows * tile.cols
    for stage in range(min(int(np.prod(lead, dtype=np.int64)) if lead else 1, 2)):
        idx = np.unravel_index(stage, lead) if lead else ()
        vals = [tirx.const(int(i), "int32") for i in idx]
        mapping = dict(zip(layout.vars, vals + list(grid((tile.rows, tile.cols)))))
        got = evaluate(layout.forward, mapping).reshape(tile.rows, tile.cols)
        if not np.array_equal(got, expect + stage * per_tile):
            return False
    return True


# ---- lowering ----------------------------------------------------------------------------------------


@dataclass
class TensorMap:
    """One descriptor the launcher encodes: a global tensor read in boxes of `box` (innermost first)."""

    var: tirx.Var
    buffer: object
    box: tuple
    swizzle: int

    def host_stmts(self) -> list:
        g = self.buffer
        dims = list(reversed(g.shape))  # innermost first
        strides, stride = [], tirx.const(dtype_bits(str(g.dtype)) // 8, "int64")
        for n in dims[:-1]:  # bytes between consecutive indices of dims 1..rank-1
            stride = stride * tirx.Cast("int64", n)
            strides.append(stride)
        ones = [1] * len(dims)
        encode = tirx.tensormap_encode_tiled(
            self.var,
            g.data,
            *dims,
            *strides,
            *self.box,
            *ones,
            descriptor_dtype=_descriptor_dtype(str(g.dtype)),
            rank=len(dims),
            swizzle=self.swizzle,
            l2_promotion=3,  # fetch 256-byte L2 sectors: whole rows of the 128-byte swizzled boxes and more
        )
        return [tirx.Bind(self.var, tirx.tvm_stack_alloca("tensormap", 1)), tirx.Evaluate(encode)]


def _descriptor_dtype(dtype: str) -> str:
    """The element type the tensor map is encoded with: a TMA load copies bits, so types TVM's host
    code generator has no tensor-map type for go as the unsigned type of their width."""
    if dtype.startswith("float8") or dtype.startswith("float6") or dtype.startswith("float4"):
        return "uint8"
    if dtype == "int16":
        return "uint16"
    return dtype


def _tensor_map(ctx, buffer, box, swizzle) -> tirx.Var:
    key = (buffer, tuple(box), swizzle)
    for m in ctx.tensor_maps:
        if (m.buffer, m.box, m.swizzle) == key:
            return m.var
    var = tirx.Var(f"{buffer.name}_tma{len(ctx.tensor_maps)}", ty=_TENSOR_MAP_TYPE)
    ctx.tensor_maps.append(TensorMap(var, buffer, tuple(box), swizzle))
    return var


@base.register
class TmaCopy(base.TileOp):
    """A parsed `tl.tma_copy(src, dst, barrier[, multicast, user, leader_scope, emit_arrive])`."""

    name = NAME

    def __init__(self, call, span=None):
        super().__init__(call, span)
        self.src, self.dst = base.Region.from_ir(call.args[0]), base.Region.from_ir(call.args[1])
        self.barrier = call.args[2]
        flags = [const_int(a) for a in call.args[3:]] + [0] * (7 - len(call.args))
        self.multicast, self.user, self.leader_scope, self.emit_arrive = flags[0] == 1, flags[1] == 1, *flags[2:]

    def describe(self) -> str:
        return f"T.tma_copy({self.src.name}, {self.dst.name})"

    def lower(self, ctx) -> tirx.Stmt:
        loads = _lower(self.src, self.dst, self.barrier, self.multicast, ctx, self.span)
        if not self.user:
            return seq([extern("tl::mbarrier_arrive_expect_tx", self.barrier, _bytes(self.src, self.dst))] + loads)
        stmts = [extern("tl::mbarrier_expect_tx", self.barrier, _bytes(self.src, self.dst))] + loads
        if self.emit_arrive:
            stmts.append(extern("tl::mbarrier_arrive", self.barrier))
        scope = self.leader_scope
        if not scope or scope >= ctx.num_threads:
            leader = ctx.thread == 0
        else:
            leader = tirx.floormod(ctx.thread, scope) == 0
        return tirx.IfThenElse(leader, seq(stmts), None)


def _bytes(src, dst):
    # Each block receives the whole tile, multicast or not: its barrier expects all the bytes.
    return tirx.const(tile_of(src, dst, window=True).tile_bytes, "uint32")


def _lower(src, dst, barrier, multicast, ctx, span=None) -> list:
    """The tile's `tl::tma_load` (or multicast) calls, one per box."""
    tile = tile_of(src, dst, window=True)
    if isinstance(tile, str):
        raise CompilerError(f"tl.tma_copy of {src.describe()}: {tile} (the pipeline planner should have kept it)")
    layout = ctx.shared_layout(dst.buffer)
    plan = box_plan(tile, layout)
    if plan is None and tile.full_cols is not None:
        raise at_span(
            f"T.tma_copy into columns {dst.describe()} of the shared tile '{dst.buffer.name}' ({tile.rows} x "
            f"{tile.full_cols}): the TMA unit writes a part of a tile only as whole swizzle panels of its layout "
            f"({layout.name if layout else 'row-major: none'}); copy the whole tile, or columns starting and "
            "ending at panel boundaries (64 fp16 / 32 fp32 columns with 128-byte swizzling)",
            span,
        )
    if plan is None:
        raise CompilerError(
            f"tl.tma_copy into '{dst.buffer.name}': its shared layout ({layout.name if layout else 'row-major'}) is "
            f"not one the TMA unit writes; compile with pass_configs={{'tl.disable_tma_lower': True}} and report it"
        )
    swizzle, width = plan
    ndim = len(src.extents)
    box = [width] + [const_int(e) for e in reversed(src.extents[:-1])]
    tmap = _tensor_map(ctx, src.buffer, box, swizzle)
    coords = [src.starts[d] for d in reversed(range(ndim))]
    # The shared tile's own dims: a leading stage index (multi-buffered) and the tile's start.
    d_start = list(dst.starts)
    stmts = []
    boxes = tile.cols // width
    if multicast:  # this block's half of the boxes, into both blocks of the cluster
        first = tirx.call_extern("int32", "tl::cluster_rank") * tirx.const(boxes // 2, "int32")
        panels = [first + q if q else first for q in range(boxes // 2)]
    else:
        panels = list(range(boxes))
    for p in panels:
        nonzero = not (isinstance(p, int) and p == 0)
        index = d_start[:-1] + [d_start[-1] + p * width if nonzero else d_start[-1]]
        smem = tirx.address_of(tirx.BufferLoad(dst.buffer, index))
        c = [coords[0] + p * width if nonzero else coords[0]] + coords[1:]
        if multicast:
            stmts.append(extern("tl::tma_load_multicast", tmap, barrier, smem, tirx.const(3, "uint16"), *c))
        else:
            stmts.append(extern("tl::tma_load", tmap, barrier, smem, *c))
    return stmts

"""What every tile op shares: the `TileOp` protocol, the registry the passes iterate, and buffer
regions as arguments.

A tile op is a call `tl.<name>(region, ..., attr, ...)` in the IR. Each op is one module under
`tilelang/op/` holding:
  * the user function(s) (`T.copy`), which check their arguments while the kernel is traced and
    build the call; the module's `__all__` lists them, and `tilelang.language` exports them as T.*;
  * a `TileOp` subclass registered with `@register`, which parses the call back and carries the
    op's rules for the passes: its layout rule per inference level and its lowering.

The passes never name ops: `infer_layout`, `expand_elementwise_ops` and `lower_tile_ops` ask
`parse(stmt)` for the op of a statement and call its hooks, and the pipelining passes ask it what
it writes, whether it is a load a pipeline may issue ahead (`AsyncLoad`) and whether it runs on the
tensor cores (`Mma`). Adding an op is adding one module (it is found by `tilelang.op`'s import of
every module in the package) and its test.

Regions are the canonical form of buffer arguments: buffer + start + extent per dimension.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

import tvm
from tvm import ir, sym, tirx

from tilelang.errors import UserError
from tilelang.utils.ir import const_int

_REGISTERED: set[str] = set()
_OPS: dict[str, type] = {}  # "tl.<name>" -> its TileOp subclass


def op_name(name: str) -> str:
    return f"tl.{name}"


def register_op(name: str) -> str:
    """Create the TVM Op `tl.<name>` once; returns its full name."""
    full = op_name(name)
    if full not in _REGISTERED:
        # An int, not the enum: the parser's purity check reads it as a plain integer.
        tvm.ir.register_op_attr(full, "TCallEffectKind", tirx.CallEffectKind.Opaque.value)
        tvm.ir.register_op_attr(full, "TScriptPrinterName", f"tl_{name}")
        _REGISTERED.add(full)
    return full


def make_call(name: str, args) -> ir.Call:
    """A `tl.<name>(*args)` statement-call (the parser wraps it in Evaluate)."""
    return ir.Call(ir.Op.get(register_op(name)), list(args), ret_ty="void")


def is_tile_op(call, name: str | None = None) -> bool:
    """Whether `call` is a call to tile op `name` (or to any tile op when `name` is None)."""
    if not isinstance(call, ir.Call) or not isinstance(call.op, ir.Op):
        return False
    return call.op.name == op_name(name) if name else call.op.name in _REGISTERED


class TileOp:
    """A parsed tile-op call, and the op's rules for the passes.

    A subclass sets `name` (the IR op is `tl.<name>`) and overrides what applies to it:

      __init__(call, span)      parse the call's arguments (checked when the kernel was traced)
      fragments()               the fragment buffers it reads or writes
      strict_layouts(...)       layouts it imposes (an instruction's registers, operand swizzles)
      partial_fragments()       replicated fragments whose copies may differ until it combines them
      common_layouts(known)     layouts it derives from its operands' known ones (a reduction)
      expand(analyzer)          element-wise ops: a T.Parallel loop nest, before layout inference
      lower(ctx)                its per-thread code, once layouts are known (`lower_tile_ops`)
      lower_cpu(analyzer)       its code on the CPU: loops over whole tiles, one core per block
                                (`lower_tile_ops_for_cpu`); None: the op has no CPU form
      writes()                  the buffers it writes (the pipelines, the wgmma waits)
      async_load()              a global-to-shared load a pipelined loop may issue ahead
      mma()                     its work on the tensor cores: operands, accumulator, asynchrony

    An op whose `expands` is True is replaced by `expand` before layout inference and never reaches
    `lower`; any other op reaches `lower` with the layouts of its fragments in `ctx`.
    """

    name: ClassVar[str]
    expands: ClassVar[bool] = False
    lower_cpu = None  # a method `(self, analyzer) -> Stmt` in ops that run on the CPU target

    def __init__(self, call: ir.Call, span=None):
        self.call, self.span = call, span

    def describe(self) -> str:
        """How errors name this use of the op."""
        return f"T.{self.name}"

    # ---- layout inference (transform/infer_layout.py) ----

    def fragments(self) -> list:
        """The fragments this op touches; ops sharing fragments are inferred together."""
        return []

    def strict_layouts(self, target, num_threads: int, options) -> tuple[dict, dict]:
        """({fragment: Fragment}, {shared tile: Layout}) this op fixes at the strict level."""
        return {}, {}

    def partial_fragments(self) -> list:
        """Fragments whose copies each hold a partial value until the op combines them (a
        reducer): a loop may write them on some of their copies only."""
        return []

    def infers_layouts(self) -> bool:
        """Whether `common_layouts` must run for this op before lowering (its output has no
        layout otherwise)."""
        return False

    def common_layouts(self, known: dict) -> dict | None:
        """The layouts this op gives its fragments from `known` ({fragment: Fragment}), or None
        while the layouts it starts from are not known yet."""
        return None

    def aliases(self) -> list:
        """(view, source) pairs of buffers this op declares to be one memory (T.reshape / T.view)."""
        return []

    def shared_layouts(self, known: dict) -> dict | None:
        """Layouts of shared tiles this op derives from `known` ({tile: Layout}): a view's from its
        source's and the reverse."""
        return None

    def strict_shared_layouts(self) -> dict:
        """{shared tile: Layout} this op fixes at the strict level, known before layout inference
        runs (the pipeline planner predicts the boxes of a tile's TMA load from it)."""
        return {}

    # ---- pipelining (plan_pipelines, the pipeline injections, place_wgmma_waits) ----

    def writes(self) -> list | None:
        """The buffers this op writes, or None when the op does not say: a pass then assumes what
        is safe for its question (the wgmma waits: every buffer among its regions)."""
        return None

    def async_load(self) -> AsyncLoad | None:
        """When this op only copies a global tile into a shared tile: that load, which a pipelined
        loop may issue ahead of the statements reading the tile (cp.async or TMA)."""
        return None

    def issued_async(self) -> ir.Call:
        """This load (an op with `async_load`) issued asynchronously: cp.async, one commit group
        per pipeline iteration (`inject_cp_async_pipelines`)."""
        raise NotImplementedError(f"T.{self.name} is not an asynchronous load")

    def mma(self) -> Mma | None:
        """When this op multiplies on the tensor cores: its operands and accumulator, and whether
        it may run on after the thread issues it (wgmma)."""
        return None

    def with_wait(self, pending: int, async_operands: bool) -> ir.Call:
        """This op (one with `mma`) waiting at its end until at most `pending` of the thread's
        asynchronous groups run (-1: no wait); with `async_operands`, its shared operands are
        written only through the async proxy (TMA) and need no proxy fence."""
        raise NotImplementedError(f"T.{self.name} does not run on the tensor cores")

    def with_clear(self, clear) -> ir.Call:
        """This op (one with `mma`) starting from a zero accumulator when `clear` holds (a bool,
        or a run-time condition evaluated when it starts)."""
        raise NotImplementedError(f"T.{self.name} does not run on the tensor cores")

    # ---- lowering ----

    def expand(self, analyzer) -> tirx.Stmt:
        """The op as a `T.Parallel` loop nest (ops with `expands`)."""
        raise NotImplementedError(f"T.{self.name} does not expand to loops")

    def lower(self, ctx) -> tirx.Stmt:
        """The op's per-thread code (`ctx` is a `transform.lower_tile_ops.LowerContext`)."""
        raise NotImplementedError(f"T.{self.name} has no lowering")


@dataclass(frozen=True)
class AsyncLoad:
    """A tile op that only copies a global tile into a shared tile (`TileOp.async_load`)."""

    src: Region
    dst: Region
    tma: bool = True  # whether the TMA unit may do it (`T.copy(disable_tma=True)`: no)


@dataclass(frozen=True)
class Mma:
    """A tile op's work on the tensor cores (`TileOp.mma`), what the pipelines and the wgmma waits
    ask of it: a statement touching the accumulator or the register operand, or writing a shared
    operand, must wait while an asynchronous one runs."""

    accumulator: Region  # the fragment it accumulates into
    register_operand: object  # the A operand when it is a fragment (read from registers), else None
    shared_operands: tuple  # the shared tiles it reads
    asynchronous: bool  # issued as wgmma: it may run on after the thread moves on (`with_wait`)
    wait: int  # groups that may still run when it returns: 0; -1 with the user's own T.wait_wgmma
    clear: object  # start from zero: True/False, or a run-time condition
    row_warpgroups: int = 0  # warpgroups splitting its rows (wgmma), 0 otherwise


def register(cls: type) -> type:
    """Class decorator: `cls` (a TileOp subclass) becomes the op of calls to `tl.<cls.name>`."""
    full = register_op(cls.name)
    if full in _OPS and _OPS[full] is not cls:
        raise RuntimeError(f"tile op {full} is registered twice: {_OPS[full].__module__} and {cls.__module__}")
    _OPS[full] = cls
    return cls


def parse(node, span=None) -> TileOp | None:
    """The TileOp of a statement (`Evaluate` of a tile-op call) or call, or None for anything else."""
    if isinstance(node, tirx.Evaluate):
        node, span = node.value, node.span if span is None else span
    if not isinstance(node, ir.Call) or not isinstance(node.op, ir.Op):
        return None
    cls = _OPS.get(node.op.name)
    return cls(node, span) if cls is not None else None


def is_buffer(x) -> bool:
    return isinstance(x, ir.Var) and tirx.is_buffer_var(x)


@dataclass
class Region:
    """A rectangular part of a buffer: `buffer[starts[d] : starts[d] + extents[d]]` per dimension."""

    buffer: object
    starts: list
    extents: list

    @property
    def name(self) -> str:
        return self.buffer.name

    def to_ir(self) -> ir.TensorRegion:
        ranges = [ir.Range.from_min_extent(s, e) for s, e in zip(self.starts, self.extents)]
        return tirx.BufferRegion(self.buffer, ranges)

    @staticmethod
    def from_ir(region: ir.TensorRegion) -> Region:
        return Region(region.source, [r.min for r in region.region], [r.extent for r in region.region])

    def nonunit_extents(self) -> list:
        """Extents other than the constant 1, in order: the shape this region has as a tile."""
        return [e for e in self.extents if not (isinstance(e, tirx.IntImm) and e.value == 1)]

    def describe(self) -> str:
        dims = ", ".join(_fmt_range(s, e) for s, e in zip(self.starts, self.extents))
        return f"{self.name}[{dims}]"


def extents_differ(a, b) -> bool:
    """Whether two tile extents are provably different (constants that differ, or an inequality the
    analyzer proves). Extents it cannot decide yet (`kv_end - kv_start` of two bound values) are
    checked again once the bindings are known (`check_same_extents`)."""
    if const_int(a) is not None and const_int(b) is not None:
        return const_int(a) != const_int(b)
    return sym.Analyzer().can_prove(a != b)


def same_extent(a, b) -> bool:
    """Whether two tile extents are equal: as constants, or provably (dynamic extents such as `m`)."""
    if const_int(a) is not None and const_int(b) is not None:
        return const_int(a) == const_int(b)
    return sym.Analyzer().can_prove_equal(a, b)


def _fmt_range(start, extent) -> str:
    if isinstance(extent, tirx.IntImm) and extent.value == 1:
        return str(start)
    return f"{start}:{start} + {extent}"


def _as_prim(x):
    return tirx.const(x, "int32") if isinstance(x, int) else x


def to_region(arg, what: str, like: Region | None = None) -> Region | None:
    """Normalise a tile-op argument to a Region.

    Accepts a whole buffer, a slice (`A[b, 0:64, h, :]`), or a start element (`A[by * 64, k * 32]`),
    whose extents are taken from `like` (right-aligned; leading dims get extent 1). Returns None
    for a start element when `like` is not known yet.
    """
    if hasattr(arg, "scalar") and isinstance(arg.scalar, ir.TensorLoad):
        arg = arg.scalar  # T.alloc_var
    if is_buffer(arg):
        return Region(arg, [_as_prim(0) for _ in arg.shape], list(arg.shape))
    if isinstance(arg, ir.TensorRegion):
        return Region.from_ir(arg)
    if isinstance(arg, ir.TensorLoad):
        buf, starts = arg.source, list(arg.indices)
        if like is None:
            return None
        tile = like.nonunit_extents() or [_as_prim(1)]
        if len(tile) > len(starts):
            raise UserError(
                f"{what}: {buf.name} is indexed with {len(starts)} coordinates, but the other side "
                f"{like.describe()} is a {len(tile)}-d tile"
            )
        extents = [_as_prim(1)] * (len(starts) - len(tile)) + list(tile)
        return Region(buf, starts, extents)
    raise UserError(f"{what}: expected a buffer, a slice of a buffer or a start element, got {arg!r}")


def to_region_pair(src, dst, what: str) -> tuple[Region, Region]:
    """Regions of two operands, one of which may be given as a start element."""
    s = to_region(src, f"{what} source")
    d = to_region(dst, f"{what} destination", like=s)
    if s is None:
        if d is None:
            raise UserError(f"{what}: source and destination are both single elements; give a slice or a buffer")
        s = to_region(src, f"{what} source", like=d)
    return s, d

"""`T.gemm(A, B, C, transpose_A, transpose_B, policy, clear_accum, k_pack)`: C += A @ B on tensor cores.

A and B are shared tiles or fragments (ss, rs, sr); C is a fragment. The package:
  __init__      the user function, the parsed op (`Gemm`), and the dispatch below
  instructions  which mma.sync shape a (target, dtypes) pair uses (a registry)
  selection     mma.sync or wgmma for one gemm, recorded on its call (select_gemm_instructions)
  policy        `T.GemmWarpPolicy` and the warp partition
  mma           mma.sync: register layouts, operand swizzles, the template call
  wgmma         wgmma (sm_90a): the warpgroup plan, its layouts and template call

Layout rule (strict level): C, and A or B when they are fragments, get the register layouts of the
instruction recorded on the call (`selection`: wgmma where `wgmma.plan` gives a plan, else
mma.sync); shared operands get the swizzle that instruction reads them with. Lowering: the
instruction's device intrinsic (`tilelang/intrinsics.py`).
"""

from __future__ import annotations

from tvm import tirx

from tilelang import intrinsics
from tilelang.errors import CompilerError, UserError, at_span
from tilelang.op import base
from tilelang.op.gemm import mma, selection, wgmma
from tilelang.op.gemm.policy import GemmWarpPolicy
from tilelang.utils.ir import i32 as _c

NAME = "gemm"
__all__ = ["gemm", "wgmma_gemm", "wait_wgmma", "GemmWarpPolicy"]


def gemm(
    A,
    B,
    C,
    transpose_A=False,
    transpose_B=False,
    policy=GemmWarpPolicy.Square,
    clear_accum=False,
    k_pack=1,
    wg_wait=0,
    mbar=None,
    annotations=None,
):
    """C += A @ B (A^T / B^T with the transpose flags); with clear_accum, C = A @ B. clear_accum
    may be a run-time condition (`clear_accum=k == 0` in a loop over K).

    Args:
        A: (M, K) or, transposed, (K, M): a shared tile or a fragment.
        B: (K, N) or, transposed, (N, K): a shared tile or a fragment.
        C: (M, N) fragment, the accumulator.
        policy: T.GemmWarpPolicy.Square / FullRow / FullCol.
        clear_accum: start from zero (a bool, or a run-time condition).
        k_pack: 1 (other packings are refused).
        wg_wait: on wgmma, how many of this thread's gemms may still run at return (0; -1 with
            T.wait_wgmma later).
        mbar, annotations: sm_100 (tcgen05) arguments: refused with a UserError.

    Errors: UserError on shapes that do not chain, wrong memory scopes, or (when compiled) dtypes
    the target's tensor cores cannot multiply and tiles the instruction shape does not divide.

    Example:
        T.gemm(A_shared, B_shared, C_local)
        T.gemm(Q_shared, K_shared, S_local, transpose_B=True, policy=T.GemmWarpPolicy.FullRow)
    """
    if mbar is not None:
        raise UserError(
            "T.gemm: mbar is the completion barrier of sm_100's tcgen05 MMA, which tilelang does not target; "
            "on sm_80/sm_90a a gemm's result is ready after the call (or after T.wait_wgmma): drop mbar"
        )
    if annotations:
        raise UserError(
            f"T.gemm: annotations {sorted(annotations)} are not supported here (the public TileLang reads them "
            f"for sm_100's tcgen05 MMA, e.g. use_2cta); drop them"
        )
    a, b, c = (base.to_region(x, f"T.gemm {n}") for x, n in ((A, "A"), (B, "B"), (C, "C")))
    for r, n in ((a, "A"), (b, "B"), (c, "C")):
        if r is None:
            raise UserError(f"T.gemm: {n} must be a buffer, not a single element")
    if c.buffer.scope() != "local.fragment":
        raise UserError(
            f"T.gemm: the accumulator C ('{c.name}') must be a fragment (T.alloc_fragment), "
            f"not {c.buffer.scope()} memory"
        )
    for r, n in ((a, "A"), (b, "B")):
        if r.buffer.scope() not in ("shared.dyn", "shared", "local.fragment"):
            raise UserError(f"T.gemm: {n} ('{r.name}') must be a shared tile or a fragment")
    if a.buffer.scope() == "local.fragment" and b.buffer.scope() == "local.fragment":
        raise UserError("T.gemm: A and B cannot both be fragments; keep one in shared memory")
    a_shape, b_shape, c_shape = ([int(x) for x in r.nonunit_extents()] for r in (a, b, c))
    if len(a_shape) != 2 or len(b_shape) != 2 or len(c_shape) != 2:
        raise UserError(f"T.gemm: A, B and C must be 2-d tiles, got {a_shape}, {b_shape}, {c_shape}")
    M, K = (a_shape[1], a_shape[0]) if transpose_A else tuple(a_shape)
    K2, N = (b_shape[1], b_shape[0]) if transpose_B else tuple(b_shape)
    if K != K2 or [M, N] != c_shape:
        raise UserError(
            f"T.gemm: shapes do not chain: A is {a_shape}{' (transposed)' if transpose_A else ''}, "
            f"B is {b_shape}{' (transposed)' if transpose_B else ''}, C is {c_shape}; "
            f"need A (M, K), B (K, N), C (M, N)"
        )
    if int(k_pack) != 1:
        raise UserError("T.gemm: k_pack other than 1 is not supported on this target")
    args = [
        a.to_ir(),
        b.to_ir(),
        c.to_ir(),
        tirx.const(int(bool(transpose_A)), "int32"),
        tirx.const(int(bool(transpose_B)), "int32"),
        tirx.const(int(policy), "int32"),
        tirx.const(int(bool(clear_accum)), "int32") if isinstance(clear_accum, (bool, int)) else clear_accum,
        tirx.const(int(wg_wait), "int32"),
    ]
    return base.make_call(NAME, args)


def wgmma_gemm(A, B, C, transpose_A=False, transpose_B=False, policy=GemmWarpPolicy.Square, clear_accum=False):
    """C += A @ B on Hopper's wgmma, issued without waiting for it (the public TileLang's explicit
    form): `T.gemm(..., wg_wait=-1)` that must run as wgmma. C may be read, and A and B written,
    only after `T.wait_wgmma`.

    Errors: the UserErrors of T.gemm, and (when compiled) one at this line where the gemm cannot
    run as wgmma (a target before sm_90a, dtypes, shapes or warpgroups wgmma does not take, or a
    shared operand another gemm reads with mma.sync): use T.gemm there.

    Example:
        T.wgmma_gemm(Q_shared, K_shared, acc_s, transpose_B=True)
        T.wgmma_gemm(Q_tail_shared, K_tail_shared, acc_s, transpose_B=True)
        T.wait_wgmma(0)
    """
    call = gemm(A, B, C, transpose_A, transpose_B, policy, clear_accum, wg_wait=-1)
    # async_operands (set later by the pipeline planner) 0, wgmma_only 1.
    return base.make_call(NAME, list(call.args) + [tirx.const(0, "int32"), tirx.const(1, "int32")])


def wait_wgmma(pending: int = 0):
    """Wait until at most `pending` of this thread's asynchronous wgmma gemms (issued with
    `wg_wait=-1`) are still running; their accumulators may be read after it.

    Example:
        T.gemm(A_shared, B_shared, C_local, wg_wait=-1)
        ...                                   # work that does not touch C_local
        T.wait_wgmma(0)
    """
    return intrinsics.WGMMA_WAIT.call({"pending": int(pending)})


def is_gemm(stmt) -> bool:
    """Whether `stmt` is a `T.gemm` statement (tile-op level)."""
    return isinstance(stmt, tirx.Evaluate) and base.is_tile_op(stmt.value, NAME)


@base.register
class Gemm(base.TileOp):
    """A parsed `tl.gemm` call with its shape."""

    name = NAME

    def __init__(self, call, span=None):
        super().__init__(call, span)
        self.a, self.b, self.c = (base.Region.from_ir(call.args[k]) for k in range(3))
        self.trans_a, self.trans_b = bool(int(call.args[3].value)), bool(int(call.args[4].value))
        self.policy = GemmWarpPolicy(int(call.args[5].value))
        # True/False, or a run-time condition (`fold_accumulator_clear`): start from zero when it holds.
        clear = call.args[6]
        self.clear = bool(int(clear.value)) if isinstance(clear, tirx.IntImm) else clear
        # wgmma only: how many of this thread's wgmma groups may still run when the call returns
        # (0: all done; -1: no wait, T.wait_wgmma later). mma.sync gemms always complete.
        self.wg_wait = int(call.args[7].value) if len(call.args) > 7 else 0
        # Set by the pipeline planner when both operands are written only by TMA (async proxy),
        # so the wgmma needs no proxy fence before reading them.
        self.async_operands = bool(int(call.args[8].value)) if len(call.args) > 8 else False
        # T.wgmma_gemm: an error, not mma.sync, where wgmma does not apply.
        self.wgmma_only = bool(int(call.args[9].value)) if len(call.args) > 9 else False
        # The instruction and its plan (mma.Plan or wgmma.Plan) `select_gemm_instructions` recorded
        # on the call; None before it runs.
        self.plan = selection.recorded(call)
        self.M, self.N = (int(x) for x in self.c.nonunit_extents())
        a_shape = [int(x) for x in self.a.nonunit_extents()]
        self.K = a_shape[0] if self.trans_a else a_shape[1]

    @property
    def kind(self) -> str:
        return ("r" if self.a.buffer.scope() == "local.fragment" else "s") + (
            "r" if self.b.buffer.scope() == "local.fragment" else "s"
        )

    def fragments(self) -> list:
        return [r.buffer for r in (self.a, self.b, self.c) if r.buffer.scope() == "local.fragment"]

    def describe(self) -> str:
        return f"T.gemm({self.a.name}, {self.b.name}, {self.c.name})"

    def strict_layouts(self, target, num_threads: int, options) -> tuple[dict, dict]:
        """The instruction's register layouts for C (and a fragment A or B), and the swizzles it
        reads shared operands with (the instruction recorded on the call)."""
        return layouts(self, num_threads, self.span), shared_layouts(self)

    def strict_shared_layouts(self) -> dict:
        return shared_layouts(self)

    def writes(self) -> list:
        return [self.c.buffer]

    def mma(self) -> base.Mma:
        a_regs = self.a.buffer if self.a.buffer.scope() == "local.fragment" else None
        shared = tuple(r.buffer for r in (self.a, self.b) if r.buffer.scope().startswith("shared"))
        on_wgmma = isinstance(self.plan, wgmma.Plan)
        rows = self.plan.wg_m if on_wgmma else 0
        return base.Mma(self.c, a_regs, shared, on_wgmma, self.wg_wait, self.clear, rows)

    def with_wait(self, pending: int, async_operands: bool):
        own = list(self.call.args[:7]) + [_c(pending), _c(int(async_operands)), _c(int(self.wgmma_only))]
        return selection.with_own_args(self.call, own)

    def with_clear(self, clear):
        args = list(self.call.args)
        args[6] = _c(int(clear)) if isinstance(clear, (bool, int)) else clear
        return base.make_call(NAME, args)

    def lower(self, ctx) -> tirx.Stmt:
        return _lower(self, ctx)

    def lower_cpu(self, analyzer) -> tirx.Stmt:
        from tilelang.op.gemm import cpu

        return cpu.lower_cpu(self)


def _plan(g: Gemm):
    if g.plan is None:
        raise CompilerError(f"{g.describe()} has no instruction: select_gemm_instructions runs before its readers")
    return g.plan


def layouts(g: Gemm, num_threads: int, span=None) -> dict:
    """The register layouts this gemm imposes: {buffer: Fragment} for C and fragment operands."""
    p = _plan(g)
    if isinstance(p, wgmma.Plan):
        out = {g.c.buffer: wgmma.c_fragment(g, p, num_threads)}
        if g.a.buffer.scope() == "local.fragment":
            out[g.a.buffer] = wgmma.a_fragment(g, p, num_threads)
        return out
    return mma.layouts(g, p, num_threads, span)


def shared_layouts(g: Gemm) -> dict:
    """{shared operand buffer: Layout} that the instruction reads them with."""
    p = _plan(g)
    return wgmma.shared_layouts(g, p) if isinstance(p, wgmma.Plan) else mma.shared_layouts(g, p)


def pointer(region, ctx, rw: int):
    """A typed pointer to the region's first element, marked read/write for barrier insertion."""
    buf = region.buffer
    if ctx.has_local(buf):
        buf = ctx.local_of(buf)
        offset, extent = _c(0), _c(int(buf.shape[0]))
    else:
        offset = _c(0)
        stride = 1
        for s, n in reversed(list(zip(region.starts, buf.shape))):
            offset = offset + s * _c(stride)
            stride *= int(n)
        extent = _c(stride)
    return tirx.tvm_access_ptr(tirx.type_annotation(str(buf.dtype)), buf.data, offset, extent, rw)


def _lower(g: Gemm, ctx) -> tirx.Stmt:
    # Its instruction and shapes were checked by `select_gemm_instructions`.
    span = g.span
    args = [pointer(g.a, ctx, 1), pointer(g.b, ctx, 1), pointer(g.c, ctx, 3)]
    clear = [] if isinstance(g.clear, bool) else [g.clear]  # a run-time clear is the calls' last argument
    p = _plan(g)
    if not isinstance(p, wgmma.Plan):
        return mma.call(g, p, ctx, args, clear, span)
    offset = ctx.thread_offset  # the first thread of the `if tx >= n` branch it is in
    if offset % 128:
        raise at_span(
            f"T.gemm on Hopper runs on whole warpgroups, but the thread branch it is in starts at "
            f"thread {offset}, not a multiple of 128",
            span,
        )
    wg = ctx.warpgroup_index()
    return wgmma.call(g, p, args, wg - offset // 128 if offset else wg, clear)

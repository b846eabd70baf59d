"""`T.gemm(A, B, C, transpose_A, transpose_B, policy, clear_accum, k_pack)`: C += A @ B on tensor cores.

A and B are shared tiles or fragments (ss, rs, sr); C is a fragment. The warps of the block tile
C's M x N as WarpM x WarpN (`GemmWarpPolicy`); each warp runs 16 x 8 mma.sync atoms over its part.

Layout rule (strict level): C, and A or B when they are fragments, get the register layouts the
device template uses (`src/tl_templates/cuda/gemm_mma.h`); a fragment A is replicated over the
warps that share its rows, a fragment B over the warps that share its columns.
Lowering: a call to `tl::gemm_ss/rs/sr<M, N, K, WarpM, WarpN, ...>(A, B, C)`.
"""

from __future__ import annotations

import enum

from tvm import tirx

from tilelang.language.diagnostics import UserError, at_span
from tilelang.language.dtypes import bits as dtype_bits
from tilelang.layout import fragment as fl
from tilelang.op import base, gemm_wgmma
from tilelang.op import gemm_instructions as instructions
from tilelang.utils.ir import i32 as _c

NAME = "gemm"


class GemmWarpPolicy(enum.IntEnum):
    """How the warps of a block tile the M x N output."""

    Square = 0  # as square a warp tile as the shape allows
    FullRow = 1  # all warps along M (each warp owns whole rows)
    FullCol = 2  # all warps along N (each warp owns whole columns)


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

    Errors: UserError on shapes that do not chain, wrong memory scopes, or (when compiled) dtypes
    the target's tensor cores cannot multiply and tiles the instruction shape does not divide.

    Example:
        T.gemm(A_shared, B_shared, C_local)
        T.gemm(Q_shared, K_shared, S_local, transpose_B=True, policy=T.GemmWarpPolicy.FullRow)
    """
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


def wait_wgmma(pending: int = 0):
    """Wait until at most `pending` of this thread's asynchronous wgmma gemms (issued with
    `wg_wait=-1`) are still running; their accumulators may be read after it.

    Example:
        T.gemm(A_shared, B_shared, C_local, wg_wait=-1)
        ...                                   # work that does not touch C_local
        T.wait_wgmma(0)
    """
    return tirx.call_extern("void", f"tl::wgmma_wait<{int(pending)}>")


def is_gemm(stmt) -> bool:
    """Whether `stmt` is a `T.gemm` statement (tile-op level)."""
    return isinstance(stmt, tirx.Evaluate) and base.is_tile_op(stmt.value, NAME)


class Gemm:
    """A parsed `tl.gemm` call with its shape."""

    def __init__(self, call):
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
        self.M, self.N = (int(x) for x in self.c.nonunit_extents())
        a_shape = [int(x) for x in self.a.nonunit_extents()]
        self.K = a_shape[0] if self.trans_a else a_shape[1]

    @property
    def kind(self) -> str:
        return ("r" if self.a.buffer.scope() == "local.fragment" else "s") + (
            "r" if self.b.buffer.scope() == "local.fragment" else "s"
        )

    def fragments(self):
        return [r.buffer for r in (self.a, self.b, self.c) if r.buffer.scope() == "local.fragment"]


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


def layouts(g: Gemm, target, num_threads: int, span=None) -> dict:
    """The register layouts this gemm imposes: {buffer: Fragment} for C and fragment operands."""
    if num_threads % 32:
        raise at_span(f"T.gemm needs whole warps; the kernel has {num_threads} threads", span)
    inst = instructions.select(target, str(g.a.buffer.dtype), str(g.b.buffer.dtype), str(g.c.buffer.dtype))
    if g.K % inst.k:
        raise at_span(
            f"T.gemm: K = {g.K} is not a multiple of {inst.k}, the K of {inst.name}; use a block_K "
            f"that is a multiple of {inst.k}",
            span,
        )
    p = gemm_wgmma.plan(g, target, num_threads)
    if p is not None:
        out = {g.c.buffer: gemm_wgmma.c_fragment(g, p, num_threads)}
        if g.a.buffer.scope() == "local.fragment":
            out[g.a.buffer] = gemm_wgmma.a_fragment(g, p, num_threads)
        return out
    wm, wn = warp_partition(g.M, g.N, num_threads // 32, g.policy, span)
    WM, WN = g.M // wm, g.N // wn
    NI, KT = WN // 8, g.K // inst.k
    out = {}
    i, j = fl.placeholder_vars(2)
    rr, cc = tirx.floormod(i, _c(16)), tirx.floormod(j, _c(8))
    lane = tirx.floormod(rr, _c(8)) * _c(4) + tirx.floordiv(cc, _c(2))
    c_thread = (tirx.floordiv(j, _c(WN)) * _c(wm) + tirx.floordiv(i, _c(WM))) * _c(32) + lane
    c_index = (
        (tirx.floordiv(tirx.floormod(i, _c(WM)), _c(16)) * _c(NI) + tirx.floordiv(tirx.floormod(j, _c(WN)), _c(8)))
        * _c(4)
        + tirx.floordiv(rr, _c(8)) * _c(2)
        + tirx.floormod(cc, _c(2))
    )
    # vector_size 2: each thread holds pairs of adjacent columns in adjacent registers.
    out[g.c.buffer] = fl.Fragment((g.M, g.N), [i, j], c_thread, c_index, num_threads, vector_size=2)
    shape = _WarpTiles(wm, wn, WM, WN, KT, inst.k, num_threads)
    if g.a.buffer.scope() == "local.fragment":
        if g.trans_a:
            raise at_span("T.gemm: an A operand in registers cannot be transposed", span)
        out[g.a.buffer] = _fragment_a(g, shape)
    if g.b.buffer.scope() == "local.fragment":
        if g.trans_b:
            raise at_span("T.gemm: a B operand in registers cannot be transposed", span)
        out[g.b.buffer] = _fragment_b(g, shape)
    return out


class _WarpTiles:
    """The warp tiling of one gemm: WarpM x WarpN warps, each WM x WN of C, KT atoms of k along K."""

    def __init__(self, wm, wn, WM, WN, KT, k, num_threads):
        self.wm, self.wn, self.WM, self.WN, self.KT, self.k, self.num_threads = wm, wn, WM, WN, KT, k, num_threads


def _k_position(k, atom_k: int, pack: int):
    """Where operand column k sits in an mma fragment: (lane % 4, register block, element in register).

    A register packs `pack` consecutive k; lanes t = 0..3 take consecutive registers' worth, and an
    atom's K holds one or two such blocks (PTX ISA, "Matrix Fragments for mma.m16n8k*")."""
    kk = tirx.floormod(k, _c(atom_k))
    lane_col = tirx.floordiv(tirx.floormod(kk, _c(4 * pack)), _c(pack))
    return lane_col, tirx.floordiv(kk, _c(4 * pack)), tirx.floormod(k, _c(pack))


def _fragment_a(g: Gemm, w: _WarpTiles) -> fl.Fragment:
    """A (M, K) in registers: held by the warps of its rows, replicated over the warps along N."""
    pack = 32 // dtype_bits(str(g.a.buffer.dtype))
    m, k = fl.placeholder_vars(2, "a")
    t, block, elem = _k_position(k, w.k, pack)
    reg = block * _c(2) + tirx.floordiv(tirx.floormod(m, _c(16)), _c(8))
    base_thread = tirx.floordiv(m, _c(w.WM)) * _c(32) + tirx.floormod(m, _c(8)) * _c(4) + t
    atom = tirx.floordiv(tirx.floormod(m, _c(w.WM)), _c(16)) * _c(w.KT) + tirx.floordiv(k, _c(w.k))
    index = (atom * _c(4) + reg) * _c(pack) + elem
    groups = [(32 * w.wm, w.wn)] if w.wn > 1 else []
    return fl.Fragment((g.M, g.K), [m, k], base_thread, index, w.num_threads, groups)


def _fragment_b(g: Gemm, w: _WarpTiles) -> fl.Fragment:
    """B (K, N) in registers: held by the warps of its columns, replicated over the warps along M."""
    pack = 32 // dtype_bits(str(g.b.buffer.dtype))
    k, n = fl.placeholder_vars(2, "b")
    t, block, elem = _k_position(k, w.k, pack)
    base_thread = tirx.floordiv(n, _c(w.WN)) * _c(w.wm * 32) + tirx.floormod(n, _c(8)) * _c(4) + t
    atom = tirx.floordiv(tirx.floormod(n, _c(w.WN)), _c(8)) * _c(w.KT) + tirx.floordiv(k, _c(w.k))
    index = (atom * _c(2) + block) * _c(pack) + elem
    groups = [(32, w.wm)] if w.wm > 1 else []
    return fl.Fragment((g.K, g.N), [k, n], base_thread, index, w.num_threads, groups)


def swizzle_bits(region) -> int:
    """Bits of the 16-byte-chunk swizzle the template reads a shared operand with (0: row-major).

    16-bit operands are read with ldmatrix, 8 rows of one 16-byte chunk column at a time; XOR-ing
    the chunk index with the row bits spreads those rows over all banks (CuTe's Swizzle<B, 3, 3>).
    """
    buf = region.buffer
    if buf.scope() == "local.fragment" or dtype_bits(str(buf.dtype)) != 16:
        return 0
    row = int(buf.shape[-1])
    total = 1
    for n in buf.shape:
        total *= int(n)
    if row % 8:
        return 0
    bits = min(3, max(0, (row // 8).bit_length() - 1))
    while bits and total % (64 << bits):
        bits -= 1
    return bits


def shared_layouts(g: Gemm, target=None, num_threads: int | None = None) -> dict:
    """{shared operand buffer: Layout} that the template assumes."""
    from tilelang.layout import layout as sl

    p = gemm_wgmma.plan(g, target, num_threads) if num_threads else None
    if p is not None:
        return gemm_wgmma.shared_layouts(g, p)
    out = {}
    for region in (g.a, g.b):
        bits = swizzle_bits(region)
        if bits:
            out[region.buffer] = sl.swizzle(tuple(int(n) for n in region.buffer.shape), 16, bits)
    return out


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


def lower(call, ctx, span=None) -> tirx.Stmt:
    g = Gemm(call)  # its instruction and shapes were checked by `layouts` at layout inference
    args = [pointer(g.a, ctx, 1), pointer(g.b, ctx, 1), pointer(g.c, ctx, 3)]
    clear = [] if isinstance(g.clear, bool) else [g.clear]  # a run-time clear is the calls' last argument
    p = gemm_wgmma.plan(g, ctx.target, ctx.num_threads)
    offset = ctx.thread_offset  # the first thread of the `if tx >= n` branch it is in
    if p is not None:
        if offset % 128:
            raise at_span(
                f"T.gemm on Hopper runs on whole warpgroups, but the thread branch it is in starts at "
                f"thread {offset}, not a multiple of 128",
                span,
            )
        name = gemm_wgmma.call_name(g, p)
        wg = ctx.warpgroup_index()
        return tirx.Evaluate(tirx.call_extern("void", name, *args, wg - offset // 128 if offset else wg, *clear))
    if offset % ctx.num_threads:  # the template's warp index is threadIdx.x / 32 modulo its warps
        raise at_span(
            f"T.gemm: the thread branch it is in spans threads [{offset}, {offset + ctx.num_threads}); "
            f"with mma.sync it must start at a multiple of its {ctx.num_threads} threads",
            span,
        )
    wm, wn = warp_partition(g.M, g.N, ctx.num_threads // 32, g.policy, span)
    lda, ldb = int(g.a.buffer.shape[-1]), int(g.b.buffer.shape[-1])

    def flag(x):
        return "true" if x else "false"

    name = (
        f"tl::gemm_{g.kind}<{g.M}, {g.N}, {g.K}, {wm}, {wn}, {flag(g.trans_a)}, {flag(g.trans_b)}, "
        f"{flag(g.clear is True)}, {lda}, {ldb}, {swizzle_bits(g.a)}, {swizzle_bits(g.b)}>"
    )
    return tirx.Evaluate(tirx.call_extern("void", name, *args, *clear))

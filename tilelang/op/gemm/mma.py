"""`T.gemm` on mma.sync (sm_80 and later; on sm_90a when wgmma does not apply): register layouts,
operand swizzles and the template call.

A shared operand is read in the template's own swizzle (`swizzle_bits`), or, when a wgmma gemm of
the kernel reads the same tile (an attention backward's K tile: a wgmma A operand, and the B operand
of a dQ gemm with too few rows for wgmma), in the wgmma panels (`Plan.panels_a/b`, chosen by
`select_gemm_instructions`): ldmatrix reads 16-byte rows, which both layouts keep whole.

The warps of the block tile C's M x N as WarpM x WarpN (`policy.warp_partition`); each warp runs
16 x 8 mma.sync atoms over its part. C, and A or B when they are fragments, get the register layouts
the device template uses (`src/tl_templates/cuda/gemm_mma.h`); a fragment A is replicated over the
warps that share its rows, a fragment B over the warps that share its columns.
"""

from __future__ import annotations

from dataclasses import dataclass

from tvm import tirx

from tilelang import intrinsics
from tilelang.dtypes import bits as dtype_bits
from tilelang.errors import at_span
from tilelang.layout import fragment as fl
from tilelang.layout import layout as sl
from tilelang.op.gemm.policy import warp_partition
from tilelang.utils.ir import i32 as _c


@dataclass(frozen=True)
class Plan:
    """How a gemm runs as mma.sync: warps along M and N, the K of one instruction, and for a shared
    operand that a wgmma gemm reads too, the swizzle bits of the wgmma panels it is stored in (0: the
    template's own row swizzle, `swizzle_bits`)."""

    warp_m: int
    warp_n: int
    k: int
    panels_a: int = 0
    panels_b: int = 0


def plan(g, inst, num_threads: int, span=None) -> Plan:
    """The mma.sync plan of gemm `g` on instruction `inst` (`instructions.select`)."""
    wm, wn = warp_partition(g.M, g.N, num_threads // 32, g.policy, span)
    return Plan(wm, wn, inst.k)


def layouts(g, p: Plan, num_threads: int, span=None) -> dict:
    """{buffer: Fragment} for C and the fragment operands, for mma.sync plan `p`."""
    wm, wn = p.warp_m, p.warp_n
    WM, WN = g.M // wm, g.N // wn
    KT = g.K // p.k
    out = {g.c.buffer: c_fragment(g.M, g.N, wm, wn, num_threads)}
    shape = _WarpTiles(wm, wn, WM, WN, KT, p.k, num_threads)
    if g.a.buffer.scope() == "local.fragment":
        if g.trans_a:
            raise at_span("T.gemm: an A operand in registers cannot be transposed", span)
        out[g.a.buffer] = _fragment_a(g, shape)
    if g.b.buffer.scope() == "local.fragment":
        if g.trans_b:
            raise at_span("T.gemm: a B operand in registers cannot be transposed", span)
        out[g.b.buffer] = _fragment_b(g, shape)
    return out


def c_fragment(M: int, N: int, wm: int, wn: int, num_threads: int) -> fl.Fragment:
    """The accumulator layout of an M x N tile of 16 x 8 mma atoms over wm x wn warps (gemm_mma.h's;
    T.gemm_sp's mma.sp atoms hold theirs the same way)."""
    WM, WN = M // wm, N // wn
    NI = WN // 8
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
    return fl.Fragment((M, N), [i, j], c_thread, c_index, num_threads, vector_size=2)


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


def _fragment_a(g, w: _WarpTiles) -> fl.Fragment:
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


def _fragment_b(g, w: _WarpTiles) -> fl.Fragment:
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

    16-bit operands are read with ldmatrix, 8 rows of one 16-byte chunk column at a time; 32-bit
    ones (tf32, int32) one element a lane, 8 rows of one column (or 4 of one chunk) at a time. XOR-ing
    the chunk index with the row bits spreads those rows over all banks (CuTe's Swizzle<B, 3, 3> for
    16-bit elements, <B, 2, 3> for 32-bit): unswizzled, a float32 tile of 256-float rows puts 8 rows
    in one bank (the public mHC pre-norm GEMM: 2.3x the wheel's time).
    """
    buf = region.buffer
    bits_of = dtype_bits(str(buf.dtype))
    if buf.scope() == "local.fragment" or bits_of not in (16, 32):
        return 0
    chunk = 128 // bits_of  # elements per 16-byte chunk
    row = int(buf.shape[-1])
    total = 1
    for n in buf.shape:
        total *= int(n)
    if row % chunk:
        return 0
    bits = min(3, max(0, (row // chunk).bit_length() - 1))
    while bits and total % ((chunk * 8) << bits):
        bits -= 1
    return bits


def can_read_panels(region, bits: int) -> bool:
    """Whether the template can read shared operand `region` from a tile in wgmma panels of
    swizzle `bits`: 16-bit elements (ldmatrix), the region whole tiles of the buffer (its last two
    dimensions start at 0), rows that are whole panels."""
    buf = region.buffer
    if buf.scope() == "local.fragment" or dtype_bits(str(buf.dtype)) != 16 or not 1 <= bits <= 3:
        return False
    if len(buf.shape) < 2 or any(not (isinstance(s, tirx.IntImm) and s.value == 0) for s in region.starts[-2:]):
        return False
    return int(buf.shape[-1]) % (8 << bits) == 0


def shared_layouts(g, p: Plan | None = None) -> dict:
    """{shared operand buffer: Layout} that the template reads them with."""
    out = {}
    for region, panels in ((g.a, p.panels_a if p else 0), (g.b, p.panels_b if p else 0)):
        shape = tuple(int(n) for n in region.buffer.shape)
        if panels:
            out[region.buffer] = sl.gmma_panels(shape, 16, panels)
            continue
        bits = swizzle_bits(region)
        if bits:
            out[region.buffer] = sl.swizzle(shape, dtype_bits(str(region.buffer.dtype)), bits)
    return out


_INTRINSICS = {"ss": intrinsics.GEMM_SS, "rs": intrinsics.GEMM_RS, "sr": intrinsics.GEMM_SR}


def call(g, p: Plan, ctx, args, clear, span=None) -> tirx.Stmt:
    """The gemm_<kind> template (gemm_mma.h) on A, B, C over the block's (or branch's) warps."""
    offset = ctx.thread_offset  # the first thread of the `if tx >= n` branch it is in
    if offset % ctx.num_threads:  # the template's warp index is threadIdx.x / 32 modulo its warps
        raise at_span(
            f"T.gemm: the thread branch it is in spans threads [{offset}, {offset + ctx.num_threads}); "
            f"with mma.sync it must start at a multiple of its {ctx.num_threads} threads",
            span,
        )
    template = dict(
        M=g.M,
        N=g.N,
        K=g.K,
        warp_m=p.warp_m,
        warp_n=p.warp_n,
        trans_a=g.trans_a,
        trans_b=g.trans_b,
        clear=g.clear is True,
        lda=int(g.a.buffer.shape[-1]),
        ldb=int(g.b.buffer.shape[-1]),
        swz_a=p.panels_a or swizzle_bits(g.a),
        swz_b=p.panels_b or swizzle_bits(g.b),
        rows_a=int(g.a.buffer.shape[-2]) if p.panels_a else 0,
        rows_b=int(g.b.buffer.shape[-2]) if p.panels_b else 0,
    )
    return _INTRINSICS[g.kind].stmt(template, *args, *clear)

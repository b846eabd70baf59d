"""`T.gemm_sp(A_sparse, E, B, C, ...)`: C += A @ B on the sparse tensor cores (mma.sp, sm_80 and later,
sm_90a included), where A is 2:4 structured-sparse and given compressed.

The compressed form is the one the public TileLang's compressors write (`sparse_utils.compress` of its
gemm_sp example, and its torch reference): along K, every group of four elements of A keeps two (in
order) in A_sparse, (M, K/2); E, (M, K / e_factor) of an 8-, 16- or 32-bit integer type, gives each
group 4 bits, bits 1:0 the position (0-3) of the first kept element and 3:2 of the second, the groups of a
row in K order from the low bits of its first element on. One element of E thus covers as many columns
of A as it has bits: e_factor = 16 for int16 (`tilelang.cuda.intrinsics.sparse_layout.get_e_factor`).
With transpose_E, E is stored K-major, (K / e_factor, M).

Pipeline: the user function checks shapes, dtypes and scopes while the kernel is traced. Layout
inference takes the op's strict layouts: C gets the accumulator layout of T.gemm's mma.sync atoms (an
mma.sp atom holds C the same way), a fragment A or B the sparse instruction's operand layout, shared A
and B the swizzle gemm_mma.h reads them with; E stays row-major. `lower_tile_ops` emits
tl::gemm_sp_<ss|rs|sr|rr> (src/tl_templates/cuda/gemm_sp.h), which reads each atom's metadata register
straight from E. The instruction comes from `REGISTRY` by (target, dtypes); no match and several
matches are both errors.

wgmma.sp is not used: on sm_90a T.gemm_sp runs mma.sp too, and T.wgmma_gemm_sp, which asks for
wgmma.sp explicitly, is a UserError.
"""

from __future__ import annotations

from dataclasses import dataclass

from tvm import tirx

from tilelang import intrinsics
from tilelang.dtypes import bits as dtype_bits
from tilelang.errors import UserError, at_span
from tilelang.layout import fragment as fl
from tilelang.layout import layout as sl
from tilelang.op import base
from tilelang.op.gemm import mma, pointer
from tilelang.op.gemm.policy import GemmWarpPolicy, warp_partition
from tilelang.utils.ir import i32 as _c
from tilelang.utils.target import arch_of, compute_capability

NAME = "gemm_sp"
__all__ = ["gemm_sp", "wgmma_gemm_sp", "tcgen05_gemm_sp"]

_METADATA_DTYPES = ("int8", "int16", "int32", "uint8", "uint16", "uint32")


@dataclass(frozen=True)
class SparseMma:
    """A 16 x 8 x k mma.sp shape: `k` counts A's columns before compression."""

    name: str
    k: int
    a_dtypes: tuple
    c_dtypes: tuple
    min_cc: int

    def matches(self, cc: int, a_dtype: str, c_dtype: str) -> bool:
        return cc >= self.min_cc and a_dtype in self.a_dtypes and c_dtype in self.c_dtypes


REGISTRY = [
    SparseMma("mma.sp.m16n8k32 (fp16)", 32, ("float16",), ("float32", "float16"), 80),
    SparseMma("mma.sp.m16n8k32 (bf16)", 32, ("bfloat16",), ("float32",), 80),
    SparseMma("mma.sp.m16n8k64 (int8)", 64, ("int8",), ("int32",), 80),
    SparseMma("mma.sp.m16n8k64 (fp8)", 64, ("float8_e4m3", "float8_e4m3fn", "float8_e5m2"), ("float32",), 89),
]
_SPARSE_DTYPES = tuple(dict.fromkeys(d for m in REGISTRY for d in m.a_dtypes))


def select(target, a_dtype: str, c_dtype: str) -> SparseMma:
    """The one sparse instruction for these dtypes on `target`; UserError when there is none."""
    cc = compute_capability(target)
    hits = [m for m in REGISTRY if m.matches(cc, a_dtype, c_dtype)]
    if len(hits) > 1:
        raise RuntimeError(f"gemm_sp instruction registry: several entries match {a_dtype} -> {c_dtype}: {hits}")
    if not hits:
        supported = ", ".join(f"{'/'.join(m.a_dtypes)} -> {'/'.join(m.c_dtypes)} (sm_{m.min_cc}+)" for m in REGISTRY)
        raise UserError(
            f"T.gemm_sp: no sparse tensor-core instruction on {arch_of(target)} multiplies {a_dtype} into "
            f"{c_dtype}; supported: {supported}"
        )
    return hits[0]


def e_factor(a_dtype: str, e_dtype: str) -> int:
    """Columns of A (before compression) one element of E describes: 4 bits per group of four columns,
    so as many columns as E's element has bits (the public `get_e_factor` for 8- and 16-bit A)."""
    del a_dtype  # every A type here is 2:4 sparse, groups of four
    return dtype_bits(e_dtype)


def gemm_sp(
    A_sparse,
    E,
    B,
    C,
    transpose_A=False,
    transpose_E=False,
    transpose_B=False,
    policy=GemmWarpPolicy.Square,
    clear_accum=False,
    k_pack=1,
    wg_wait=0,
):
    """C += A @ B, A 2:4 structured-sparse: given as A_sparse (its kept elements) and E (their positions),
    in the form the public TileLang's `compress` writes (this module's docstring); with clear_accum,
    C = A @ B (a bool, or a run-time condition).

    Args:
        A_sparse: (M, K/2), or (K/2, M) with transpose_A: a shared tile or a fragment.
        E: (M, K / e_factor), or (K / e_factor, M) with transpose_E: a shared tile of int8/int16/int32.
        B: (K, N), or (N, K) with transpose_B: a shared tile or a fragment.
        C: (M, N) fragment, the accumulator.
        policy: T.GemmWarpPolicy, how the warps tile C.
        k_pack: 1. wg_wait: accepted for the public signature; mma.sp finishes within the call.

    Errors: UserError on shapes that do not chain (E's included), scopes, dtypes without a sparse
    instruction, and (when compiled) a target below what the dtypes need or a K the instruction
    does not divide.

    Example:
        e_factor = get_e_factor(T.float16, T.int16)            # 16
        E_s = T.alloc_shared((block_M, block_K // e_factor), T.int16)
        T.gemm_sp(A_s, E_s, B_s, C_f)                          # A_s: (block_M, block_K // 2)
    """
    named = (("A_sparse", A_sparse), ("E", E), ("B", B), ("C", C))
    a, e, b, c = (base.to_region(x, f"T.gemm_sp {n}") for n, x in named)
    for r, (n, _) in zip((a, e, b, c), named):
        if r is None:
            raise UserError(f"T.gemm_sp: {n} must be a buffer or a slice of one, not a single element")
    _check_scopes(a, e, b, c)
    _check_dtypes(a, e, b)
    _check_shapes(a, e, b, c, transpose_A, transpose_E, transpose_B)
    if int(k_pack) != 1:
        raise UserError("T.gemm_sp: k_pack other than 1 is not supported; drop it")
    args = [
        a.to_ir(),
        e.to_ir(),
        b.to_ir(),
        c.to_ir(),
        _c(int(bool(transpose_A))),
        _c(int(bool(transpose_E))),
        _c(int(bool(transpose_B))),
        _c(int(policy)),
        _c(int(bool(clear_accum))) if isinstance(clear_accum, (bool, int)) else clear_accum,
        _c(int(wg_wait)),
    ]
    return base.make_call(NAME, args)


def wgmma_gemm_sp(*args, **kwargs):
    """Not supported: the public TileLang's explicit Hopper wgmma.sp gemm. T.gemm_sp runs mma.sp on
    sm_90a as on sm_80. Calling it raises UserError."""
    raise UserError(
        "T.wgmma_gemm_sp: tilelang does not lower sparse gemms to wgmma.sp; use T.gemm_sp, which runs mma.sp "
        "(on sm_90a too) and has finished when it returns (no T.wait_wgmma needed)"
    )


def tcgen05_gemm_sp(*args, **kwargs):
    """Not supported: the sparse tcgen05 mma of Blackwell (sm_100). Calling it raises UserError."""
    raise UserError(
        "T.tcgen05_gemm_sp: sparse tcgen05 mma needs Blackwell (sm_100), which tilelang does not support; "
        "tilelang compiles for sm_80, sm_89 and sm_90a: use T.gemm_sp"
    )


def _check_scopes(a, e, b, c):
    if c.buffer.scope() != "local.fragment":
        raise UserError(
            f"T.gemm_sp: the accumulator C ('{c.name}') must be a fragment (T.alloc_fragment), "
            f"not {c.buffer.scope()} memory"
        )
    for r, n in ((a, "A_sparse"), (b, "B")):
        if r.buffer.scope() not in ("shared.dyn", "shared", "local.fragment"):
            raise UserError(f"T.gemm_sp: {n} ('{r.name}') must be a shared tile or a fragment")
    if e.buffer.scope() not in ("shared.dyn", "shared"):
        raise UserError(
            f"T.gemm_sp: the metadata E ('{e.name}') must be a shared tile (T.alloc_shared and T.copy it there), "
            f"not {e.buffer.scope()} memory"
        )


def _check_dtypes(a, e, b):
    a_dtype, b_dtype, e_dtype = (str(r.buffer.dtype) for r in (a, b, e))
    if a_dtype != b_dtype:
        raise UserError(f"T.gemm_sp: A_sparse is {a_dtype} but B is {b_dtype}; they must have one type")
    if a_dtype not in _SPARSE_DTYPES:
        raise UserError(
            f"T.gemm_sp: no sparse tensor-core instruction multiplies {a_dtype}; A_sparse and B may be "
            f"{', '.join(_SPARSE_DTYPES)}"
        )
    if e_dtype not in _METADATA_DTYPES:
        raise UserError(
            f"T.gemm_sp: the metadata E ('{e.name}') is {e_dtype}; it must be an 8-, 16- or 32-bit integer "
            f"(int16 is the compressors' default for 16-bit A, int32 for 8-bit A)"
        )


def _tile(r, what):
    shape = [int(x) for x in r.nonunit_extents()]
    if len(shape) != 2:
        raise UserError(f"T.gemm_sp: {what} ('{r.name}') must be a 2-d tile, got shape {shape}")
    return shape


def _check_shapes(a, e, b, c, trans_a, trans_e, trans_b):
    a_shape, e_shape, b_shape, c_shape = (_tile(r, n) for r, n in ((a, "A_sparse"), (e, "E"), (b, "B"), (c, "C")))
    M, half_k = (a_shape[1], a_shape[0]) if trans_a else tuple(a_shape)
    K = 2 * half_k
    K2, N = (b_shape[1], b_shape[0]) if trans_b else tuple(b_shape)
    if K2 != K or [M, N] != c_shape:
        raise UserError(
            f"T.gemm_sp: shapes do not chain: A_sparse is {a_shape}{' (transposed)' if trans_a else ''} "
            f"(A is {M} x {K} before compression), B is {b_shape}{' (transposed)' if trans_b else ''}, C is "
            f"{c_shape}; need A_sparse (M, K/2), B (K, N), C (M, N)"
        )
    ef = e_factor(str(a.buffer.dtype), str(e.buffer.dtype))
    want = [K // ef, M] if trans_e else [M, K // ef]
    if K % ef or e_shape != want:
        raise UserError(
            f"T.gemm_sp: the metadata E ('{e.name}') is {e_shape}{' (transposed)' if trans_e else ''}; with "
            f"{e.buffer.dtype} elements, each describing {ef} columns of A, it must be {want} for A of "
            f"{M} x {K}"
        )


@base.register
class GemmSp(base.TileOp):
    """A parsed `tl.gemm_sp` call with its shape (K counts A's columns before compression)."""

    name = NAME

    def __init__(self, call, span=None):
        super().__init__(call, span)
        self.a, self.e, self.b, self.c = (base.Region.from_ir(call.args[k]) for k in range(4))
        self.trans_a, self.trans_e, self.trans_b = (bool(int(call.args[k].value)) for k in (4, 5, 6))
        self.policy = GemmWarpPolicy(int(call.args[7].value))
        clear = call.args[8]
        self.clear = bool(int(clear.value)) if isinstance(clear, tirx.IntImm) else clear
        self.wg_wait = int(call.args[9].value)
        self.M, self.N = (int(x) for x in self.c.nonunit_extents())
        a_shape = [int(x) for x in self.a.nonunit_extents()]
        self.K = 2 * (a_shape[0] if self.trans_a else a_shape[1])

    @property
    def kind(self) -> str:
        return "".join("r" if r.buffer.scope() == "local.fragment" else "s" for r in (self.a, self.b))

    def describe(self) -> str:
        return f"T.gemm_sp({self.a.name}, {self.e.name}, {self.b.name}, {self.c.name})"

    def fragments(self) -> list:
        return [r.buffer for r in (self.a, self.b, self.c) if r.buffer.scope() == "local.fragment"]

    def strict_layouts(self, target, num_threads: int, options) -> tuple[dict, dict]:
        return layouts(self, plan(self, target, num_threads), num_threads), shared_layouts(self)

    def strict_shared_layouts(self) -> dict:
        return shared_layouts(self)

    def writes(self) -> list:
        return [self.c.buffer]

    def mma(self) -> base.Mma:
        a_regs = self.a.buffer if self.a.buffer.scope() == "local.fragment" else None
        shared = tuple(r.buffer for r in (self.a, self.e, self.b) if r.buffer.scope().startswith("shared"))
        return base.Mma(self.c, a_regs, shared, False, 0, self.clear)

    def with_wait(self, pending: int, async_operands: bool):
        return self.call  # mma.sp has finished when the call returns; nothing to wait for

    def with_clear(self, clear):
        args = list(self.call.args)
        args[8] = _c(int(clear)) if isinstance(clear, (bool, int)) else clear
        return base.make_call(NAME, args)

    def lower(self, ctx) -> tirx.Stmt:
        return _lower(self, ctx)


@dataclass(frozen=True)
class Plan:
    """How a T.gemm_sp runs: warps along M and N, and the instruction (its K)."""

    warp_m: int
    warp_n: int
    inst: SparseMma


def plan(g: GemmSp, target, num_threads: int) -> Plan:
    """The instruction and warp tiling of `g` for `num_threads` threads on `target`; UserError (at the
    gemm's line) when the target has no instruction for its dtypes, its K does not divide into
    instructions or its warps cannot tile C."""
    if num_threads % 32:
        raise at_span(f"T.gemm_sp needs whole warps; the kernel has {num_threads} threads", g.span)
    try:
        inst = select(target, str(g.a.buffer.dtype), str(g.c.buffer.dtype))
        wm, wn = warp_partition(g.M, g.N, num_threads // 32, g.policy)
    except UserError as err:  # point at the gemm, and name it
        raise at_span(str(err).replace("T.gemm:", "T.gemm_sp:", 1), g.span) from None
    if g.K % inst.k:
        raise at_span(
            f"T.gemm_sp: K = {g.K} (A_sparse has {g.K // 2} columns) is not a multiple of {inst.k}, the K of "
            f"{inst.name}; use a block_K that is a multiple of {inst.k}",
            g.span,
        )
    return Plan(wm, wn, inst)


def layouts(g: GemmSp, p: Plan, num_threads: int) -> dict:
    """{buffer: Fragment} for C and the fragment operands."""
    out = {g.c.buffer: mma.c_fragment(g.M, g.N, p.warp_m, p.warp_n, num_threads)}
    if g.a.buffer.scope() == "local.fragment":
        if g.trans_a:
            raise at_span("T.gemm_sp: an A_sparse operand in registers cannot be transposed", g.span)
        out[g.a.buffer] = a_fragment(g, p, num_threads)
    if g.b.buffer.scope() == "local.fragment":
        if g.trans_b:
            raise at_span("T.gemm_sp: a B operand in registers cannot be transposed", g.span)
        out[g.b.buffer] = b_fragment(g, p, num_threads)
    return out


def _k_position(k, span: int, pack: int):
    """(lane % 4, register, element in register) of operand column k in a span of `span` columns
    whose registers hold `pack` consecutive columns, lanes 0-3 taking one register's worth each
    (PTX ISA, "Matrix fragments for sparse mma": A_sparse as a dense A operand, B as two dense ones)."""
    kk = tirx.floormod(k, _c(span))
    return (
        tirx.floordiv(tirx.floormod(kk, _c(4 * pack)), _c(pack)),
        tirx.floordiv(kk, _c(4 * pack)),
        tirx.floormod(k, _c(pack)),
    )


def a_fragment(g: GemmSp, p: Plan, num_threads: int) -> fl.Fragment:
    """A_sparse (M, K/2) in registers: per atom the four registers of a dense 16 x K/2 A operand
    (rows g and g + 8 alternating, then the next 4 * pack columns), held by the warps of its rows and
    replicated over the warps along N; gemm_sp_rs reads register r of atom (mi, kt) at
    ((mi * KT + kt) * 4 + r) * pack."""
    wm, wn = p.warp_m, p.warp_n
    WM, span, KT = g.M // wm, p.inst.k // 2, g.K // p.inst.k
    pack = 32 // dtype_bits(str(g.a.buffer.dtype))
    m, k = fl.placeholder_vars(2, "a")
    t, block, elem = _k_position(k, span, pack)
    reg = block * _c(2) + tirx.floordiv(tirx.floormod(m, _c(16)), _c(8))
    thread = tirx.floordiv(m, _c(WM)) * _c(32) + tirx.floormod(m, _c(8)) * _c(4) + t
    atom = tirx.floordiv(tirx.floormod(m, _c(WM)), _c(16)) * _c(KT) + tirx.floordiv(k, _c(span))
    index = (atom * _c(4) + reg) * _c(pack) + elem
    groups = [(32 * wm, wn)] if wn > 1 else []
    return fl.Fragment((g.M, g.K // 2), [m, k], thread, index, num_threads, groups)


def b_fragment(g: GemmSp, p: Plan, num_threads: int) -> fl.Fragment:
    """B (K, N) in registers: per atom four registers, each 4 * pack consecutive rows of B, held by the
    warps of its columns and replicated over the warps along M; gemm_sp_sr reads register r of atom
    (ni, kt) at ((ni * KT + kt) * 4 + r) * pack."""
    wm, wn = p.warp_m, p.warp_n
    WN, span, KT = g.N // wn, p.inst.k, g.K // p.inst.k
    pack = 32 // dtype_bits(str(g.b.buffer.dtype))
    k, n = fl.placeholder_vars(2, "b")
    t, block, elem = _k_position(k, span, pack)
    thread = tirx.floordiv(n, _c(WN)) * _c(wm * 32) + tirx.floormod(n, _c(8)) * _c(4) + t
    atom = tirx.floordiv(tirx.floormod(n, _c(WN)), _c(8)) * _c(KT) + tirx.floordiv(k, _c(span))
    index = (atom * _c(4) + block) * _c(pack) + elem
    groups = [(32, wm)] if wm > 1 else []
    return fl.Fragment((g.K, g.N), [k, n], thread, index, num_threads, groups)


def shared_layouts(g: GemmSp) -> dict:
    """{shared tile: Layout}: A_sparse and B with the swizzle the template reads them with (T.gemm's
    on mma.sync); E row-major."""
    out = {}
    for region in (g.a, g.b):
        bits = mma.swizzle_bits(region)
        if bits:
            out[region.buffer] = sl.swizzle(tuple(int(n) for n in region.buffer.shape), 16, bits)
    return out


_INTRINSICS = {
    "ss": intrinsics.GEMM_SP_SS,
    "rs": intrinsics.GEMM_SP_RS,
    "sr": intrinsics.GEMM_SP_SR,
    "rr": intrinsics.GEMM_SP_RR,
}


def _lower(g: GemmSp, ctx) -> tirx.Stmt:
    p = plan(g, ctx.target, ctx.num_threads)
    if ctx.shared_layout(g.e.buffer) is not None:  # the template indexes E row-major
        raise at_span(
            f"T.gemm_sp reads the metadata E ('{g.e.name}') row-major, in the natural format the public "
            f"compressors write; it has another layout (T.annotate_layout, e.g. a CUTLASS metadata layout): "
            f"drop the annotation and compress with the natural format",
            g.span,
        )
    offset = ctx.thread_offset  # the first thread of the `if tx >= n` branch it is in
    if offset % ctx.num_threads:  # the template's warp index is threadIdx.x / 32 modulo its warps
        raise at_span(
            f"T.gemm_sp: the thread branch it is in spans threads [{offset}, {offset + ctx.num_threads}); it "
            f"must start at a multiple of its {ctx.num_threads} threads",
            g.span,
        )
    template = dict(
        M=g.M,
        N=g.N,
        K=g.K,
        warp_m=p.warp_m,
        warp_n=p.warp_n,
        trans_a=g.trans_a,
        trans_b=g.trans_b,
        trans_e=g.trans_e,
        clear=g.clear is True,
        lda=int(g.a.buffer.shape[-1]),
        ldb=int(g.b.buffer.shape[-1]),
        lde=int(g.e.buffer.shape[-1]),
        swz_a=mma.swizzle_bits(g.a),
        swz_b=mma.swizzle_bits(g.b),
    )
    args = [pointer(g.a, ctx, 1), pointer(g.e, ctx, 1), pointer(g.b, ctx, 1), pointer(g.c, ctx, 3)]
    clear = [] if isinstance(g.clear, bool) else [g.clear]  # a run-time clear is the call's last argument
    return _INTRINSICS[g.kind].stmt(template, *args, *clear)

"""`T.gemm` on Hopper's warpgroup tensor cores (wgmma, sm_90a).

When a gemm can run as wgmma (`plan` says why not otherwise, in the debug log), warpgroups of 128
threads tile C as WgM x WgN, each with wgmma.m64nNk16 (fp16/bf16; k8 for tf32, k32 for fp8 and
int8, which wgmma reads only K-major, and A of fp8 and int8 only from shared memory here) over its
(M / WgM) x (N / WgN) part. Shared
operands are read through matrix descriptors, so they take the `gmma_panels` layout (CuTe's
canonical GMMA layouts); an A operand in registers and C take the register layouts below, which
`src/tl_templates/cuda/gemm_wgmma.h` assumes.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass

from tvm import tirx

from tilelang import intrinsics
from tilelang.dtypes import bits as dtype_bits
from tilelang.layout import fragment as fl
from tilelang.op.gemm.policy import GemmWarpPolicy
from tilelang.options import CompileOptions
from tilelang.utils.ir import i32 as _c
from tilelang.utils.target import has_wgmma

logger = logging.getLogger("tilelang")

# Per-warpgroup N taken for every operand type (wgmma has each of them for every type), and the
# other multiples of 8, taken for 16-bit types (their instructions come from codegen/wgmma_isa.py
# like the others; fp8, int8 and tf32 keep to the first list).
N_SIZES = intrinsics.WGMMA_BASE_N
EXTENDED_N_SIZES = tuple(n for n in range(24, 256, 8) if n not in N_SIZES)
# (A/B dtype, C dtype) pairs the template instantiates.
DTYPES = {("float16", "float32"), ("bfloat16", "float32"), ("float16", "float16")}
# Types wgmma reads only K-major (A (M, K), B transposed (N, K)): the PTX ISA transposes only
# .f16/.bf16 operands. The K of one instruction: 32 bytes of a row.
K_MAJOR_DTYPES = {
    ("float32", "float32"): 8,  # tf32
    ("float8_e4m3fn", "float32"): 32,
    ("float8_e5m2", "float32"): 32,
    ("int8", "int32"): 32,
}
# A in registers (the template's wgmma_rs): 16-bit types and tf32 (wgmma.m64nNk8 with A in four
# 32-bit registers, the layout of CuTe's ALayout_64x8). fp8 and int8 have no register form here.
A_IN_REGISTERS_K_MAJOR = {("float32", "float32")}


@dataclass(frozen=True)
class Plan:
    """How a gemm runs as wgmma: warpgroups along M and N, and each shared operand's swizzle bits."""

    wg_m: int
    wg_n: int
    swz_a: int  # 0 when A is in registers
    swz_b: int

    @property
    def num_threads(self) -> int:
        return 128 * self.wg_m * self.wg_n


def _bits(region) -> int:
    return dtype_bits(str(region.buffer.dtype))


def _panel_bits(region) -> int | None:
    """Swizzle bits of the widest GMMA panel the operand's rows split into (3: 128 bytes), or None
    when the tile cannot be read through a descriptor (rows not 16-byte multiples, a sub-tile)."""
    shape = [int(n) for n in region.buffer.shape]
    if len(shape) < 2 or shape[-2] % 8:
        return None
    lead = len(shape) - 2
    if any(not isinstance(e, tirx.IntImm) for e in region.extents):
        return None
    if any(int(e) != n for e, n in zip(region.extents[lead:], shape[lead:])):
        return None  # the descriptor walks whole tiles
    if any(not isinstance(s, tirx.IntImm) or int(s) != 0 for s in region.starts[lead:]):
        return None
    if any(int(e) != 1 for e in region.extents[:lead]):
        return None
    cols = shape[-1]
    for bits in (3, 2, 1):
        if cols % ((128 // _bits(region)) << bits) == 0:  # whole 128/64/32-byte panels
            return bits
    return None


def plan(g, target, num_threads: int, options: CompileOptions | None = None) -> Plan | None:
    """The wgmma plan for gemm `g`, or None (mma.sync) with the reason in the debug log."""

    def no(reason: str):
        logger.debug("T.gemm(%s, %s, %s): mma.sync, not wgmma: %s", g.a.name, g.b.name, g.c.name, reason)
        return None

    if not has_wgmma(target):
        return None
    if options is not None and options.disable_wgmma:
        return no("disabled by tl.disable_wgmma")
    a_dtype, b_dtype, c_dtype = (str(r.buffer.dtype) for r in (g.a, g.b, g.c))
    pair = (a_dtype, c_dtype)
    if a_dtype != b_dtype or (pair not in DTYPES and pair not in K_MAJOR_DTYPES):
        return no(f"{a_dtype} x {b_dtype} -> {c_dtype} has no wgmma path here")
    k_step = K_MAJOR_DTYPES.get(pair, 16)
    if pair in K_MAJOR_DTYPES:
        if g.trans_a or not g.trans_b:
            return no(f"wgmma reads {a_dtype} only K-major: A as (M, K) and B transposed, (N, K)")
        if g.a.buffer.scope() == "local.fragment" and pair not in A_IN_REGISTERS_K_MAJOR:
            return no(f"A in registers has no {a_dtype} wgmma path here")
    if num_threads % 128:
        return no(f"{num_threads} threads are not whole warpgroups")
    if g.K % k_step:
        return no(f"K = {g.K} is not a multiple of {k_step}")
    if g.b.buffer.scope() == "local.fragment":
        return no("B is in registers (wgmma reads B from shared memory)")
    a_in_regs = g.a.buffer.scope() == "local.fragment"
    if a_in_regs and g.trans_a:  # mma.layouts names this at the user's line
        return no("A is in registers and transposed (wgmma_rs reads A as (M, K))")
    swz_a = 0 if a_in_regs else _panel_bits(g.a)
    swz_b = _panel_bits(g.b)
    if swz_a is None or swz_b is None:
        return no("an operand is not a whole shared tile with rows of 16-byte multiples")
    num_wg = num_threads // 128
    n_sizes = N_SIZES + (EXTENDED_N_SIZES if pair in DTYPES else ())
    fits, panel_splits = [], []
    for wg_m in range(1, num_wg + 1):
        if num_wg % wg_m or g.M % (64 * wg_m):
            continue
        wg_n = num_wg // wg_m
        if g.N % wg_n or g.N // wg_n not in n_sizes:
            continue
        if wg_n > 1 and not g.trans_b and (g.N // wg_n) % (8 << swz_b):
            panel_splits.append(g.N // wg_n)  # an MN-major B must split at panel boundaries
            continue
        fits.append((wg_m, wg_n))
    if not fits and panel_splits:
        return no(
            f"B is not transposed (MN-major) in panels of {8 << swz_b} columns, and {num_wg} warpgroups would "
            f"split its {g.N} columns into {panel_splits[0]} each, not whole panels"
        )
    if not fits:
        return no(f"{num_wg} warpgroups cannot tile {g.M} x {g.N} in 64-row wgmma with N in {n_sizes}")
    prefer_n = g.policy == GemmWarpPolicy.FullCol
    wg_m, wg_n = max(fits, key=lambda f: f[1] if prefer_n else f[0])
    return Plan(wg_m, wg_n, swz_a, swz_b)


def c_fragment(g, p: Plan, num_threads: int) -> fl.Fragment:
    """C (M, N) in wgmma's accumulator layout (see gemm_wgmma.h)."""
    WGM, WGN = g.M // p.wg_m, g.N // p.wg_n
    i, j = fl.placeholder_vars(2)
    rr, jj = tirx.floormod(i, _c(WGM)), tirx.floormod(j, _c(WGN))
    wg = tirx.floordiv(j, _c(WGN)) * _c(p.wg_m) + tirx.floordiv(i, _c(WGM))
    r16 = tirx.floormod(rr, _c(16))
    thread = (
        wg * _c(128)
        + tirx.floordiv(tirx.floormod(rr, _c(64)), _c(16)) * _c(32)
        + tirx.floormod(r16, _c(8)) * _c(4)
        + tirx.floordiv(tirx.floormod(jj, _c(8)), _c(2))
    )
    index = (
        (tirx.floordiv(rr, _c(64)) * _c(WGN // 8) + tirx.floordiv(jj, _c(8))) * _c(4)
        + tirx.floordiv(r16, _c(8)) * _c(2)
        + tirx.floormod(jj, _c(2))
    )
    return fl.Fragment((g.M, g.N), [i, j], thread, index, num_threads, vector_size=2)


def a_fragment(g, p: Plan, num_threads: int) -> fl.Fragment:
    """A (M, K) in registers: per warpgroup and 64-row instruction, per instruction K (16 halves or
    8 tf32), 4 registers of `e` elements (2 or 1) per thread, each warp's 16 rows as the m16n8k16
    (m16n8k8 for tf32) A fragment: row r, column kk of a warp's part in lane 4 * (r % 8) + (kk % 4e) / e,
    register r / 8 + 2 * (kk / 4e) (CuTe's ALayout_64x16 / ALayout_64x8); replicated over the
    warpgroups along N."""
    e = 32 // _bits(g.a)  # elements per 32-bit register
    ks = 8 * e  # the instruction's K
    WGM, KT = g.M // p.wg_m, g.K // ks
    m, k = fl.placeholder_vars(2, "a")
    rr, kk = tirx.floormod(m, _c(WGM)), tirx.floormod(k, _c(ks))
    r16 = tirx.floormod(rr, _c(16))
    thread = (
        tirx.floordiv(m, _c(WGM)) * _c(128)
        + tirx.floordiv(tirx.floormod(rr, _c(64)), _c(16)) * _c(32)
        + tirx.floormod(r16, _c(8)) * _c(4)
        + tirx.floordiv(tirx.floormod(kk, _c(4 * e)), _c(e))
    )
    reg = tirx.floordiv(r16, _c(8)) + tirx.floordiv(kk, _c(4 * e)) * _c(2)
    atom = tirx.floordiv(rr, _c(64)) * _c(KT) + tirx.floordiv(k, _c(ks))
    index = (atom * _c(4) + reg) * _c(e) + tirx.floormod(k, _c(e))
    groups = [(128 * p.wg_m, p.wg_n)] if p.wg_n > 1 else []
    return fl.Fragment((g.M, g.K), [m, k], thread, index, num_threads, groups)


def shared_layouts(g, p: Plan) -> dict:
    """{shared operand buffer: its gmma_panels Layout}."""
    from tilelang.layout import layout as sl

    out = {}
    for region, bits in ((g.a, p.swz_a), (g.b, p.swz_b)):
        if region.buffer.scope() != "local.fragment":
            out[region.buffer] = sl.gmma_panels(tuple(int(n) for n in region.buffer.shape), _bits(region), bits)
    return out


def call(g, p: Plan, args, warpgroup, clear) -> tirx.Stmt:
    """The wgmma_<kind> template (gemm_wgmma.h) on A, B, C (`args`) for warpgroup `warpgroup`;
    `clear` is [] or [a run-time clear flag]."""

    def tile(region, bits):  # rows, row length and swizzle of a shared operand (0s: in registers)
        if region.buffer.scope() == "local.fragment":
            return 0, 0, 0
        return int(region.buffer.shape[-2]), int(region.buffer.shape[-1]), bits

    rows_a, ld_a, swz_a = tile(g.a, p.swz_a)
    rows_b, ld_b, swz_b = tile(g.b, p.swz_b)
    template = dict(
        M=g.M,
        N=g.N,
        K=g.K,
        wg_m=p.wg_m,
        wg_n=p.wg_n,
        trans_a=g.trans_a,
        trans_b=g.trans_b,
        clear=g.clear is True,
        rows_a=rows_a,
        ld_a=ld_a,
        swz_a=swz_a,
        rows_b=rows_b,
        ld_b=ld_b,
        swz_b=swz_b,
        wait=g.wg_wait,
        fence=not g.async_operands,
    )
    intrinsic = intrinsics.WGMMA_SS if g.kind == "ss" else intrinsics.WGMMA_RS
    return intrinsic.stmt(template, *args, warpgroup, *clear)

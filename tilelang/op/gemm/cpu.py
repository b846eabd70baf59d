"""`T.gemm` on the CPU target: a loop nest the LLVM vectorizer turns into vector FMAs.

    C[m, n] (+)= sum_k A[m, k] * B[k, n]          (A read as A[k, m] with trans_A, B as B[n, k] with trans_B)

The innermost loop runs along n, contiguous in B and C, so it is a vector FMA over the tile's width
without a floating-point reduction (which LLVM will not reorder). Where the tile divides into
blocks of 4 rows x 16 columns (the usual case), C is updated block by block with k inside: the
block's 4 x 16 accumulators stay in vector registers for the whole k loop (LLVM promotes them out of
it), and each step loads one vector of B for 4 FMAs, the register blocking of a BLAS micro-kernel.
Other tiles run m, k, n. A transposed B is first copied into a local K x N array of the
accumulator's type (K * N moves against M * N * K multiply-adds). Operands are converted to the
accumulator's type (fp16/bf16 inputs computed in fp32, as the tensor cores do).
"""

from __future__ import annotations

from tvm import tirx

from tilelang.layout.fragment import substitute
from tilelang.utils.ir import i32 as _c
from tilelang.utils.ir import seq


def _region_index(region, coords):
    """`region.buffer` at the tile coordinates `coords` (one per non-unit extent of the region)."""
    it = iter(coords)
    idx = []
    for start, extent in zip(region.starts, region.extents):
        unit = isinstance(extent, tirx.IntImm) and extent.value == 1
        idx.append(start if unit else start + next(it))
    return idx


def _loop(var, extent, body):
    return tirx.For(var, _c(0), _c(extent), tirx.ForKind.SERIAL, body)


def lower_cpu(g) -> tirx.Stmt:
    """`g` (a parsed Gemm) as loops over whole tiles."""
    acc = str(g.c.buffer.dtype)
    m, n, k = (tirx.Var(v, "int32") for v in ("m", "n", "k"))

    def load(region, coords):
        value = tirx.BufferLoad(region.buffer, _region_index(region, coords))
        return value if str(region.buffer.dtype) == acc else tirx.Cast(acc, value)

    stmts = []
    if g.trans_b:  # B[n, k]: its rows, transposed once, so the inner loop reads it along n
        bt = tirx.decl_buffer((g.K, g.N), acc, f"{g.b.name}_t", scope="local")
        kk, nn = tirx.Var("kk", "int32"), tirx.Var("nn", "int32")
        stmts.append(tirx.AllocBuffer(bt))
        stmts.append(_loop(nn, g.N, _loop(kk, g.K, tirx.BufferStore(bt, load(g.b, [nn, kk]), [kk, nn]))))
        b_value = tirx.BufferLoad(bt, [k, n])
    else:
        b_value = load(g.b, [k, n])
    if g.clear is not False:
        zm, zn = tirx.Var("zm", "int32"), tirx.Var("zn", "int32")  # each variable bound by one loop
        clear = tirx.BufferStore(g.c.buffer, tirx.const(0, acc), _region_index(g.c, [zm, zn]))
        zero = _loop(zm, g.M, _loop(zn, g.N, clear))
        stmts.append(zero if g.clear is True else tirx.IfThenElse(g.clear, zero, None))
    if g.M % ROWS == 0 and g.N % COLUMNS == 0:
        stmts.append(_blocked(g, load, b_value, m, n, k))
        return seq(stmts)
    a_value = load(g.a, [k, m] if g.trans_a else [m, k])
    c_index = _region_index(g.c, [m, n])
    fma = tirx.BufferStore(g.c.buffer, tirx.BufferLoad(g.c.buffer, c_index) + a_value * b_value, c_index)
    stmts.append(_loop(m, g.M, _loop(k, g.K, _loop(n, g.N, fma))))
    return seq(stmts)


ROWS, COLUMNS = 4, 16  # a register block of C: 4 rows of 16 accumulators (8 AVX2 or 4 AVX-512 registers)


def _blocked(g, load, b_value, m, n, k) -> tirx.Stmt:
    """for each 4 x 16 block of C: for k: for i (unrolled) 4, j (a vector) 16: C[i, j] += A[i, k] * B[k, j]."""
    mb, nb, i, j = (tirx.Var(v, "int32") for v in ("mb", "nb", "i", "j"))
    row, col = mb * _c(ROWS) + i, nb * _c(COLUMNS) + j
    bind = {m: row, n: col}
    a_value = load(g.a, [k, row] if g.trans_a else [row, k])
    c_index = _region_index(g.c, [row, col])
    b_at = substitute(b_value, bind)
    fma = tirx.BufferStore(g.c.buffer, tirx.BufferLoad(g.c.buffer, c_index) + a_value * b_at, c_index)
    vector = tirx.For(j, _c(0), _c(COLUMNS), tirx.ForKind.VECTORIZED, fma)
    rows = tirx.For(i, _c(0), _c(ROWS), tirx.ForKind.UNROLLED, vector)
    return _loop(mb, g.M // ROWS, _loop(nb, g.N // COLUMNS, _loop(k, g.K, rows)))

"""T.gemm_sp on the CPU: instruction selection, the metadata each lane hands mma.sp (gemm_sp.h, run on
the host), register layouts, errors at the user's line, and the generated CUDA through nvcc."""

import os
import re
import subprocess

import numpy as np
import pytest

import tilelang
import tilelang.language as T
from tilelang import env
from tilelang.codegen import cuda
from tilelang.cuda.intrinsics import sparse_layout
from tilelang.errors import UserError
from tilelang.layout.evaluate import evaluate, grid
from tilelang.op import base
from tilelang.op import gemm as gemm_op
from tilelang.op import gemm_sp as sp
from tilelang.op.gemm import selection
from tilelang.utils.target import determine_target


def _kernel(
    M,
    N,
    K,
    dtype="float16",
    accum="float32",
    e_dtype="int16",
    trans_a=False,
    trans_e=False,
    trans_b=False,
    kind="ss",
    threads=128,
    policy=0,
):
    ef = sp.e_factor(dtype, e_dtype)
    a_shape = (K // 2, M) if trans_a else (M, K // 2)
    e_shape = (K // ef, M) if trans_e else (M, K // ef)
    b_shape = (N, K) if trans_b else (K, N)

    @T.prim_func
    def main(
        A: T.Tensor(a_shape, dtype),
        E: T.Tensor(e_shape, e_dtype),
        B: T.Tensor(b_shape, dtype),
        C: T.Tensor((M, N), accum),
    ):
        with T.Kernel(1, threads=threads):
            A_s = T.alloc_shared(a_shape, dtype) if kind[0] == "s" else T.alloc_fragment(a_shape, dtype)
            E_s = T.alloc_shared(e_shape, e_dtype)
            B_s = T.alloc_shared(b_shape, dtype) if kind[1] == "s" else T.alloc_fragment(b_shape, dtype)
            C_f = T.alloc_fragment((M, N), accum)
            T.copy(A, A_s)
            T.copy(E, E_s)
            T.copy(B, B_s)
            T.gemm_sp(A_s, E_s, B_s, C_f, trans_a, trans_e, trans_b, policy=policy, clear_accum=True)
            T.copy(C_f, C)

    return main


def _op(func, name="gemm_sp"):
    import tvm_ffi
    from tvm import tirx

    found = []
    tvm_ffi.structural_walk(
        func.body, [(tirx.Evaluate, lambda e: found.append(base.parse(e)) if base.is_tile_op(e.value, name) else None)]
    )
    return found[0]


# ---- instruction selection ----------------------------------------------------------------------


@pytest.mark.parametrize(
    "a,c,arch,k",
    [
        ("float16", "float32", "sm_80", 32),
        ("float16", "float16", "sm_80", 32),
        ("bfloat16", "float32", "sm_90a", 32),
        ("int8", "int32", "sm_80", 64),
        ("float8_e4m3", "float32", "sm_89", 64),
        ("float8_e5m2", "float32", "sm_90a", 64),
    ],
)
def test_instruction_selection(a, c, arch, k):
    assert sp.select(determine_target(arch), a, c).k == k


def test_fp8_needs_sm89_and_bf16_accumulates_in_fp32():
    # raised at the call: the traceback shows the user's line
    with pytest.raises(UserError, match="no sparse tensor-core instruction on sm_80 multiplies float8_e4m3"):
        sp.select(determine_target("sm_80"), "float8_e4m3", "float32")
    # raised at the call: the traceback shows the user's line
    with pytest.raises(UserError, match="multiplies bfloat16 into bfloat16; supported: float16 -> float32/float16"):
        sp.select(determine_target("sm_90a"), "bfloat16", "bfloat16")


@pytest.mark.parametrize("a", ["float16", "bfloat16", "int8", "float8_e4m3"])
@pytest.mark.parametrize("e", ["int8", "int16", "int32"])
def test_e_factor_is_the_public_one(a, e):
    assert sp.e_factor(a, e) == sparse_layout.get_e_factor(a, e)


# ---- the metadata register of each lane (gemm_sp.h's meta_register, compiled and run on the host) --


def _dense_2_4(rows, cols, rng):
    """Positions (rows, cols / 4, 2) of the two kept elements of each group of four, increasing."""
    keep = np.sort(np.stack([rng.choice(4, 2, replace=False) for _ in range(rows * cols // 4)]), axis=1)
    return keep.reshape(rows, cols // 4, 2)


def _natural_metadata(keep, bits):
    """The public compressors' E: 4 bits a group (first position in bits 1:0, second in 3:2), the
    groups of a row in order from the low bits of its first element on (little-endian)."""
    rows, groups, _ = keep.shape
    nibbles = (keep[..., 0] | (keep[..., 1] << 2)).astype(np.uint64)
    per = bits // 4
    packed = np.zeros((rows, groups // per), dtype=np.uint64)
    for j in range(per):
        packed |= nibbles[:, j::per] << np.uint64(4 * j)
    return packed.astype({8: np.uint8, 16: np.uint16, 32: np.uint32}[bits]).view(
        {8: np.int8, 16: np.int16, 32: np.int32}[bits]
    )


def _decode(regs, atom_k, k0):
    """{(row, group): (first, second)} that mma.sp reads from the 32 lanes' metadata registers under
    sparsity selector 0, per the PTX ISA's sparse fragment figures: 16-bit operands (k32): lanes 4g
    and 4g + 1 hold columns [16h, 16h + 16) (h = lane % 4) of rows g (bits 15:0) and g + 8 (31:16);
    8-bit operands (k64): lane 4g + q holds columns [32 (q // 2), + 32) of row g + 8 (q % 2)."""
    out = {}
    for lane, reg in enumerate(regs):
        g, q = lane // 4, lane % 4
        if atom_k == 32:
            if q > 1:
                continue
            parts = [(g, (reg & 0xFFFF), 16 * q), (g + 8, reg >> 16, 16 * q)]
        else:
            parts = [(g + 8 * (q % 2), reg, 32 * (q // 2))]
        for row, bits, col in parts:
            for c in range(4 if atom_k == 32 else 8):  # groups of four columns
                nib = (bits >> (4 * c)) & 0xF
                out[(row, (k0 + col) // 4 + c)] = (nib & 3, nib >> 2)
    return out


_CASES = [(ak, e, trans) for ak in (32, 64) for e in (8, 16, 32) for trans in (False, True)]


def test_each_lane_hands_mma_sp_the_metadata_of_its_rows_and_columns(tmp_path):
    # Two atoms along K (k0 = 0 and AK) of a 16-row tile; E natural or stored K-major, 8/16/32 bits.
    rng = np.random.default_rng(7)
    ctype = {8: "int8_t", 16: "int16_t", 32: "int32_t"}
    lines, tiles = [], {}
    for n, (ak, bits, trans) in enumerate(_CASES):
        keep = _dense_2_4(16, 2 * ak, rng)
        e = _natural_metadata(keep, bits)
        stored = e.T.copy() if trans else e
        tiles[n] = keep
        values = ", ".join(str(int(v)) for v in stored.reshape(-1))
        ld = stored.shape[1]
        lines.append(f"  static const {ctype[bits]} e{n}[] = {{{values}}};")
        for k0 in (0, ak):
            lines.append(
                f'  for (int l = 0; l < 32; ++l) printf("{n} {k0} %u\\n", '
                f"tl::sp_detail::meta_register<{ak}, {str(trans).lower()}, {ld}>(e{n}, 0, {k0}, l));"
            )
    src = "\n".join(
        ['#include "tl_templates/cuda/common.h"', '#include "tl_templates/cuda/gemm_sp.h"', "#include <cstdio>"]
        + ["int main() {"]
        + lines
        + ["  return 0;", "}"]
    )
    cu, exe = tmp_path / "meta.cu", tmp_path / "meta"
    cu.write_text(src)
    flags = ["-std=c++17", "-w", f"-I{env.template_path()}", f"-I{env.cutlass_include()}"]
    subprocess.run([env.nvcc_path(), *flags, str(cu), "-o", str(exe)], check=True, capture_output=True)
    out = subprocess.run([str(exe)], check=True, capture_output=True, text=True).stdout.split("\n")
    regs = {}
    for line in filter(None, out):
        n, k0, reg = (int(x) for x in line.split())
        regs.setdefault((n, k0), []).append(reg)
    for n, (ak, _, _) in enumerate(_CASES):
        keep = tiles[n]
        for k0 in (0, ak):
            seen = _decode(regs[(n, k0)], ak, k0)
            groups = range(k0 // 4, (k0 + ak) // 4)
            assert set(seen) == {(r, g) for r in range(16) for g in groups}, (n, k0)
            assert all(seen[(r, g)] == tuple(keep[r, g]) for r in range(16) for g in groups), _CASES[n]


# ---- layouts --------------------------------------------------------------------------------------


def _dense_layouts(M, N, K, kind, policy, dtype="float16", accum="float32"):
    """The layouts T.gemm gives a dense gemm of these shapes on mma.sync (sm_80)."""

    @T.prim_func
    def main(A: T.Tensor((M, K), dtype), B: T.Tensor((K, N), dtype), C: T.Tensor((M, N), accum)):
        with T.Kernel(1, threads=128):
            A_s = T.alloc_shared((M, K), dtype) if kind[0] == "s" else T.alloc_fragment((M, K), dtype)
            B_s = T.alloc_shared((K, N), dtype) if kind[1] == "s" else T.alloc_fragment((K, N), dtype)
            C_f = T.alloc_fragment((M, N), accum)
            T.gemm(A_s, B_s, C_f, policy=policy)

    g = gemm_op.Gemm(_op(main, "gemm").call)
    g = gemm_op.Gemm(selection.record(g.call, selection.select(g, determine_target("sm_80"), 128)))
    return {b.name: f for b, f in gemm_op.layouts(g, 128).items()}


def _tables(frag):
    base_thread, index = frag.tables()
    return base_thread, index, frag.groups


def _sparse_layouts(func, target="sm_80", threads=128):
    g = _op(func)
    p = sp.plan(g, determine_target(target), threads)
    return g, p, {b.name: f for b, f in sp.layouts(g, p, threads).items()}


@pytest.mark.parametrize("policy", [0, 1, 2])
@pytest.mark.parametrize("dtype", ["float16", "int8"])
def test_register_operands_are_laid_out_as_dense_mma_operands(policy, dtype):
    # Compressed A (M, K/2) sits in registers as the A operand of a dense mma of K/2 columns, and B
    # (K, N) as a dense B: an mma.sp atom's operands are a dense atom's A and two dense atoms' B.
    accum, e_dtype = ("int32", "int32") if dtype == "int8" else ("float32", "int16")
    M, N, K = 64, 64, 128
    _, _, rs = _sparse_layouts(_kernel(M, N, K, dtype, accum, e_dtype, kind="rs", policy=policy))
    _, _, sr = _sparse_layouts(_kernel(M, N, K, dtype, accum, e_dtype, kind="sr", policy=policy))
    dense = {
        kind: _dense_layouts(M, N, K // 2 if kind == "rs" else K, kind, policy, dtype, accum) for kind in ("rs", "sr")
    }
    for mine, theirs in (
        (rs["A_s"], dense["rs"]["A_s"]),
        (sr["B_s"], dense["sr"]["B_s"]),
        (rs["C_f"], dense["sr"]["C_f"]),
    ):
        for x, y in zip(_tables(mine), _tables(theirs)):
            assert np.array_equal(np.asarray(x), np.asarray(y))
        assert mine.is_injective()


def test_accumulator_is_a_bijection_onto_the_warp_registers():
    _, _, lay = _sparse_layouts(_kernel(64, 128, 64))
    frag = lay["C_f"]
    assert frag.is_injective() and frag.local_size == 64 * 128 // 128
    i, j = grid((64, 128))
    thread = evaluate(frag.base, {frag.vars[0]: i, frag.vars[1]: j})
    assert sorted(np.bincount(thread.reshape(-1)).tolist()) == [64] * 128


def test_shared_operands_take_the_mma_swizzle_and_metadata_stays_row_major():
    g = _op(_kernel(128, 128, 64))
    tiles = {b.name: lay for b, lay in sp.shared_layouts(g).items()}
    assert set(tiles) == {"A_s", "B_s"}  # E_s: none, row-major


# ---- errors at the user's line -----------------------------------------------------------------


def _raises_at(message: str, line: str):
    return pytest.raises(UserError, match=rf"(?s){message}.*--> [^\n]*test_gemm_sp\.py:\d+.*\|[^\n]*{re.escape(line)}")


def test_trace_time_errors_at_the_users_line():
    with _raises_at(
        r"the metadata E \('e'\) is \[64, 2\]; with int16 elements, each describing 16 columns", "T.gemm_sp(a, e, b, c)"
    ):

        @T.prim_func
        def wrong_e(X: T.Tensor((4,), "float32")):
            with T.Kernel(1, threads=128):
                a = T.alloc_shared((64, 32), "float16")
                e = T.alloc_shared((64, 2), "int16")
                b = T.alloc_shared((64, 64), "float16")
                c = T.alloc_fragment((64, 64), "float32")
                T.gemm_sp(a, e, b, c)

    with _raises_at(r"shapes do not chain: A_sparse is \[64, 32\] \(A is 64 x 64", "T.gemm_sp(a, e, b, c)"):

        @T.prim_func
        def wrong_k(X: T.Tensor((4,), "float32")):
            with T.Kernel(1, threads=128):
                a = T.alloc_shared((64, 32), "float16")
                e = T.alloc_shared((64, 4), "int16")
                b = T.alloc_shared((32, 64), "float16")
                c = T.alloc_fragment((64, 64), "float32")
                T.gemm_sp(a, e, b, c)

    with _raises_at(r"no sparse tensor-core instruction multiplies float32", "T.gemm_sp(a, e, b, c)"):

        @T.prim_func
        def tf32(X: T.Tensor((4,), "float32")):
            with T.Kernel(1, threads=128):
                a = T.alloc_shared((64, 32), "float32")
                e = T.alloc_shared((64, 4), "int16")
                b = T.alloc_shared((64, 64), "float32")
                c = T.alloc_fragment((64, 64), "float32")
                T.gemm_sp(a, e, b, c)

    with _raises_at(
        r"the metadata E \('e'\) is float16; it must be an 8-, 16- or 32-bit integer", "T.gemm_sp(a, e, b, c)"
    ):

        @T.prim_func
        def float_e(X: T.Tensor((4,), "float32")):
            with T.Kernel(1, threads=128):
                a = T.alloc_shared((64, 32), "float16")
                e = T.alloc_shared((64, 4), "float16")
                b = T.alloc_shared((64, 64), "float16")
                c = T.alloc_fragment((64, 64), "float32")
                T.gemm_sp(a, e, b, c)

    with _raises_at(r"the metadata E \('e'\) must be a shared tile", "T.gemm_sp(a, e, b, c)"):

        @T.prim_func
        def fragment_e(X: T.Tensor((4,), "float32")):
            with T.Kernel(1, threads=128):
                a = T.alloc_shared((64, 32), "float16")
                e = T.alloc_fragment((64, 4), "int16")
                b = T.alloc_shared((64, 64), "float16")
                c = T.alloc_fragment((64, 64), "float32")
                T.gemm_sp(a, e, b, c)

    with _raises_at(r"does not lower sparse gemms to wgmma.sp; use T.gemm_sp", "T.wgmma_gemm_sp(a, e, b, c)"):

        @T.prim_func
        def explicit_wgmma(X: T.Tensor((4,), "float32")):
            with T.Kernel(1, threads=128):
                a = T.alloc_shared((64, 32), "float16")
                e = T.alloc_shared((64, 4), "int16")
                b = T.alloc_shared((64, 64), "float16")
                c = T.alloc_fragment((64, 64), "float32")
                T.wgmma_gemm_sp(a, e, b, c)

    with _raises_at(r"sparse tcgen05 mma needs Blackwell", "T.tcgen05_gemm_sp(a, e, b, c)"):

        @T.prim_func
        def blackwell(X: T.Tensor((4,), "float32")):
            with T.Kernel(1, threads=128):
                a = T.alloc_shared((64, 32), "float16")
                e = T.alloc_shared((64, 4), "int16")
                b = T.alloc_shared((64, 64), "float16")
                c = T.alloc_fragment((64, 64), "float32")
                T.tcgen05_gemm_sp(a, e, b, c)


def test_metadata_with_a_layout_is_refused_at_the_users_line():
    @T.prim_func
    def main(
        A: T.Tensor((64, 32), "float16"),
        E: T.Tensor((64, 8), "int8"),
        B: T.Tensor((64, 64), "float16"),
        C: T.Tensor((64, 64), "float32"),
    ):
        with T.Kernel(1, threads=128):
            a = T.alloc_shared((64, 32), "float16")
            e = T.alloc_shared((64, 8), "int8")
            b = T.alloc_shared((64, 64), "float16")
            c = T.alloc_fragment((64, 64), "float32")
            T.annotate_layout({e: T.Layout((64, 8), lambda i, j: [i, (j + i) % 8])})
            T.copy(A, a)
            T.copy(E, e)
            T.copy(B, b)
            T.gemm_sp(a, e, b, c, clear_accum=True)
            T.copy(c, C)

    with _raises_at(r"reads the metadata E \('e'\) row-major", "T.gemm_sp(a, e, b, c, clear_accum=True)"):
        tilelang.compile(main, target="sm_80")


def test_compile_time_errors_at_the_users_line():
    # fp8 needs sm_89: the gemm's line is shown, not a ptxas error.
    with _raises_at(r"no sparse tensor-core instruction on sm_80 multiplies float8_e4m3", "T.gemm_sp(A_s, E_s"):
        tilelang.compile(_kernel(64, 64, 64, "float8_e4m3", "float32", "int32"), target="sm_80")
    with _raises_at(r"K = 32 \(A_sparse has 16 columns\) is not a multiple of 64", "T.gemm_sp(A_s, E_s"):
        tilelang.compile(_kernel(64, 64, 32, "int8", "int32", "int8"), target="sm_80")
    with _raises_at(r"T.gemm_sp: 4 warps cannot tile a 24 x 64 output", "T.gemm_sp(A_s, E_s"):
        tilelang.compile(_kernel(24, 64, 64), target="sm_80")


# ---- generated CUDA and nvcc ----------------------------------------------------------------------


def _ptx(src, target):
    """The PTX nvcc makes of generated device source."""
    import tempfile

    with tempfile.TemporaryDirectory() as tmp:
        cu, ptx = os.path.join(tmp, "k.cu"), os.path.join(tmp, "k.ptx")
        with open(cu, "w") as f:
            f.write(src)
        subprocess.run(
            [env.nvcc_path(), *cuda.nvcc_flags(target), "-ptx", "-o", ptx, cu], check=True, capture_output=True
        )
        return open(ptx).read()


def test_example_shape_lowers_to_mma_sp_for_sm80_and_sm90a():
    # The public example's tile: 128 x 128 x 64, int16 metadata, 128 threads.
    for arch in ("sm_80", "sm_90a"):
        k = tilelang.compile(_kernel(128, 128, 64), target=arch)
        src = k.get_kernel_source()
        assert '#include "tl_templates/cuda/gemm_sp.h"' in src
        assert "tl::gemm_sp_ss<128, 128, 64, 2, 2, false, false, false, true, 32, 128, 4, 2, 3>(" in src
        ptx = _ptx(src, k.target)
        # 4 K = 64 / 32 atoms x (64 / 16 rows) x (64 / 8 columns) per warp.
        atoms = re.findall(r"mma\.sp::ordered_metadata\.sync\.aligned\.m16n8k32\.row\.col\.f32\.f16\.f16\.f32", ptx)
        assert len(atoms) == 2 * 4 * 8, len(atoms)
        cuda.compile_object(src, k.target)


@pytest.mark.parametrize(
    "dtype,accum,e_dtype,arch,kind,trans",
    [
        ("float16", "float16", "int8", "sm_80", "rs", (False, False, False)),
        ("bfloat16", "float32", "int32", "sm_90a", "sr", (True, True, False)),
        ("float16", "float32", "int16", "sm_80", "ss", (True, True, True)),
        ("int8", "int32", "int32", "sm_80", "ss", (False, False, True)),
        ("float8_e4m3", "float32", "int16", "sm_89", "ss", (False, False, False)),
        ("float8_e5m2", "float32", "int8", "sm_90a", "rs", (False, False, False)),
        ("float16", "float32", "int32", "sm_90a", "rr", (False, True, False)),
    ],
)
def test_dtypes_operand_places_and_transposes_compile(dtype, accum, e_dtype, arch, kind, trans):
    trans_a, trans_e, trans_b = trans
    func = _kernel(64, 64, 128, dtype, accum, e_dtype, trans_a, trans_e, trans_b, kind)
    k = tilelang.compile(func, target=arch)
    assert f"tl::gemm_sp_{kind}<64, 64, 128" in k.get_kernel_source()
    cuda.compile_object(k.get_kernel_source(), k.target)


def test_run_time_clear_and_pipelined_loop_compile():
    @T.prim_func
    def main(
        A: T.Tensor((128, 128), "float16"),
        E: T.Tensor((128, 16), "int16"),
        B: T.Tensor((256, 128), "float16"),
        C: T.Tensor((128, 128), "float32"),
    ):
        with T.Kernel(1, threads=128):
            a = T.alloc_shared((128, 32), "float16")
            e = T.alloc_shared((128, 4), "int16")
            b = T.alloc_shared((64, 128), "float16")
            c = T.alloc_fragment((128, 128), "float32")
            for k in T.Pipelined(4, num_stages=2):
                T.copy(A[0, k * 32], a)
                T.copy(E[0, k * 4], e)
                T.copy(B[k * 64, 0], b)
                T.gemm_sp(a, e, b, c, clear_accum=k == 0)
            T.copy(c, C)

    kernel = tilelang.compile(main, target="sm_90a")
    src = kernel.get_kernel_source()
    calls = [line for line in src.splitlines() if "tl::gemm_sp_ss<" in line]
    assert calls and all("== 0)" in line.rsplit(",", 1)[1] for line in calls), calls


def test_int16_metadata_loaded_by_tma():
    # E stored K-major (4 x 64 int16: 128-byte rows) and A, B with TMA-able swizzles: on sm_90a every
    # load of the pipelined loop is TMA, E's included.
    @T.prim_func
    def main(
        A: T.Tensor((128, 128), "float16"),
        E: T.Tensor((16, 128), "int16"),
        B: T.Tensor((256, 64), "float16"),
        C: T.Tensor((128, 64), "float32"),
    ):
        with T.Kernel(1, threads=128):
            a = T.alloc_shared((128, 32), "float16")
            e = T.alloc_shared((4, 128), "int16")
            b = T.alloc_shared((64, 64), "float16")
            c = T.alloc_fragment((128, 64), "float32")
            T.clear(c)
            for k in T.Pipelined(4, num_stages=2):
                T.copy(A[0, k * 32], a)
                T.copy(E[k * 4, 0], e)
                T.copy(B[k * 64, 0], b)
                T.gemm_sp(a, e, b, c, transpose_E=True)
            T.copy(c, C)

    tilelang.compile(main, target="sm_90a")

"""select_gemm_instructions: each T.gemm's instruction and plan, decided from the target, the threads
of its scope and tl.disable_wgmma, recorded on the call; the errors it reports at the user's gemm."""

import re

import pytest
import tvm_ffi
from ir_testing import assert_ir_equal
from tvm import tirx

import tilelang
import tilelang.language as T
from tilelang.codegen import cuda
from tilelang.errors import UserError
from tilelang.op import gemm as gemm_op
from tilelang.op.gemm import mma, selection, wgmma
from tilelang.options import CompileOptions
from tilelang.testing import assert_points_at, locations_shown
from tilelang.transform.select_gemm_instructions import select_gemm_instructions
from tilelang.utils.target import determine_target


def _gemm_kernel(threads=256, dtype="float16", M=128, branch=False):
    @T.prim_func
    def main(A: T.Tensor((M, 64), dtype), B: T.Tensor((64, 128), dtype), C: T.Tensor((M, 128), "float32")):
        with T.Kernel(1, threads=threads):
            A_s = T.alloc_shared((M, 64), dtype)
            B_s = T.alloc_shared((64, 128), dtype)
            C_f = T.alloc_fragment((M, 128), "float32")
            tx = T.get_thread_binding()
            if branch:
                if tx < 128:
                    T.gemm(A_s, B_s, C_f)
            else:
                T.gemm(A_s, B_s, C_f)

    return main


def _on(func, arch):
    return func.with_attr("target", determine_target(arch))


def _with_plan(func, plan):
    """`func` with `plan` recorded on its gemm: what the pass should produce."""

    def on_eval(stmt):
        return tirx.Evaluate(selection.record(stmt.value, plan)) if gemm_op.is_gemm(stmt) else stmt

    return func.with_body(tvm_ffi.structural_map(func.body, [(tirx.Evaluate, on_eval)]))


def _plans(func):
    found = []
    tvm_ffi.structural_walk(
        func.body, [(tirx.Evaluate, lambda s: found.append(gemm_op.Gemm(s.value).plan) if gemm_op.is_gemm(s) else None)]
    )
    return found


def test_wgmma_on_hopper():
    # Two warpgroups over 128 rows: one 64-row instruction each; 128-byte panels for both operands.
    before = _on(_gemm_kernel(), "sm_90a")
    assert_ir_equal(select_gemm_instructions(before), _with_plan(before, wgmma.Plan(2, 1, 3, 3)))


def test_mma_sync_before_hopper_and_when_wgmma_is_switched_off():
    for arch, options in [("sm_80", CompileOptions()), ("sm_90a", CompileOptions(disable_wgmma=True))]:
        before = _on(_gemm_kernel(), arch)
        # 8 warps as 4 x 2 over 128 x 128 (32 x 64 warp tiles: as square as fits, ties to more along M),
        # k16 fp16 instructions.
        assert_ir_equal(select_gemm_instructions(before, options), _with_plan(before, mma.Plan(4, 2, 16)))


def test_the_threads_of_a_thread_branch_decide():
    # Under `if tx < 128` one warpgroup runs the gemm: one warpgroup along M.
    (plan,) = _plans(select_gemm_instructions(_on(_gemm_kernel(branch=True), "sm_90a")))
    assert plan == wgmma.Plan(1, 1, 3, 3)


def test_selecting_again_replaces_the_record():
    once = select_gemm_instructions(_on(_gemm_kernel(), "sm_90a"))
    assert_ir_equal(select_gemm_instructions(once), once)


def test_dtypes_the_target_cannot_multiply_are_an_error_at_the_gemm():
    with pytest.raises(UserError, match=r"(?s)no tensor-core instruction on sm_80 .*float8_e4m3fn.*T.gemm\(A_s") as err:
        select_gemm_instructions(_on(_gemm_kernel(dtype="float8_e4m3fn"), "sm_80"))
    assert_points_at(err, "T.gemm(A_s, B_s, C_f)")


def _tile_read_by_two_gemms(rows_dq=32):
    """K_s is read by a 128-row gemm (wgmma on sm_90a) and by a gemm of `rows_dq` rows, which with
    32 rows has too few for wgmma (mma.sync): an attention backward's S = K Q^T and dQ = dS^T K."""

    @T.prim_func
    def main(
        K: T.Tensor((128, 128), "float16"),
        Q: T.Tensor((rows_dq, 128), "float16"),
        dS: T.Tensor((128, rows_dq), "float16"),
        S: T.Tensor((128, rows_dq), "float32"),
        dQ: T.Tensor((rows_dq, 128), "float32"),
    ):
        with T.Kernel(1, threads=256):
            K_s = T.alloc_shared((128, 128), "float16")
            Q_s = T.alloc_shared((rows_dq, 128), "float16")
            dS_s = T.alloc_shared((128, rows_dq), "float16")
            S_f = T.alloc_fragment((128, rows_dq), "float32")
            dQ_f = T.alloc_fragment((rows_dq, 128), "float32")
            T.copy(K, K_s)
            T.copy(Q, Q_s)
            T.copy(dS, dS_s)
            T.gemm(K_s, Q_s, S_f, transpose_B=True, clear_accum=True)
            T.gemm(dS_s, K_s, dQ_f, transpose_A=True, clear_accum=True)
            T.copy(S_f, S)
            T.copy(dQ_f, dQ)

    return main


def _tile_read_as_a():
    """Q_s (32 rows) is the B operand of a 128-row wgmma (S = K Q^T) and the A operand of a 32-row
    gemm (O = Q V), which is mma.sync: it reads its A operand in the wgmma panels."""

    @T.prim_func
    def main(
        K: T.Tensor((128, 128), "float16"),
        Q: T.Tensor((32, 128), "float16"),
        V: T.Tensor((128, 64), "float16"),
        S: T.Tensor((128, 32), "float32"),
        O: T.Tensor((32, 64), "float32"),
    ):
        with T.Kernel(1, threads=256):
            K_s = T.alloc_shared((128, 128), "float16")
            Q_s = T.alloc_shared((32, 128), "float16")
            V_s = T.alloc_shared((128, 64), "float16")
            S_f = T.alloc_fragment((128, 32), "float32")
            O_f = T.alloc_fragment((32, 64), "float32")
            T.copy(K, K_s)
            T.copy(Q, Q_s)
            T.copy(V, V_s)
            T.gemm(K_s, Q_s, S_f, transpose_B=True, clear_accum=True)
            T.gemm(Q_s, V_s, O_f, clear_accum=True)
            T.copy(S_f, S)
            T.copy(O_f, O)

    return main


def test_an_mma_gemm_reads_its_a_operand_in_wgmma_panels():
    plans = _plans(select_gemm_instructions(_on(_tile_read_as_a(), "sm_90a")))
    assert isinstance(plans[0], wgmma.Plan) and (plans[1].panels_a, plans[1].panels_b) == (3, 0)
    k = tilelang.compile(_tile_read_as_a(), target="sm_90a")
    cuda.compile_object(k.get_kernel_source(), k.target, host_src=k.host_source)


def test_gemms_reading_one_tile_agree_on_its_layout():
    # Alone, the first gemm would be wgmma (panels) and the second mma.sync (the template's swizzle);
    # K_s has one layout, so the mma.sync gemm reads it in the wgmma panels (B operand, 128-byte
    # swizzle) and the first stays wgmma. With 64 rows both are wgmma and agree.
    plans = _plans(select_gemm_instructions(_on(_tile_read_by_two_gemms(), "sm_90a")))
    assert isinstance(plans[0], wgmma.Plan) and (plans[1].panels_a, plans[1].panels_b) == (0, 3)
    plans = _plans(select_gemm_instructions(_on(_tile_read_by_two_gemms(rows_dq=64), "sm_90a")))
    assert [type(p) for p in plans] == [wgmma.Plan, wgmma.Plan]


def test_a_tile_two_gemms_read_is_loaded_in_the_layout_they_read():
    # K_s is in the wgmma panels, which TMA writes; the mma.sync gemm reads it with its panel rows
    # (the template's rows_b, 128) and the 128-byte swizzle.
    k = tilelang.compile(_tile_read_by_two_gemms(), target="sm_90a")
    src = k.get_kernel_source()
    assert "tl::tma_load(K_tma" in src and "tl::tma_load(dS_tma" in src and "tl::wgmma_ss<" in src
    assert re.search(r"tl::gemm_ss<32, 128, 128, \d, \d, true, false, true, 32, 128, \d, 3, 0, 128>", src)
    cuda.compile_object(src, k.target, host_src=k.host_source)


def test_an_mma_template_offset_is_the_wgmma_panel_layout():
    """gemm_mma.h's tile_offset for a paneled tile (written here in Python, from the template's
    formula) is the layout wgmma reads: gmma_panels."""
    import numpy as np

    from tilelang.layout import layout as sl
    from tilelang.layout.evaluate import evaluate, grid

    def swizzle16(bits, ld, off):
        line = ld if ld % 64 == 0 else 64
        mask = (1 << bits) - 1
        chunk, row = (off >> 3) & mask, (off // line) & mask
        return off + (((chunk ^ row) - chunk) << 3)

    for rows, cols, bits in ((128, 192, 3), (32, 128, 3), (64, 64, 2), (16, 64, 1)):
        p = 8 << bits
        r, c = np.meshgrid(np.arange(rows), np.arange(cols), indexing="ij")
        ours = (c // p) * (rows * p) + swizzle16(bits, p, r * p + c % p)
        lay = sl.gmma_panels((rows, cols), 16, bits)
        want = evaluate(lay.forward, dict(zip(lay.vars, grid((rows, cols))))).reshape(rows, cols)
        assert np.array_equal(ours, want), (rows, cols, bits)


def _accumulator_of_two_gemms():
    """P = Q K^T + Qt Kt^T (two gemms into one fragment, as an MLA backward's scores over the main
    and the rope dimensions), and dK = P_s^T Q[:, 64:], a 32-row gemm reading Q_s: with 32 rows it
    is mma.sync, and reading half of Q_s's rows it cannot read them in wgmma panels, so Q_s is read
    in the mma.sync swizzle and the first gemm is mma.sync too; the second gemm alone would be
    wgmma, whose accumulator registers differ."""

    @T.prim_func
    def main(
        Q: T.Tensor((64, 128), "float16"),
        K: T.Tensor((32, 128), "float16"),
        Qt: T.Tensor((64, 64), "float16"),
        Kt: T.Tensor((32, 64), "float16"),
        P: T.Tensor((64, 32), "float32"),
        dK: T.Tensor((32, 64), "float32"),
    ):
        with T.Kernel(1, threads=256):
            Q_s = T.alloc_shared((64, 128), "float16")
            K_s = T.alloc_shared((32, 128), "float16")
            Qt_s = T.alloc_shared((64, 64), "float16")
            Kt_s = T.alloc_shared((32, 64), "float16")
            P_s = T.alloc_shared((64, 32), "float16")
            P_f = T.alloc_fragment((64, 32), "float32")
            dK_f = T.alloc_fragment((32, 64), "float32")
            T.copy(Q, Q_s)
            T.copy(K, K_s)
            T.copy(Qt, Qt_s)
            T.copy(Kt, Kt_s)
            T.clear(P_f)
            T.gemm(Q_s, K_s, P_f, transpose_B=True, policy=T.GemmWarpPolicy.FullCol)
            T.gemm(Qt_s, Kt_s, P_f, transpose_B=True, policy=T.GemmWarpPolicy.FullCol)
            T.copy(P_f, P)
            T.copy(P_f, P_s)
            # (The right half of Q_s: not whole tiles, so it cannot be read in the wgmma panels.)
            T.gemm(P_s, Q_s[:, 64:128], dK_f, transpose_A=True, policy=T.GemmWarpPolicy.FullCol, clear_accum=True)
            T.copy(dK_f, dK)

    return main


def test_gemms_into_one_accumulator_agree_on_its_registers():
    # Before, the second gemm stayed wgmma and layout inference refused P_f ("used by two operations
    # that need different layouts"). Now both are mma.sync with the same warps (2 x 4 over 64 x 32).
    plans = _plans(select_gemm_instructions(_on(_accumulator_of_two_gemms(), "sm_90a")))
    assert plans == [mma.Plan(2, 4, 16), mma.Plan(2, 4, 16), mma.Plan(1, 8, 16)]
    k = tilelang.compile(_accumulator_of_two_gemms(), target="sm_90a")
    src = k.get_kernel_source()
    calls = re.findall(r"tl::gemm_ss<(\d+), (\d+), (\d+), (\d+), (\d+),[^>]*>\([^;]*P_f_local", src)
    assert [c[3:] for c in calls] == [("2", "4"), ("2", "4")]
    cuda.compile_object(src, k.target, host_src=k.host_source)


def test_gemms_into_one_accumulator_stay_wgmma_when_nothing_forces_mma():
    # Without the 32-row gemm both score gemms are wgmma (two warpgroups along N, 16 columns each)
    # with one plan, so they agree on P_f: nothing changes.
    func = _accumulator_of_two_gemms()

    def drop_dk(stmt):
        return tirx.Evaluate(0) if gemm_op.is_gemm(stmt) and gemm_op.Gemm(stmt.value).c.buffer.name == "dK_f" else stmt

    func = func.with_body(tvm_ffi.structural_map(func.body, [(tirx.Evaluate, drop_dk)]))
    plans = _plans(select_gemm_instructions(_on(func, "sm_90a")))
    assert [(p.wg_m, p.wg_n) for p in plans] == [(1, 2), (1, 2)] and all(isinstance(p, wgmma.Plan) for p in plans)


def _location(marker):
    """(file, line) of the line of this file ending with `marker` (where an error must point)."""
    with open(__file__) as f:
        (line,) = [k + 1 for k, text in enumerate(f) if text.rstrip().endswith(marker)]
    return __file__, line


def _mixed_operands(convert_first=False):
    @T.prim_func
    def main(A: T.Tensor((64, 64), "int8"), B: T.Tensor((64, 64), "float16"), C: T.Tensor((64, 64), "float32")):
        with T.Kernel(1, threads=128):
            A_s = T.alloc_shared((64, 64), "int8")
            A_h = T.alloc_shared((64, 64), "float16")
            B_s = T.alloc_shared((64, 64), "float16")
            C_f = T.alloc_fragment((64, 64), "float32")
            T.copy(A, A_s)
            T.copy(B, B_s)
            if convert_first:
                T.copy(A_s, A_h)
                T.gemm(A_h, B_s, C_f)
            else:
                T.gemm(A_s, B_s, C_f)  # int8 x float16
            T.copy(C_f, C)

    return main


@pytest.mark.parametrize("arch", ["sm_80", "sm_90a"])
def test_operands_of_different_dtypes_are_an_error_at_the_gemm(arch):
    with pytest.raises(UserError) as info:
        tilelang.compile(_mixed_operands(), target=arch)
    assert_points_at(info, "T.gemm(A_s, B_s, C_f)  # int8 x float16")
    text = str(info.value)
    assert "different dtypes: A_s is int8 and B_s is float16" in text
    assert "supported:" not in text  # not the instruction table
    assert (*_location("# int8 x float16"), "T.gemm(A_s, B_s, C_f)  # int8 x float16") in locations_shown(text)
    # What the message advises compiles.
    kernel = tilelang.compile(_mixed_operands(convert_first=True), target=arch)
    cuda.compile_object(kernel.get_kernel_source(), kernel.target)

"""plan_pipelines: each T.Pipelined loop's form (cp.async, TMA, TMA with a producer warpgroup,
2-block clusters) recorded on the loop, from the target and the switches; the IR otherwise as it was."""

import tvm_ffi
from ir_testing import assert_ir_equal
from tvm import tirx

import tilelang.language as T
from tilelang.options import CompileOptions
from tilelang.transform.pipelining import schedule
from tilelang.transform.plan_pipelines import plan_pipelines
from tilelang.transform.select_gemm_instructions import select_gemm_instructions
from tilelang.utils.target import determine_target


def _gemm(arch, stages=3, threads=256, grid=(2, 2)):
    """A 256 x 256 GEMM in 128 x 128 tiles, its gemm's instruction selected."""

    @T.prim_func
    def main(
        A: T.Tensor((256, 512), "float16"), B: T.Tensor((512, 256), "float16"), C: T.Tensor((256, 256), "float32")
    ):
        with T.Kernel(*grid, threads=threads) as (bx, by):
            A_s = T.alloc_shared((128, 64), "float16")
            B_s = T.alloc_shared((64, 128), "float16")
            C_f = T.alloc_fragment((128, 128), "float32")
            T.clear(C_f)
            for k in T.Pipelined(8, num_stages=stages):
                T.copy(A[by * 128, k * 64], A_s)
                T.copy(B[k * 64, bx * 128], B_s)
                T.gemm(A_s, B_s, C_f)
            T.copy(C_f, C[by * 128, bx * 128])

    return select_gemm_instructions(main.with_attr("target", determine_target(arch)))


def _loops(func):
    out = []
    tvm_ffi.structural_walk(func.body, [(tirx.For, lambda f: out.append(f) if schedule.stages_of(f) else None)])
    return out


def _form(func, **options):
    (loop,) = _loops(plan_pipelines(func, CompileOptions(**options)))
    return schedule.form_of(loop)


def test_only_the_loop_annotations_change():
    func = _gemm("sm_90a")
    after = plan_pipelines(func)
    (loop,) = _loops(after)
    assert loop.annotations[schedule.FORM] == schedule.TMA_WS

    def strip(f):
        notes = {k: v for k, v in f.annotations.items() if k != schedule.FORM}
        return tirx.For(f.loop_var, f.min, f.extent, f.kind, f.body, f.thread_binding, notes, f.step, span=f.span)

    assert_ir_equal(after.with_body(tvm_ffi.structural_map(after.body, [(tirx.For, strip)])), func)


def test_forms():
    assert _form(_gemm("sm_80")) == (schedule.CP_ASYNC, None)
    assert _form(_gemm("sm_90a")) == (schedule.TMA_WS, None)
    assert _form(_gemm("sm_90a"), disable_warp_specialized=True) == (schedule.TMA, None)
    assert _form(_gemm("sm_90a"), disable_tma_lower=True) == (schedule.CP_ASYNC, None)


def test_clusters_share_the_copies_both_blocks_make():
    # Blocks (bx, 2c) and (bx, 2c + 1) copy the same B tile: a cluster along y multicasts copy 1.
    assert _form(_gemm("sm_90a"), enable_tma_multicast=True) == (schedule.TMA_WS, (1, [1]))


def test_a_loop_without_copies_is_not_planned():
    @T.prim_func
    def main(A: T.Tensor((128,), "float32")):
        with T.Kernel(1, threads=128) as _:
            acc = T.alloc_fragment((128,), "float32")
            for k in T.Pipelined(4, num_stages=2):
                for i in T.Parallel(128):
                    acc[i] = acc[i] + A[i] * k

    func = main.with_attr("target", determine_target("sm_90a"))
    assert_ir_equal(plan_pipelines(func), func)


def test_copies_inside_an_inner_loop_are_reported(caplog):
    """Copies filling a tile in an inner loop (two half tiles from two table entries) are not
    issued ahead: the planner says so at INFO instead of silently running a plain loop."""
    import logging

    @T.prim_func
    def main(K: T.Tensor((64, 32, 128), "float16"), table: T.Tensor((8,), "int32"), O: T.Tensor((64, 128), "float16")):
        with T.Kernel(1, threads=128):
            S = T.alloc_shared((64, 128), "float16")
            for k in T.Pipelined(4, num_stages=2):
                for p in T.unroll(2):
                    T.copy(K[table[2 * k + p], 0:32, :], S[p * 32 : (p + 1) * 32, :])
                T.copy(S, O)

    with caplog.at_level(logging.INFO, logger="tilelang"):
        plan_pipelines(main)
    assert "its global-to-shared copies sit inside inner loops or conditions" in caplog.text

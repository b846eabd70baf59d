"""place_wgmma_waits: a warp-specialized consumer loop's wgmma gemms run asynchronously; the stage
and release marks inject_tma_pipelines leaves become waits and barrier arrivals (on time, or one
iteration late while a stage of loads stays ahead); gemms the user made asynchronous keep the user's
waits; other code is left as it is. On the IR, no codegen (test_consumer_loop checks the CUDA)."""

import tvm_ffi
from ir_testing import assert_ir_equal
from tvm import ir, tirx

import tilelang.language as T
from tilelang.op import base, wgmma_wait
from tilelang.op.gemm import Gemm, is_gemm
from tilelang.options import CompileOptions
from tilelang.transform.inject_tma_pipelines import inject_tma_pipelines
from tilelang.transform.pipelining import marks
from tilelang.transform.place_wgmma_waits import place_wgmma_waits
from tilelang.transform.plan_pipelines import plan_pipelines
from tilelang.transform.select_gemm_instructions import select_gemm_instructions
from tilelang.utils.ir import collect, extern_name
from tilelang.utils.target import determine_target


def _gemm(stages, runs=None, user_wait=False, read_view=False, **options):
    """A 128 x 128 GEMM over K = 512 (with `runs`, that many times: the pipelined loop inside
    another loop), as `inject_tma_pipelines` leaves it."""

    @T.macro
    def k_loop(A, B, A_s, B_s, C_f, C_v):
        for k in T.Pipelined(8, num_stages=stages):
            T.copy(A[0, k * 64], A_s)
            T.copy(B[k * 64, 0], B_s)
            if user_wait:
                T.gemm(A_s, B_s, C_f, wg_wait=-1)
                T.wait_wgmma(0)
            else:
                T.gemm(A_s, B_s, C_f)
            if read_view:  # the accumulator read through its reshaped view, in the same iteration
                for r, h, c in T.Parallel(128, 2, 64):
                    C_v[r, h, c] = T.max(C_v[r, h, c], 0)

    @T.prim_func
    def main(A: T.Tensor((128, 512), "float16"), B: T.Tensor((512, 128), "float16"), C: T.Tensor((128, 128), "float")):
        with T.Kernel(1, threads=128):
            A_s = T.alloc_shared((128, 64), "float16")
            B_s = T.alloc_shared((64, 128), "float16")
            C_f = T.alloc_fragment((128, 128), "float")
            C_v = T.reshape(C_f, (128, 2, 64))
            T.clear(C_f)
            if runs is None:
                k_loop(A, B, A_s, B_s, C_f, C_v)
            else:
                for _ in T.serial(runs):
                    k_loop(A, B, A_s, B_s, C_f, C_v)
            T.copy(C_f, C)

    func = main.with_attr("target", determine_target("sm_90a"))
    opts = CompileOptions(**options)
    return inject_tma_pipelines(plan_pipelines(select_gemm_instructions(func, opts), opts), opts)


def _calls(func, name):
    return [c for c in collect(func.body, ir.Call) if base.is_tile_op(c, name)]


def _marked(func) -> bool:
    stages = [a for a in collect(func.body, tirx.AttrStmt) if a.attr_key == marks.CONSUMER_STAGE]
    return bool(stages or _calls(func, marks.RELEASE))


def _consumer_loop(func):
    (loop,) = [f for f in collect(func.body, tirx.For) if f.loop_var.name == "i"]
    return loop


def _releases(stmt):
    return [r for r in map(marks.parse_release, collect(stmt, tirx.Evaluate)) if r is not None]


def _arrivals(stmt):
    return [e for e in collect(stmt, tirx.Evaluate) if extern_name(e) == "tl::mbarrier_arrive_warp"]


def _gemm_waits(stmt):
    return [Gemm(e.value).wg_wait for e in collect(stmt, tirx.Evaluate) if is_gemm(e)]


def test_inject_leaves_marks_and_the_pass_removes_them():
    before = _gemm(3)
    assert _marked(before) and not _arrivals(_consumer_loop(before))
    (release,) = [
        marks.parse_release(e) for e in collect(_consumer_loop(before), tirx.Evaluate) if marks.parse_release(e)
    ]
    assert (release.depth, release.stages, release.when, release.runs) == (0, 3, marks.ALWAYS, None)
    assert not _marked(place_wgmma_waits(before))


def test_with_a_stage_of_loads_ahead_the_gemm_runs_on_and_the_stage_before_is_freed():
    after = place_wgmma_waits(_gemm(3))
    loop = _consumer_loop(after)
    # The body's own gemm runs on (one group in flight: its wait folded into wg_wait=1) ...
    assert _gemm_waits(loop) == [1]
    # ... and the body frees the stage of the iteration before, from the second iteration on.
    (guarded,) = [s for s in collect(loop.body, tirx.IfThenElse) if _arrivals(s)]
    assert tvm_ffi.structural_equal(guarded.condition, loop.loop_var >= 1)
    index = _arrivals(guarded)[0].value.args[1].args[0].indices[0]
    assert tvm_ffi.structural_equal(index, tirx.floormod(loop.loop_var - 1, 3))
    # After the loop: everything waited for, the accumulator fenced.
    (after_loop,) = [c for c in _calls(after, wgmma_wait.NAME)]
    assert wgmma_wait.pending_of(after_loop) == 0 and [b.name for b in wgmma_wait.fragments_of(after_loop)] == ["C_f"]


def test_with_two_stages_the_body_waits_and_frees_its_own_stage():
    loop = _consumer_loop(place_wgmma_waits(_gemm(2)))
    assert _gemm_waits(loop) == [0]
    (arrive,) = _arrivals(loop)
    assert tvm_ffi.structural_equal(arrive.value.args[1].args[0].indices[0], tirx.floormod(loop.loop_var, 2))
    assert not [s for s in collect(loop.body, tirx.IfThenElse) if _arrivals(s)]


def test_a_loop_inside_a_loop_frees_the_last_iteration_it_left_after_each_run():
    before = _gemm(3, runs=2)
    tail = _releases(before.body)
    assert [r.when for r in tail] == [marks.ALWAYS, marks.LATE] and all(r.runs is not None for r in tail)
    after = place_wgmma_waits(before)
    loop = _consumer_loop(after)
    # One late in the loop, so the iteration the last body leaves (7) is freed after the loop.
    assert len(_arrivals(loop)) == 1 and len(_arrivals(after.body)) == 2
    assert not _marked(after)


def test_a_read_of_the_accumulator_through_a_view_waits_for_the_gemm():
    # T.reshape gives the fragment another buffer over the same registers: reading it reads C_f.
    loop = _consumer_loop(place_wgmma_waits(_gemm(3, read_view=True)))
    assert _gemm_waits(loop) == [0]


def test_a_gemm_the_user_made_asynchronous_keeps_the_users_waits():
    after = place_wgmma_waits(_gemm(3, user_wait=True))
    loop = _consumer_loop(after)
    assert _gemm_waits(loop) == [-1] and not _calls(after, wgmma_wait.NAME)
    (arrive,) = _arrivals(loop)  # on time: nothing the pass knows of is in flight
    assert tvm_ffi.structural_equal(arrive.value.args[1].args[0].indices[0], tirx.floormod(loop.loop_var, 3))


def test_without_warp_specialization_the_pass_changes_nothing():
    before = _gemm(3, disable_warp_specialized=True)
    assert not _marked(before)
    assert_ir_equal(place_wgmma_waits(before), before)

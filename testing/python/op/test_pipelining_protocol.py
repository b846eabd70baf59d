"""The questions the pipelining passes ask a tile op (op/base.py: writes, async_load, issued_async,
mma, with_wait, with_clear): the answers of T.copy, T.fill and T.gemm, and a new op defined here
that becomes a pipeline's load (cp.async on sm_80, TMA on sm_90a) without any pass naming it."""

from tvm import tirx

import tilelang
import tilelang.language as T
from tilelang.op import base
from tilelang.op.copy import Copy
from tilelang.op.loops import build_parallel_nest
from tilelang.options import CompileOptions
from tilelang.transform.pipelining import schedule
from tilelang.transform.plan_pipelines import plan_pipelines
from tilelang.transform.select_gemm_instructions import select_gemm_instructions
from tilelang.utils.ir import collect
from tilelang.utils.target import determine_target


# A new load, defined the way a module under tilelang/op/ defines one: `load(src, dst)` copies a
# global tile into a shared tile element by element, and answers the pipelining questions.
@base.register
class _Load(base.TileOp):
    name = "test_load"
    expands = True

    def __init__(self, call, span=None):
        super().__init__(call, span)
        self.src, self.dst = base.Region.from_ir(call.args[0]), base.Region.from_ir(call.args[1])

    def expand(self, analyzer=None):
        def body(idx, loop_vars):
            src = [s + v for s, v in zip(self.src.starts, loop_vars)]
            return tirx.BufferStore(self.dst.buffer, tirx.BufferLoad(self.src.buffer, src), idx)

        return build_parallel_nest(self.dst, body, span=self.span)

    def writes(self):
        return [self.dst.buffer]

    def async_load(self):
        return base.AsyncLoad(self.src, self.dst)

    def issued_async(self):  # what T.copy issues for it: cp.async
        return base.make_call("copy", [self.src.to_ir(), self.dst.to_ir(), 0, 1, 0])


def load(src, dst):
    s, d = base.to_region_pair(src, dst, "load")
    return base.make_call(_Load.name, [s.to_ir(), d.to_ir()])


def _gemm(new_load=False, disable_tma=False):
    @T.prim_func
    def main(A: T.Tensor((128, 512), "float16"), B: T.Tensor((512, 128), "float16"), C: T.Tensor((128, 128), "float")):
        with T.Kernel(1, threads=128):
            A_s = T.alloc_shared((128, 64), "float16")
            B_s = T.alloc_shared((64, 128), "float16")
            C_f = T.alloc_fragment((128, 128), "float")
            T.clear(C_f)
            for k in T.Pipelined(8, num_stages=2):
                if new_load:
                    load(A[0:128, k * 64 : k * 64 + 64], A_s)
                else:
                    T.copy(A[0, k * 64], A_s, disable_tma=disable_tma)
                T.copy(B[k * 64, 0], B_s)
                T.gemm(A_s, B_s, C_f)
            T.copy(C_f, C)

    return main


def _ops(func):
    return [op for op in map(base.parse, collect(func.body, tirx.Evaluate)) if op is not None]


def test_the_answers_of_copy_fill_and_gemm():
    func = select_gemm_instructions(_gemm().with_attr("target", determine_target("sm_90a")), CompileOptions())
    fill, load_a, load_b, gemm, store = _ops(func)
    assert [b.name for b in fill.writes()] == ["C_f"] and fill.async_load() is None and fill.mma() is None
    assert load_a.async_load().tma and load_a.async_load().dst.name == "A_s" and load_a.writes()[0].name == "A_s"
    assert store.async_load() is None  # fragment to global: not a load a pipeline issues ahead
    assert Copy(load_a.issued_async()).is_async and not load_a.is_async
    m = gemm.mma()
    assert m.accumulator.name == "C_f" and m.register_operand is None
    assert [t.name for t in m.shared_operands] == ["A_s", "B_s"]
    assert m.asynchronous and m.wait == 0 and m.clear is False and m.row_warpgroups == 1
    waited = base.parse(gemm.with_wait(-1, True))
    assert waited.wg_wait == -1 and waited.async_operands and waited.plan == gemm.plan
    assert base.parse(gemm.with_clear(True)).clear is True
    # On sm_80 the gemm is mma.sync: on the tensor cores, but never running on after its call.
    func = select_gemm_instructions(_gemm().with_attr("target", determine_target("sm_80")), CompileOptions())
    assert not _ops(func)[3].mma().asynchronous
    (load_a,) = [op for op in _ops(_gemm(disable_tma=True)) if op.async_load() and op.dst.name == "A_s"]
    assert not load_a.async_load().tma


def test_a_new_load_is_a_producer_of_the_pipeline():
    func = select_gemm_instructions(_gemm(new_load=True).with_attr("target", determine_target("sm_90a")))
    (loop,) = [f for f in collect(func.body, tirx.For) if schedule.stages_of(f)]
    plan = schedule.schedule(loop)
    assert [type(base.parse(p)).__name__ for p in plan.producers] == ["_Load", "Copy"]
    planned = plan_pipelines(func)
    (loop,) = [f for f in collect(planned.body, tirx.For) if schedule.stages_of(f)]
    assert schedule.form_of(loop) == (schedule.TMA_WS, None)


def test_a_new_load_runs_as_cp_async_and_as_tma():
    # The same code as with T.copy for A: its loads issued ahead as cp.async (sm_80) or TMA (sm_90a).
    for target, call in (("sm_80", "tl::cp_async<"), ("sm_90a", "tl::tma_load(")):
        src = tilelang.compile(_gemm(new_load=True), out_idx=[2], target=target).get_kernel_source()
        plain = tilelang.compile(_gemm(), out_idx=[2], target=target).get_kernel_source()
        assert src.count(call) == plain.count(call) > 0
        assert src == plain

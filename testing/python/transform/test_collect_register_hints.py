"""collect_register_hints: the kernel's register hints leave the body (wherever they are written)
and become the `tl.register_hints` attribute, one statement per role; two different counts for one
role are a UserError at both lines; a kernel without hints is left as it is."""

import re

import pytest
import tvm_ffi
from tvm import ir, tirx

import tilelang.language as T
from tilelang.errors import UserError
from tilelang.language.barriers import REGISTER_HINT
from tilelang.testing import assert_points_at
from tilelang.transform.collect_register_hints import REGISTER_HINTS, collect_register_hints


def _hints_left(func) -> int:
    found = []

    def on_call(call):
        if isinstance(call.op, ir.Op) and call.op.name == REGISTER_HINT:
            found.append(call)

    tvm_ffi.structural_walk(func.body, [(ir.Call, on_call)])
    return len(found)


def test_hints_become_the_attribute():
    @T.prim_func
    def main(A: T.Tensor((256,), "float32")):
        with T.Kernel(1, threads=256):
            tx = T.get_thread_binding()
            if tx >= 128:
                T.annotate_producer_reg_dealloc()  # alone in its branch
            else:
                T.annotate_consumer_reg_alloc(232)
                A[tx] = 1.0

    assert _hints_left(main) == 2
    out = collect_register_hints(main)
    assert _hints_left(out) == 0
    hints = out.attrs[REGISTER_HINTS]
    assert int(hints["producer"][0]) == 24 and int(hints["consumer"][0]) == 232
    assert re.search(
        r"test_collect_register_hints.py:\d+:\d+\n\s*\|\n\d+ \|\s*T.annotate_consumer_reg_alloc\(232\)",
        hints["consumer"][1],
    )
    out.script()  # the attribute prints (the IR dump writes every pass's output)
    stores = []
    tvm_ffi.structural_walk(out.body, [(tirx.BufferStore, stores.append)])
    assert len(stores) == 1  # the rest of the branch is kept


@pytest.mark.parametrize("off", [T.no_set_max_nreg, T.disable_warp_group_reg_alloc])
def test_off_by_either_name(off):
    @T.prim_func
    def main(A: T.Tensor((128,), "float32")):
        with T.Kernel(1, threads=128):
            off()
            A[T.get_thread_binding()] = 0.0

    assert "none" in collect_register_hints(main).attrs[REGISTER_HINTS]


def test_a_kernel_without_hints_is_left_as_it_is():
    @T.prim_func
    def main(A: T.Tensor((128,), "float32")):
        with T.Kernel(1, threads=128):
            A[T.get_thread_binding()] = 0.0

    assert collect_register_hints(main).same_as(main)


def test_two_counts_for_one_role():
    @T.prim_func
    def main(A: T.Tensor((128,), "float32")):
        with T.Kernel(1, threads=128):
            T.annotate_consumer_reg_alloc(240)
            T.annotate_consumer_reg_alloc(232)

    message = r"(?s)consumer warpgroup's registers are hinted twice, as 240 and 232.*"
    message += r"annotate_consumer_reg_alloc\(240\).*annotate_consumer_reg_alloc\(232\)"
    with pytest.raises(UserError, match=message) as err:
        collect_register_hints(main)
    assert_points_at(err, "T.annotate_consumer_reg_alloc(232)")


def test_counts_are_checked_when_traced():
    for bad in (20, 100, 248, 24.0):
        # raised at the call: the traceback shows the user's line
        with pytest.raises(UserError, match=r"reg_count must be a multiple of 8 in \[24, 240\]"):
            T.annotate_producer_reg_dealloc(bad)
    with pytest.raises(UserError, match="multiple of 8"):  # raised at the call: the traceback shows the user's line
        T.annotate_consumer_reg_alloc(250)

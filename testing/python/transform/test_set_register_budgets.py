"""set_register_budgets: each side of a warp-specialized kernel starts with its setmaxnreg, the
counts within the register file; the kernel's register hints (T.annotate_producer_reg_dealloc,
T.annotate_consumer_reg_alloc, T.no_set_max_nreg) change them, and hinted counts that do not fit
are a UserError."""

import logging

import pytest
import tvm_ffi
from ir_testing import assert_ir_equal
from tvm import tirx

from tilelang import intrinsics
from tilelang.errors import UserError
from tilelang.transform.collect_register_hints import REGISTER_HINTS
from tilelang.transform.set_register_budgets import register_budgets, set_register_budgets
from tilelang.transform.warp_specialize import CONSUMER_BRANCH, PRODUCER_BRANCH


def _kernel(consumer_threads, with_budgets):
    tx = tirx.Var("tx", "int32")
    work = [tirx.Evaluate(tirx.call_extern("void", "producer_work")), tirx.Evaluate(tirx.call_extern("void", "work"))]
    producer, consumer = register_budgets(consumer_threads)
    asks = [
        intrinsics.SETMAXNREG_DEC.stmt({"registers": producer}),
        intrinsics.SETMAXNREG_INC.stmt({"registers": consumer}),
    ]
    sides = []
    for key, body, ask in zip((PRODUCER_BRANCH, CONSUMER_BRANCH), work, asks):
        sides.append(tirx.AttrStmt(tx, key, consumer_threads, tirx.SeqStmt([ask, body]) if with_budgets else body))
    return tirx.PrimFunc([], tirx.SeqStmt(sides))


@pytest.mark.parametrize("threads,expect", [(128, (40, 240)), (256, (24, 240)), (384, (24, 160)), (512, (24, 112))])
def test_each_side_asks_for_its_registers(threads, expect):
    assert register_budgets(threads) == expect
    assert_ir_equal(set_register_budgets(_kernel(threads, False)), _kernel(threads, True))


def test_a_kernel_without_warp_specialization_is_left_as_it_is():
    func = tirx.PrimFunc([], tirx.Evaluate(tirx.call_extern("void", "work")))
    assert set_register_budgets(func).same_as(func)


def _with_hints(func, **hints):
    """`func` with the attribute collect_register_hints leaves: {role: [registers, location]}."""
    return func.with_attr(REGISTER_HINTS, tvm_ffi.convert({r: [n, f"  --> kernel.py:{n}"] for r, n in hints.items()}))


def _asks(func):
    """{setmaxnreg intrinsic name: registers} of the kernel."""
    found = {}

    def on_eval(stmt):
        intrinsic = intrinsics.lookup(stmt)
        if intrinsic in intrinsics.SETMAXNREGS:
            found[intrinsic.name] = intrinsic.param(stmt, "registers")

    tvm_ffi.structural_walk(func.body, [(tirx.Evaluate, on_eval)])
    return found


@pytest.mark.parametrize(
    "hints, expect",
    [
        ({"producer": 24, "consumer": 240}, {"setmaxnreg_dec": 24, "setmaxnreg_inc": 240}),
        ({"producer": 24}, {"setmaxnreg_dec": 24, "setmaxnreg_inc": 240}),  # the consumers keep their own
        ({"consumer": 216}, {"setmaxnreg_dec": 24, "setmaxnreg_inc": 216}),
        ({"none": 0}, {}),
        ({"none": 0, "producer": 24}, {}),
    ],
)
def test_hints(hints, expect):
    out = set_register_budgets(_with_hints(_kernel(256, False), **hints))
    assert _asks(out) == expect
    assert REGISTER_HINTS not in out.attrs  # used up


def test_hinted_counts_past_the_register_file():
    # 256 consumer threads and the producer: 384 threads, launched with 168 registers each (504
    # per thread over the three warpgroups); 40 + 2 x 240 = 520 would leave the consumers waiting.
    with pytest.raises(UserError, match=r"(?s)need 520, more than the 504 \(3 x 168\).*consumers at 232") as err:
        set_register_budgets(_with_hints(_kernel(256, False), producer=40, consumer=240))
    assert "  --> kernel.py:40" in str(err.value)  # the hints' locations (made up here: line = count)
    with pytest.raises(UserError, match=r"lower its registers to 176.*at most 168") as err:
        set_register_budgets(_with_hints(_kernel(256, False), producer=176))
    assert "  --> kernel.py:176" in str(err.value)  # the hint's location (made up here: line = count)


def test_hints_without_warp_specialization_change_nothing(caplog):
    func = _with_hints(tirx.PrimFunc([], tirx.Evaluate(tirx.call_extern("void", "work"))), producer=24)
    with caplog.at_level(logging.INFO, logger="tilelang"):
        out = set_register_budgets(func)
    assert out.body.same_as(func.body) and REGISTER_HINTS not in out.attrs
    assert "no warp specialization built by tilelang" in caplog.text

"""set_register_budgets: each side of a warp-specialized kernel starts with its setmaxnreg, the
counts within the register file."""

import pytest
from ir_testing import assert_ir_equal
from tvm import tirx

from tilelang import intrinsics
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


@pytest.mark.parametrize("threads,expect", [(128, (40, 240)), (256, (40, 232)), (384, (24, 160))])
def test_each_side_asks_for_its_registers(threads, expect):
    assert register_budgets(threads) == expect
    assert_ir_equal(set_register_budgets(_kernel(threads, False)), _kernel(threads, True))


def test_a_kernel_without_warp_specialization_is_left_as_it_is():
    func = tirx.PrimFunc([], tirx.Evaluate(tirx.call_extern("void", "work")))
    assert set_register_budgets(func).same_as(func)

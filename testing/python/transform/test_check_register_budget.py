"""check_register_budget: the warpgroups' T.set_max_nreg counts against the registers the block is
launched with, one budget per kernel; the IR is left as it is. (Compiled kernels, with the error's
location: testing/python/language/test_barriers.py.)"""

import pytest

import tilelang.language as T
from tilelang.errors import UserError
from tilelang.testing import assert_points_at
from tilelang.transform.check_register_budget import check_register_budget, launch_count


def _warpgroups(counts, threads=384):
    """One T.set_max_nreg per warpgroup: (registers, is_inc) each; a second kernel with none."""

    @T.prim_func
    def main(A: T.Tensor((64,), "float32")):
        with T.Kernel(1, threads=threads):
            tx = T.get_thread_binding()
            if tx < 128:
                T.set_max_nreg(*counts[0])
            elif tx < 256:
                T.set_max_nreg(*counts[1])
            else:
                T.set_max_nreg(*counts[2])
        with T.Kernel(1, threads=128):
            A[T.get_thread_binding() % 64] = 0.0

    return main


def test_counts_that_fit_leave_the_ir_unchanged():
    func = _warpgroups([(240, 1), (240, 1), (24, 0)])
    assert check_register_budget(func).same_as(func)


def test_counts_past_the_launch_count_are_an_error():
    assert launch_count(384) == 168
    with pytest.raises(UserError, match=r"240 \+ 240 \+ 32 = 512 registers per thread, more than the 504") as err:
        check_register_budget(_warpgroups([(240, 1), (240, 1), (32, 0)]))
    assert_points_at(err, "T.set_max_nreg(*counts[0])")


def test_a_lowering_above_what_the_block_has_is_an_error():
    with pytest.raises(UserError, match=r"T.set_max_nreg\(176, 0\) lowers a warpgroup's registers") as err:
        check_register_budget(_warpgroups([(240, 1), (240, 1), (176, 0)]))
    assert_points_at(err, "T.set_max_nreg(*counts[2])")

"""tilelang.testing.assert_points_at: a UserError shows the user's line, in tilelang's form of a
location and in the kernel parser's; otherwise the failure prints the error's message."""

import pytest

import tilelang.language as T
from tilelang.errors import UserError, at_span, describe_function
from tilelang.testing import assert_points_at


def _kernel_with_a_wrong_copy():
    @T.prim_func
    def main(A: T.Tensor((64,), "float32")):
        with T.Kernel(1, threads=64):
            s = T.alloc_shared((32,), "float32")
            T.copy(A, s, no_such_option=1)


def _user_function(x):
    return x


def test_the_parsers_location_of_a_kernel_line():
    with pytest.raises(UserError) as err:
        _kernel_with_a_wrong_copy()
    assert_points_at(err, "T.copy(A, s, no_such_option=1)")  # the ExceptionInfo
    assert_points_at(err.value, "T.copy(A, s")  # the error itself; a part of the line
    with pytest.raises(AssertionError, match=r"(?s)shows no line containing 'T.alloc_shared'.*no_such_option"):
        assert_points_at(err, "T.alloc_shared")


def test_tilelang_s_location_of_a_function():
    error = UserError("_user_function: a wrong signature\n" + describe_function(_user_function))
    assert_points_at(error, "def _user_function(x):")
    with pytest.raises(AssertionError, match=r"(?s)locations shown:\n  \S+test_assert_points_at.py:\d+: "):
        assert_points_at(error, "return x")


def test_a_message_without_a_location_fails_printing_it():
    error = at_span("T.gemm: K of A is 64 but K of B is 32")  # no span: no location
    with pytest.raises(AssertionError, match=r"(?s)locations shown: none.*K of A is 64 but K of B is 32"):
        assert_points_at(error, "T.gemm(")


def test_a_location_in_tilelang_s_own_source_is_not_the_user_s_line():
    error = UserError("T.copy: wrong\n" + describe_function(describe_function))
    with pytest.raises(AssertionError, match=r"(?s)points at tilelang's own source \S+errors.py:\d+, not the user's"):
        assert_points_at(error, "def describe_function(")


def test_lines_after_a_location_that_are_not_source_are_not_read_as_its_line():
    error = UserError("wrong\n  --> kernel.py:3\n   | T.fill(C, 0)\nhint: write T.copy(A, s) instead")
    assert_points_at(error, "T.fill(C, 0)")
    with pytest.raises(AssertionError, match="shows no line containing 'T.copy"):
        assert_points_at(error, "T.copy(A, s)")

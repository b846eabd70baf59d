"""tilelang.math (and tilelang.cdiv / tilelang.next_power_of_2): the public TileLang's values,
including its odd next_power_of_2(0) == 2."""

import pytest

import tilelang
import tilelang.language as T
from tilelang.errors import UserError
from tilelang.math import cdiv, next_power_of_2


def test_next_power_of_2():
    assert [next_power_of_2(x) for x in (1, 2, 3, 5, 64, 65, 100)] == [1, 2, 4, 8, 64, 128, 128]
    assert next_power_of_2(0) == 2  # as the public TileLang computes it
    # raised at the call: the traceback shows the user's line
    with pytest.raises(UserError, match="takes an integer, got 2.5"):
        next_power_of_2(2.5)


def test_cdiv():
    assert [cdiv(a, 128) for a in (1, 128, 129, 1000)] == [1, 1, 2, 8]
    n = T.dynamic("n")
    assert "128" in str(cdiv(n, 128))  # a kernel expression stays an expression


def test_package_level_names():
    assert tilelang.cdiv is cdiv and tilelang.next_power_of_2 is next_power_of_2
    assert tilelang.math.next_power_of_2(33) == 64

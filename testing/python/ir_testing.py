"""Helpers for IR before/after tests."""

import tvm


def assert_ir_equal(actual, expected):
    """Structural equality of two PrimFuncs, ignoring their names."""
    tvm.ir.assert_structural_equal(
        actual.without_attr("global_symbol"), expected.without_attr("global_symbol"), map_free_vars=True
    )

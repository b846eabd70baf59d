"""T.prim_func: what the parser reports for a kernel it cannot parse."""

import pytest

import tilelang.language as T
from tilelang.errors import UserError
from tilelang.testing import assert_points_at


def test_parse_errors_keep_their_message_and_line():
    with pytest.raises(UserError, match=r"(?s)If condition must be a boolean.*if 0:") as err:

        @T.prim_func
        def main(A: T.Tensor((128,), "float32")):
            with T.Kernel(1, threads=128):
                if 0:
                    A[0] = 1.0

    assert_points_at(err, "if 0:")

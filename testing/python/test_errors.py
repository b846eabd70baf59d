"""tilelang.errors: where a diagnostic points. A warning raised while a kernel is traced names the kernel
line being traced (tracing_location), as the parser does for errors."""

import logging

import tilelang.language as T
from tilelang.errors import tracing_location
from tilelang.testing import locations_shown


def _pipelined(stages, iterations=2):
    @T.prim_func
    def main(A: T.Tensor((128, 128), "float16"), B: T.Tensor((128, 128), "float16")):
        with T.Kernel(1, threads=128):
            S = T.alloc_shared((64, 128), "float16")
            for i in T.Pipelined(iterations, num_stages=stages):  # the line the warning names
                T.copy(A[i * 64, 0], S)
                T.copy(S, B[i * 64, 0])

    return main


def test_a_warning_while_tracing_names_the_users_line(caplog):
    caplog.set_level(logging.WARNING, logger="tilelang")
    _pipelined(3)
    (record,) = [r for r in caplog.records if "num_stages=3 but the loop runs 2 iterations" in r.getMessage()]
    where = (__file__, _pipelined.__code__.co_firstlineno + 5)
    assert locations_shown(record.getMessage()) == [
        (*where, "for i in T.Pipelined(iterations, num_stages=stages):  # the line the warning names")
    ]
    assert f" --> {__file__}:{where[1]}:22\n" in record.getMessage()  # the loop's column


def test_outside_tracing_there_is_no_location():
    assert tracing_location() == ""

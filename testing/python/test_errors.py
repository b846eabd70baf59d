"""tilelang.errors: where a diagnostic points. A warning raised while a kernel is traced names the kernel
line being traced (tracing_location), as the parser does for errors."""

import logging

import tilelang.language as T
from tilelang.errors import tracing_location


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
    lines = record.getMessage().splitlines()
    assert lines[1].startswith(f"  --> {__file__}:") and lines[1].endswith(str(_pipelined.__code__.co_firstlineno + 5))
    assert lines[2] == "   | for i in T.Pipelined(iterations, num_stages=stages):  # the line the warning names"


def test_outside_tracing_there_is_no_location():
    assert tracing_location() == ""

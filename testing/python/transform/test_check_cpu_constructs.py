"""check_cpu_constructs: what cannot run on a block without threads is an error at the user's line;
whole-warp branches over tile ops and block barriers between steps are accepted (CPU only)."""

import pytest

import tilelang
import tilelang.language as T
from tilelang.errors import UserError
from tilelang.testing import assert_points_at
from tilelang.transform.check_cpu_constructs import check_cpu_constructs


def _kernel(body_kind):
    @T.prim_func
    def main(A: T.Tensor((256,), "float32"), B: T.Tensor((256,), "float32")):
        with T.Kernel(2, threads=256) as bx:
            S = T.alloc_shared((128,), "float32")
            tx = T.get_thread_binding()
            T.copy(A[bx * 128], S)
            if body_kind == "index":
                B[bx * 128 + tx % 128] = S[tx % 128]  # the thread index in an expression
            elif body_kind == "barrier_in_branch":
                if tx < 128:
                    T.sync_threads()
            elif body_kind == "shuffle":
                B[bx] = T.call_extern("float32", "__shfl_xor_sync", -1, S[0], 1)
            else:  # "branches": whole-warp branches over tile ops, a block barrier between steps
                if tx < 128:
                    for i in T.Parallel(128):
                        S[i] = S[i] * 2.0
                T.sync_threads()
                if tx >= 128:
                    T.copy(S, B[bx * 128])

    return main


@pytest.mark.parametrize(
    "kind, words, line",
    [
        ("index", "reads the thread index", "B[bx * 128 + tx % 128] = S[tx % 128]"),
        ("barrier_in_branch", "T.sync_threads() inside a branch", "if tx < 128:"),  # shown: the branch
        ("shuffle", "'__shfl_xor_sync' is GPU code: not available on target 'cpu'", "__shfl_xor_sync"),
    ],
)
def test_thread_constructs_are_errors_at_the_users_line(kind, words, line):
    with pytest.raises(UserError) as err:
        check_cpu_constructs(_kernel(kind))
    message = str(err.value)
    assert words in message and "cpu" in message
    assert_points_at(err, line)  # the user's line, shown


def test_whole_warp_branches_and_block_barriers_are_accepted():
    func = _kernel("branches")
    assert check_cpu_constructs(func).same_as(func)


def test_mbarriers_are_errors_naming_the_call():
    @T.prim_func
    def main(A: T.Tensor((64, 64), "float16"), B: T.Tensor((64, 64), "float16")):
        with T.Kernel(1, threads=128):
            S = T.alloc_shared((64, 64), "float16")
            T.copy(A, S)
            T.copy(S, B)

    tilelang.compile(main, target="cpu")  # plain copies compile

    @T.prim_func
    def bad(A: T.Tensor((64, 64), "float16"), B: T.Tensor((64, 64), "float16")):
        with T.Kernel(1, threads=128):
            bar = T.alloc_barrier([128])
            T.barrier_wait(bar[0], 0)
            T.copy(A, B)

    with pytest.raises(UserError, match="'tl::mbarrier_init' is GPU code: not available on target 'cpu'") as err:
        tilelang.compile(bad, target="cpu")
    assert_points_at(err, "bar = T.alloc_barrier([128])")

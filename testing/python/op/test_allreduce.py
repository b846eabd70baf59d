"""T.tvm_thread_allreduce inside T.attr(T.comm_reducer(...), "reduce_scope", ...) (op/allreduce.py)
on the CPU: which threads a reduction index stands for, the shuffle and workspace stages per shape
of the thread group, combiners of several values, and the errors at the user's line."""

import re

import pytest
from tvm import tirx

import tilelang
import tilelang.language as T
from tilelang.codegen import cuda
from tilelang.errors import UserError
from tilelang.op import base
from tilelang.utils.ir import collect


def _raises_at(message: str, line: str):
    return pytest.raises(
        UserError, match=rf"(?s){message}.*--> [^\n]*test_allreduce\.py:\d+.*\|[^\n]*{re.escape(line)}"
    )


def split_k_sum(nx, ny, dtype="float32"):
    """Row sums of A (ny x nx) over threadIdx.y, as the split-K GEMV examples write them."""

    @T.prim_func
    def main(A: T.Tensor((ny, nx), dtype), B: T.Tensor((nx,), dtype)):
        with T.Kernel(1, threads=(nx, ny)):
            tn = T.get_thread_binding(0)
            tk = T.get_thread_binding(1)
            acc = T.alloc_local((1,), dtype)
            total = T.alloc_local((1,), dtype)
            acc[0] = A[tk, tn]
            with T.attr(
                T.comm_reducer(lambda x, y: x + y, [T.cast(0, dtype)]),
                "reduce_scope",
                T.reinterpret(T.uint64(0), dtype="handle"),
            ):
                T.evaluate(T.tvm_thread_allreduce(T.uint32(1), acc[0], True, total[0], tk, dtype="handle"))
            B[tn] = total[0]

    return main


def arg_max(nx, ny):
    """The maximum of each column of A and its row, a combiner of two values."""

    @T.prim_func
    def main(A: T.Tensor((ny, nx), "float32"), V: T.Tensor((nx,), "float32"), I: T.Tensor((nx,), "int32")):
        with T.Kernel(1, threads=(nx, ny)):
            tn = T.get_thread_binding(0)
            tk = T.get_thread_binding(1)
            val = T.alloc_local((1,), "float32")
            idx = T.alloc_local((1,), "int32")
            best = T.alloc_local((1,), "float32")
            where = T.alloc_local((1,), "int32")
            val[0] = A[tk, tn]
            idx[0] = tk
            with T.attr(
                T.comm_reducer(
                    lambda v0, i0, v1, i1: (T.Select(v0 >= v1, v0, v1), T.Select(v0 >= v1, i0, i1)),
                    [T.min_value("float32"), T.int32(-1)],
                ),
                "reduce_scope",
                T.reinterpret(T.uint64(0), dtype="handle"),
            ):
                T.evaluate(T.tvm_thread_allreduce(T.uint32(2), val[0], idx[0], True, best[0], where[0], tk))
            V[tn] = best[0]
            I[tn] = where[0]

    return main


def _source(func, target="sm_80"):
    kernel = tilelang.compile(func, target=target)
    return kernel.get_kernel_source(), kernel


def test_the_call_parses_with_its_combiner():
    (op,) = [op for op in map(base.parse, collect(split_k_sum(4, 8).body, tirx.Evaluate)) if op]
    assert type(op).__name__ == "ThreadAllReduce" and len(op.values) == 1 and len(op.threads) == 1
    x, y = tirx.Var("x", "float32"), tirx.Var("y", "float32")
    assert str(op.combine([x], [y])[0]) == "x + y"


@pytest.mark.parametrize(
    "nx, ny, offsets, workspace",
    [
        (4, 8, [4, 8, 16], None),  # the group lies inside a warp: shuffles only
        (2, 32, [2, 4, 8, 16], "per thread"),  # 16 lanes of a warp, then across 2 warps
        (1, 128, [1, 2, 4, 8, 16], "per warp"),  # whole warps agree: lane 0 of each publishes
        (3, 5, [], "per thread"),  # partial warps: no shuffles at all
    ],
)
def test_stages_follow_the_thread_group(nx, ny, offsets, workspace):
    src, kernel = _source(split_k_sum(nx, ny))
    assert [int(m) for m in re.findall(r"tl::shfl_xor\(acc_ptr\[0\], (\d+)\)", src)] == offsets
    assert ("__syncthreads" in src) == (workspace is not None)
    assert ("% 32) == 0)" in src) == (workspace == "per warp")
    cuda.compile_object(src, kernel.target)


def test_several_values_shuffle_outside_the_combiner():
    src, kernel = _source(arg_max(4, 32))
    # Every lane shuffles: the shuffles are statements of their own, never inside the `?:` of a Select.
    assert not re.search(r"\?[^;]*shfl_xor", src)
    assert src.count("tl::shfl_xor(val_ptr[0]") == 3 and src.count("tl::shfl_xor(idx_ptr[0]") == 3
    cuda.compile_object(src, kernel.target)


def test_thread_binding_indices_and_an_attr_without_with():
    """The dequantize examples: `T.thread_binding` indices, and `T.attr(...)` as a statement that
    covers the rest of its block, inside a loop."""

    @T.prim_func
    def main(A: T.Tensor((4, 32, 8), "float16"), C: T.Tensor((4, 8), "float16")):
        with T.Kernel(1, threads=(32, 4)):
            kr = T.thread_binding(0, 32, thread="threadIdx.x")
            ni = T.thread_binding(0, 4, thread="threadIdx.y")
            acc = T.alloc_local((8,), "float16")
            res = T.alloc_local((1,), "float16")
            for n in T.serial(8):
                acc[n] = A[ni, kr, n]
            for n in T.serial(8):
                T.attr(
                    T.comm_reducer(lambda x, y: x + y, [T.float16(0)]),
                    "reduce_scope",
                    T.reinterpret(T.uint64(0), dtype="handle"),
                )
                T.evaluate(T.tvm_thread_allreduce(T.uint32(1), acc[n], True, res[0], kr, dtype="handle"))
                if kr == 0:
                    C[ni, n] = res[0]

    for target in ("sm_80", "sm_90a"):
        src, kernel = _source(main, target)
        assert "tl::shfl_xor(" in src and "__syncthreads" not in src  # 32 lanes of threadIdx.x: one warp
        cuda.compile_object(src, kernel.target)


def test_errors_at_the_users_line():
    with _raises_at(
        r"must be inside `with T.attr\(T.comm_reducer", "T.tvm_thread_allreduce(T.uint32(1), a[0], True, r[0], tk)"
    ):

        @T.prim_func
        def no_scope(B: T.Tensor((4,), "float32")):
            with T.Kernel(1, threads=(4, 8)):
                tk = T.get_thread_binding(1)
                a = T.alloc_local((1,), "float32")
                r = T.alloc_local((1,), "float32")
                T.evaluate(T.tvm_thread_allreduce(T.uint32(1), a[0], True, r[0], tk))

    with _raises_at(r"2 values, but the comm_reducer combines 1", "T.tvm_thread_allreduce(T.uint32(2)"):

        @T.prim_func
        def wrong_count(B: T.Tensor((4,), "float32")):
            with T.Kernel(1, threads=(4, 8)):
                tk = T.get_thread_binding(1)
                a = T.alloc_local((2,), "float32")
                with T.attr(T.comm_reducer(lambda x, y: x + y, [T.float32(0)]), "reduce_scope", 0):
                    T.evaluate(T.tvm_thread_allreduce(T.uint32(2), a[0], a[1], True, a[0], a[1], tk))

    with _raises_at(
        r"each result must be an element of a T.alloc_local buffer",
        "T.tvm_thread_allreduce(T.uint32(1), a[0], True, B[0], tk)",
    ):

        @T.prim_func
        def global_result(B: T.Tensor((4,), "float32")):
            with T.Kernel(1, threads=(4, 8)):
                tk = T.get_thread_binding(1)
                a = T.alloc_local((1,), "float32")
                with T.attr(T.comm_reducer(lambda x, y: x + y, [T.float32(0)]), "reduce_scope", 0):
                    T.evaluate(T.tvm_thread_allreduce(T.uint32(1), a[0], True, B[0], tk))

    @T.prim_func
    def loop_index(B: T.Tensor((4,), "float32")):
        with T.Kernel(1, threads=(4, 8)):
            a = T.alloc_local((1,), "float32")
            r = T.alloc_local((1,), "float32")
            for k in T.serial(2):
                with T.attr(T.comm_reducer(lambda x, y: x + y, [T.float32(0)]), "reduce_scope", 0):
                    T.evaluate(T.tvm_thread_allreduce(T.uint32(1), a[0], True, r[0], k))

    with _raises_at(
        r"'k' is not a thread index of this kernel", "T.tvm_thread_allreduce(T.uint32(1), a[0], True, r[0], k)"
    ):
        tilelang.compile(loop_index, target="sm_80")

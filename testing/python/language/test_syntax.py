"""Python syntax given TileLang's meaning in a kernel (`tilelang/language/syntax.py`): tuple assignment
to buffer elements and scalar variables (every right-hand side first, then the stores), and
comparisons of bfloat16 / fp8 values with Python numbers."""

import inspect
import re

import pytest
import torch
import tvm_ffi
from tvm import ir, tirx

import tilelang
import tilelang.language as T
from tilelang.codegen import cuda
from tilelang.errors import UserError
from tilelang.testing import assert_points_at


def _stores(func):
    out = []
    tvm_ffi.structural_walk(func.body, [(tirx.BufferStore, out.append)])
    return out


def _binds(func):
    out = []
    tvm_ffi.structural_walk(func.body, [(tirx.Bind, out.append)])
    return out


def swap_pairs(n=128):
    """Each thread swaps a pair of values in its registers (the pair ordered by an `if`)."""

    @T.prim_func
    def main(A: T.Tensor((n, 2), "int32"), B: T.Tensor((n, 2), "int32")):
        with T.Kernel(1, threads=n):
            tx = T.get_thread_binding()
            pair = T.alloc_local((2,), "int32")
            pair[0] = A[tx, 0]
            pair[1] = A[tx, 1]
            if pair[0] > pair[1]:
                pair[0], pair[1] = pair[1], pair[0]
            B[tx, 0] = pair[0]
            B[tx, 1] = pair[1]

    return main


def test_swap_of_two_elements_reads_both_before_storing():
    func = swap_pairs()
    # Both elements are bound to variables, then stored: pair[0] = (old pair[1]), pair[1] = (old pair[0]).
    first, second = [b for b in _binds(func) if b.var.name == "rhs"]
    assert [str(b.value) for b in (first, second)] == ["pair[1]", "pair[0]"]
    swaps = [st for st in _stores(func) if st.buffer.name == "pair" and isinstance(st.value, ir.Var)]
    assert [(str(st.indices[0]), st.value.same_as(b.var)) for st, b in zip(swaps, (first, second))] == [
        ("0", True),
        ("1", True),
    ]
    src = tilelang.compile(func, target="sm_80").get_kernel_source()
    assert re.search(
        r"int rhs = pair_ptr\[1\];\s+int rhs_1 = pair_ptr\[0\];\s+pair_ptr\[0\] = rhs;\s+pair_ptr\[1\] = rhs_1;", src
    )


def test_tuple_of_constants_and_new_names():
    @T.prim_func
    def main(A: T.Tensor((4,), "int32")):
        with T.Kernel(1, threads=32):
            a = T.alloc_local((2,), "int32")
            a[0], a[1] = 3, 4
            a[0], t = a[1], a[0]  # t is a new variable: the old a[0]
            A[0], A[1], A[2] = a[0], a[1], t
            (A[3], a[1]), b = (a[1] + t, 0), 7
            A[3] = A[3] + b

    stores = [(st.buffer.name, str(st.indices[0]), str(st.value)) for st in _stores(main)]
    assert stores[:2] == [("a", "0", "3"), ("a", "1", "4")]
    kernel = tilelang.compile(main, target="sm_80")
    src = kernel.get_kernel_source()
    assert "a_ptr[0] = 3;" in src and "a_ptr[1] = 4;" in src
    cuda.compile_object(src, kernel.target)


def ordered_scalars(n=128):
    """`lo, hi = hi, lo` on two T.alloc_var scalars inside an `if`: the swap must be seen after it."""

    @T.prim_func
    def main(A: T.Tensor((n,), "int32"), B: T.Tensor((n,), "int32"), C: T.Tensor((n, 2), "int32")):
        with T.Kernel(1, threads=n):
            tx = T.get_thread_binding()
            lo = T.alloc_var("int32", init=A[tx])
            hi = T.alloc_var("int32", init=B[tx])
            if lo > hi:
                lo, hi = hi, lo
            C[tx, 0] = lo
            C[tx, 1] = hi

    return main


def test_swap_of_scalar_variables_stores_into_them():
    func = ordered_scalars()
    # The variables themselves are stored (TVM's parser would bind two new ones inside the `if`).
    allocated = []
    tvm_ffi.structural_walk(func.body, [(tirx.AllocBuffer, lambda a: allocated.append(a.buffer.name))])
    assert sorted(allocated) == ["hi", "lo"]
    stored = [st.buffer.name for st in _stores(func)]
    assert stored.count("lo") == 2 and stored.count("hi") == 2  # initial values, then the swap
    kernel = tilelang.compile(func, target="sm_90a", out_idx=[2])
    cuda.compile_object(kernel.get_kernel_source(), kernel.target)


def test_unpacking_mismatch_is_an_error_at_the_line():
    with pytest.raises(UserError, match=r"(?s)2 targets for 3 values.*a\[0\], a\[1\] = 1, 2, 3") as err:

        @T.prim_func
        def main(A: T.Tensor((4,), "int32")):
            with T.Kernel(1, threads=32):
                a = T.alloc_local((2,), "int32")
                a[0], a[1] = 1, 2, 3
                A[0] = a[0]

    assert_points_at(err, "a[0], a[1] = 1, 2, 3")

    lines, start = inspect.getsourcelines(test_unpacking_mismatch_is_an_error_at_the_line)
    line = start + next(k for k, text in enumerate(lines) if "= 1, 2, 3" in text and "match" not in text)
    assert f"test_syntax.py:{line}:" in str(err.value)


@pytest.mark.parametrize("dtype", ["bfloat16", "float8_e4m3", "float8_e5m2"])
def test_comparison_with_python_numbers(dtype):
    @T.prim_func
    def main(A: T.Tensor((128,), dtype), B: T.Tensor((128,), "int32")):
        with T.Kernel(1, threads=128):
            tx = T.get_thread_binding()
            x = T.alloc_local((1,), dtype)
            x[0] = A[tx]
            nonzero = T.if_then_else(x[0] != 0, 1, 0)
            B[tx] = nonzero + T.if_then_else(0.5 < x[0], 2, 0) + T.if_then_else(x[0] >= -1, 4, 0)

    compares = []
    tvm_ffi.structural_walk(main.body, [((tirx.NE, tirx.LT, tirx.GE), compares.append)])
    element = str(main.params[0].dtype)
    # The number is a constant of the element's type, on either side.
    constants = [c.b if isinstance(c.b, tirx.FloatImm) else c.a for c in compares]
    assert [(str(c.ty.dtype), c.value) for c in constants] == [(element, 0.0), (element, 0.5), (element, -1.0)]
    kernel = tilelang.compile(main, target="sm_90a")
    cuda.compile_object(kernel.get_kernel_source(), kernel.target)


@pytest.mark.gpu
def test_swap_pairs_on_gpu():
    kernel = tilelang.compile(swap_pairs(), out_idx=[1])
    a = torch.randint(-100, 100, (128, 2), device="cuda", dtype=torch.int32)
    torch.testing.assert_close(kernel(a), a.sort(dim=1).values)


@pytest.mark.gpu
def test_ordered_scalars_on_gpu():
    kernel = tilelang.compile(ordered_scalars(), out_idx=[2])
    a = torch.randint(-100, 100, (128,), device="cuda", dtype=torch.int32)
    b = torch.randint(-100, 100, (128,), device="cuda", dtype=torch.int32)
    torch.testing.assert_close(kernel(a, b), torch.stack([torch.minimum(a, b), torch.maximum(a, b)], dim=1))

"""The eager form: `@tilelang.jit` on a kernel body with `T.const` sizes and `T.empty` outputs, and
`@tilelang.jit` on a `@T.prim_func` (CPU: IR, generated code, caches, errors)."""

import time

import pytest
import torch

import tilelang
import tilelang.language as T
from tilelang.errors import UserError
from tilelang.jit import JITImpl, JITKernel
from tilelang.testing import assert_points_at

TRACED = []


@tilelang.jit(target="sm_90a")
def matmul(A, B, block_M, block_N, block_K, dtype=T.float16, accum_dtype=T.float32):
    M, N, K = T.const("M, N, K")
    TRACED.append((block_M, block_N, block_K))

    A: T.Tensor((M, K), dtype)
    B: T.Tensor((K, N), dtype)
    C = T.empty((M, N), dtype)

    with T.Kernel(T.ceildiv(N, block_N), T.ceildiv(M, block_M), threads=128) as (bx, by):
        A_shared = T.alloc_shared((block_M, block_K), dtype)
        B_shared = T.alloc_shared((block_K, block_N), dtype)
        C_local = T.alloc_fragment((block_M, block_N), accum_dtype)
        T.clear(C_local)
        for k in T.Pipelined(T.ceildiv(K, block_K), num_stages=3):
            T.copy(A[by * block_M, k * block_K], A_shared)
            T.copy(B[k * block_K, bx * block_N], B_shared)
            T.gemm(A_shared, B_shared, C_local)
        T.copy(C_local, C[by * block_M, bx * block_N])

    return C


def _shapes(func):
    return {p.name: ([int(d) for d in p.shape], str(p.dtype)) for p in func.params}


def test_names_users_import():
    assert isinstance(matmul, JITImpl) and matmul.mode == "eager"
    assert tilelang.JITKernel is JITKernel
    assert matmul.__name__ == "matmul" and matmul.__doc__ is None


def test_get_tir_specializes_the_sizes():
    func = matmul.get_tir(M=256, N=512, K=128, block_M=128, block_N=128, block_K=32)
    assert _shapes(func) == {
        "A": ([256, 128], "float16"),
        "B": ([128, 512], "float16"),
        "C": ([256, 512], "float16"),
    }
    text = func.script()
    assert 'T.launch_thread("blockIdx.x", 4)' in text and 'T.serial(4, annotations={"num_stages": 3})' in text


def test_compile_gives_a_kernel_with_the_outputs_allocated():
    kernel = matmul.compile(M=256, N=512, K=128, block_M=128, block_N=128, block_K=32)
    assert isinstance(kernel, JITKernel)
    assert [p.name for p in kernel.params] == ["A", "B", "C"] and kernel.out_idx == [2]
    source = matmul.get_kernel_source(M=256, N=512, K=128, block_M=128, block_N=128, block_K=32)
    assert source == kernel.get_kernel_source() and "tl::wgmma_" in source and "__global__" in source


def test_one_kernel_per_specialization():
    TRACED.clear()
    args = dict(block_M=64, block_N=64, block_K=32)
    first = matmul.compile(M=128, N=128, K=64, **args)
    assert matmul.compile(M=128, N=128, K=64, **args) is first
    assert matmul.compile(M=256, N=128, K=64, **args) is not first
    assert matmul.compile(M=128, N=128, K=64, block_M=64, block_N=64, block_K=64) is not first
    # The sizes read from tensors give the kernel named sizes give (CPU tensors: compiling checks
    # dtype and shape, not the device).
    a, b = torch.randn(128, 64).half(), torch.randn(64, 128).half()
    assert matmul.compile(a, b, 64, 64, 32) is first
    # Placeholders describe tensors without memory (as for par_compile).
    assert matmul.compile(T.Tensor((128, 64), "float16"), T.Tensor((64, 128), "float16"), 64, 64, 32) is first


def test_repeated_call_path_is_cheap():
    a, b = torch.randn(128, 64).half(), torch.randn(64, 128).half()
    matmul.compile(a, b, 64, 64, 32)
    eager = matmul.eager
    start = time.perf_counter()
    for _ in range(200):
        eager.kernel((a, b, 64, 64, 32), {})
    per_call = (time.perf_counter() - start) / 200
    assert per_call < 50e-6, f"{per_call * 1e6:.1f} us to find the kernel of a call"


def test_wrong_tensors_get_the_kernels_errors():
    a, b = torch.randn(128, 64).half(), torch.randn(64, 128).half()
    with pytest.raises(
        ValueError, match=r"parameter 'A' \(argument #0\) expects .* dtype float16.*dtype float32 instead"
    ):
        matmul(a.float(), b, 64, 64, 32)
    with pytest.raises(ValueError, match=r"parameter 'B' \(argument #1\).*shape \[32, 128\] instead of \[64, 128\]"):
        matmul(a, b[:32], 64, 64, 32)
    with pytest.raises(ValueError, match=r"parameter 'A' .*shape \[M, K\].*1 dimensions instead of 2"):
        matmul(a[0], b, 64, 64, 32)
    with pytest.raises(ValueError, match=r"parameter 'A' .*got int 3"):
        matmul(3, b, 64, 64, 32)
    with pytest.raises(ValueError, match=r"device cpu instead of a CUDA device"):
        matmul(a, b, 64, 64, 32)


@tilelang.jit(target="sm_80")
def scale_rows(X, factor: T.float32 = 2.0, block: int = 64):
    """A signature-annotated tensor needs no declaration in the body; `factor: T.float32` is a
    compile-time value here (one kernel per value)."""
    M, N = T.const("M N")
    X: T.Tensor[(M, N), T.float32]
    Y = T.empty((M, N), T.float32)
    assert block % 32 == 0, "block must be a multiple of 32"
    rows = block // 32
    with T.Kernel(T.ceildiv(M, rows), threads=128) as bx:
        for i, j in T.Parallel(rows, N):
            Y[bx * rows + i, j] = X[bx * rows + i, j] * factor
    return Y


def test_subscript_annotation_scalar_parameters_and_python_prologue():
    func = scale_rows.get_tir(M=64, N=256, factor=3.0)
    assert _shapes(func) == {"X": ([64, 256], "float32"), "Y": ([64, 256], "float32")}
    assert "T.float32(3.0)" in func.script() and 'T.launch_thread("blockIdx.x", 32)' in func.script()
    assert scale_rows.compile(M=64, N=256) is not scale_rows.compile(M=64, N=256, factor=3.0)
    with pytest.raises(AssertionError, match="multiple of 32"):
        scale_rows.get_tir(M=64, N=256, block=48)


@tilelang.jit(target="sm_80")
def copy_signature(A: T.Tensor((1024,), "float32"), block=128):
    B = T.empty((1024,), "float32")
    with T.Kernel(1024 // block, threads=block) as bx:
        for i in T.Parallel(block):
            B[bx * block + i] = A[bx * block + i]
    return B


def test_tensor_annotated_in_the_signature():
    kernel = copy_signature.compile()
    assert [p.shape for p in kernel.params] == [(1024,), (1024,)] and kernel.out_idx == [1]
    assert copy_signature.compile(block=256) is not kernel


@T.macro
def _copy_rows(A, B, M, block):
    with T.Kernel(T.ceildiv(M, block), threads=128) as bx:
        for i, j in T.Parallel(block, 64):
            B[bx * block + i, j] = A[bx * block + i, j]


@tilelang.jit(target="sm_80")
def copy_dynamic(A, block=64):
    M = T.dynamic("m")
    A: T.Tensor((M, 64), "float16")
    B = T.empty((M, 64), "float16")
    _copy_rows(A, B, M, block)  # the kernel starts with a macro call
    return B


def test_dynamic_sizes_one_kernel_for_every_size():
    kernel = copy_dynamic.compile()
    assert kernel.params[0].shape == ("m", 64) and kernel.out_idx == [1]
    assert copy_dynamic.compile(torch.empty(100, 64).half()) is kernel
    assert copy_dynamic.compile(torch.empty(300, 64).half()) is kernel


def _line_of(fn, text):
    lines, start = __import__("inspect").getsourcelines(fn)
    return start + next(k for k, line in enumerate(lines) if text in line)


def test_errors_in_the_kernel_point_at_the_users_line():
    @tilelang.jit(target="sm_80")
    def broken(A):
        N = T.const("N")
        A: T.Tensor((N,), "float32")
        with T.Kernel(1, threads=128):
            for i in T.Parallel(N):
                A[i] = A[i] + no_such_name  # noqa: F821

    with pytest.raises(UserError, match="Undefined variable: no_such_name") as info:
        broken.get_tir(N=128)
    assert_points_at(info, "A[i] = A[i] + no_such_name")
    assert f"test_eager.py:{_line_of(broken.factory, 'no_such_name')}" in str(info.value)


def test_const_outside_an_eager_kernel():
    # raised at the call: the traceback shows the user's line
    with pytest.raises(UserError, match=r"T.const\('M'\) declares sizes read from the tensors of an eager kernel"):
        T.const("M")


@tilelang.jit(target="sm_80")
def empty_forms(A):
    M, N = T.const("M, N")
    A: T.Tensor((M, N), "float16")
    B = T.empty((M, N), A.dtype)
    C = T.empty((M, N), dtype="float32")
    D = T.empty(M, N, dtype=T.bfloat16)
    with T.Kernel(M, threads=128) as bx:
        for j in T.Parallel(N):
            B[bx, j] = A[bx, j]
            C[bx, j] = A[bx, j]
            D[bx, j] = A[bx, j]
    return B, C, D


def test_empty_forms_and_several_outputs():
    kernel = empty_forms.compile(M=4, N=128)
    assert [(p.name, p.dtype) for p in kernel.params] == [
        ("A", "float16"),
        ("B", "float16"),
        ("C", "float32"),
        ("D", "bfloat16"),
    ]
    assert kernel.out_idx == [1, 2, 3] and all(p.shape == (4, 128) for p in kernel.params)


def test_empty_outside_an_eager_kernel():
    # raised at the call: the traceback shows the user's line
    with pytest.raises(UserError, match="T.empty declares an output of an eager kernel"):
        T.empty((4,), "float32")


def test_const_must_be_a_whole_dimension():
    @tilelang.jit(target="sm_80")
    def wrong(A):
        M = T.const("M")
        A: T.Tensor((M * 2, 64), "float32")
        with T.Kernel(1, threads=128):
            A[0, 0] = 1.0

    with pytest.raises(
        UserError, match=r"the size 'M' \(T.const\) is not a whole dimension of any declared tensor"
    ) as err:
        wrong.compile(torch.empty(64, 64))
    assert_points_at(err, 'A: T.Tensor((M * 2, 64), "float32")')


def test_outputs_must_be_returned_and_only_outputs():
    @tilelang.jit(target="sm_80")
    def forgets(A):
        A: T.Tensor((64,), "float32")
        B = T.empty((64,), "float32")
        with T.Kernel(1, threads=64) as _:
            for i in T.Parallel(64):
                B[i] = A[i]

    with pytest.raises(UserError, match=r"the T.empty outputs \['B'\] are not returned") as err:
        forgets.get_tir()
    assert_points_at(err, 'B = T.empty((64,), "float32")')

    @tilelang.jit(target="sm_80")
    def returns_input(A):
        A: T.Tensor((64,), "float32")
        with T.Kernel(1, threads=64) as _:
            for i in T.Parallel(64):
                A[i] = A[i] * 2.0
        return A

    with pytest.raises(UserError, match="returns 'A', which is not a tensor made by T.empty") as err:
        returns_input.get_tir()
    assert_points_at(err, "return A")


def test_declarations_come_before_the_kernel():
    with pytest.raises(UserError, match=r"declared before the kernel \(`with T.Kernel`\)") as info:

        @tilelang.jit
        def late(A):
            A: T.Tensor((64,), "float32")
            with T.Kernel(1, threads=64) as _:
                B = T.empty((64,), "float32")
                for i in T.Parallel(64):
                    B[i] = A[i]
            return B

    assert_points_at(info, 'B = T.empty((64,), "float32")')

    assert 'B = T.empty((64,), "float32")' in str(info.value)


def test_out_idx_is_refused_on_a_kernel_body():
    # raised at the call: the traceback shows the user's line
    with pytest.raises(UserError, match=r"out_idx=.*its outputs are the tensors it makes with T.empty"):

        @tilelang.jit(out_idx=[-1])
        def body(A):
            A: T.Tensor((64,), "float32")
            B = T.empty((64,), "float32")
            with T.Kernel(1, threads=64) as _:
                for i in T.Parallel(64):
                    B[i] = A[i]
            return B


def test_argument_mistakes():
    a, b = torch.randn(128, 64).half(), torch.randn(64, 128).half()
    # raised at the call: the traceback shows the user's line
    with pytest.raises(UserError, match=r"the size 'M' \(T.const\) is dimension 0 of 'A'; pass tensor 'A' or M=<int>"):
        matmul.compile(block_M=64, block_N=64, block_K=32)
    with pytest.raises(TypeError, match=r"unexpected keyword arguments \['Q'\]"):
        matmul.compile(a, b, 64, 64, 32, Q=3)
    with pytest.raises(TypeError, match="missing required argument: 'block_K'"):
        matmul.compile(a, b, 64, 64)
    # raised at the call: the traceback shows the user's line
    with pytest.raises(UserError, match="parameter 'block_M' was given a tensor, but the kernel does not declare"):
        matmul.compile(a, b, a, 64, 32)
    # raised at the call: the traceback shows the user's line
    with pytest.raises(UserError, match=r"needs its tensors; \['A', 'B'\] were not given"):
        matmul(block_M=64, block_N=64, block_K=32, M=128, N=128, K=64)


def negate_body(A):
    N = T.const("N")
    A: T.Tensor((N,), T.float32)
    B = T.empty((N,), T.float32)
    with T.Kernel(T.ceildiv(N, 128), threads=128) as bx:
        for i in T.Parallel(128):
            B[bx * 128 + i] = -A[bx * 128 + i]
    return B


def test_disable_cache_compiles_afresh():
    first = tilelang.jit(target="sm_80")(negate_body).compile(N=1024)
    assert tilelang.jit(target="sm_80")(negate_body).compile(N=1024) is first  # the in-memory cache
    tilelang.disable_cache()
    try:
        again = tilelang.jit(target="sm_80")(negate_body).compile(N=1024)
        assert again is not first and again.get_kernel_source() == first.get_kernel_source()
    finally:
        tilelang.enable_cache()


# ---- @tilelang.jit on a @T.prim_func ------------------------------------------------------------------


@tilelang.jit(out_idx=-1, target="sm_80")
@T.prim_func
def doubled(A: T.Tensor((256,), "float32"), B: T.Tensor((256,), "float32")):
    with T.Kernel(2, threads=128) as bx:
        for i in T.Parallel(128):
            B[bx * 128 + i] = A[bx * 128 + i] * 2.0


def test_jit_on_a_prim_func():
    assert doubled.mode == "prim_func" and doubled.__name__ == "doubled"
    kernel = doubled.compile()
    assert doubled() is kernel and doubled.compile() is kernel
    assert kernel.out_idx == [1] and doubled.get_tir().same_as(doubled.prim_func)
    assert "doubled_kernel" in doubled.get_kernel_source()
    # raised at the call: the traceback shows the user's line
    with pytest.raises(UserError, match="takes no arguments"):
        doubled.compile(256)


def test_lazy_factory_keeps_its_form_and_gains_the_methods():
    @tilelang.jit(out_idx=[-1], target="sm_80")
    def add(N, block=128):
        @T.prim_func
        def main(A: T.Tensor((N,), "float32"), B: T.Tensor((N,), "float32")):
            with T.Kernel(T.ceildiv(N, block), threads=block) as bx:
                for i in T.Parallel(block):
                    B[bx * block + i] = A[bx * block + i] + 1.0

        return main

    assert add.mode == "lazy"
    kernel = add(512)
    assert add.compile(512) is kernel and add(512) is kernel
    assert add.get_tir(512).params[0].name == "A" and add.get_kernel_source(512) == kernel.get_kernel_source()


def test_factory_returning_something_else():
    @tilelang.jit(target="sm_80")
    def nothing(N):
        return N

    # raised at the call: the traceback shows the user's line
    with pytest.raises(UserError, match="returned int, not a @T.prim_func"):
        nothing(4)


def test_par_compile_builds_every_configuration():
    configs = [{"X": T.Tensor((64, 128), "float32"), "factor": f} for f in (1.5, 2.5)]
    kernels = scale_rows.par_compile(configs, num_workers=2)
    assert len(kernels) == 2 and all(k._lib_path is not None for k in kernels)
    assert kernels[0] is not kernels[1] and kernels[0] is scale_rows.compile(M=64, N=128, factor=1.5)

"""`T.alloc_global`: a workspace the host launcher allocates around the kernels of one function (the
IR, the launcher's source compiled by the host compiler, the user's mistakes)."""

import pytest
import tvm_ffi
from tvm import tirx

import tilelang
import tilelang.language as T
from tilelang.codegen import cuda
from tilelang.errors import UserError


def split_sum(M=256, N=512, splits=4, dtype="float32"):
    """Row sums in two kernels: partial sums of `splits` column blocks into a workspace, then their sum."""
    cols = N // splits

    @T.prim_func
    def main(A: T.Tensor((M, N), dtype), out: T.Tensor((M,), dtype)):
        partial = T.alloc_global((splits, M), "float32")
        with T.Kernel(M // 128, splits, threads=128) as (bx, by):
            for i in T.Parallel(128):
                acc = T.alloc_var("float32", init=0.0)
                for j in T.serial(cols):
                    acc += A[bx * 128 + i, by * cols + j]
                partial[by, bx * 128 + i] = acc
        with T.Kernel(M // 128, threads=128) as bx:
            for i in T.Parallel(128):
                total = T.alloc_var("float32", init=0.0)
                for s in T.serial(splits):
                    total += partial[s, bx * 128 + i]
                out[bx * 128 + i] = total

    return main


def _kernels(func, arch="sm_80"):
    return tilelang.compile(func, target=arch, out_idx=[-1])


def test_workspace_is_allocated_by_the_function_and_passed_to_both_kernels():
    func = split_sum()
    (alloc,) = [a for a in _collect(func.body, tirx.AllocBuffer) if a.buffer.scope() == "global"]
    assert alloc.buffer.name == "partial" and tuple(int(n) for n in alloc.buffer.shape) == (4, 256)
    kernel = _kernels(func)
    src, host = kernel.get_kernel_source(), kernel.get_host_source()
    bodies = cuda.kernel_bodies(src)
    assert len(bodies) == 2 and all("float* __restrict__ partial_ptr" in b for b in bodies.values())
    assert "tl_workspace_alloc(2, dev_id, (uint64_t)4096ULL, 2, 32)" in host  # 4 x 256 floats on the device
    assert "tl_workspace_free(2, dev_id, partial)" in host
    assert "TVMBackend" not in host and "TVM_DLL float* tl_workspace_alloc" not in host


@pytest.mark.parametrize("arch", ["sm_80", "sm_90a"])
def test_launcher_with_a_workspace_compiles(arch):
    kernel = _kernels(split_sum(), arch)
    cuda.compile_object(kernel.get_kernel_source(), kernel.target, host_src=kernel.get_host_source())


def test_workspace_of_a_dynamic_size():
    m = T.dynamic("m")

    @T.prim_func
    def main(A: T.Tensor((m,), "float16"), B: T.Tensor((m,), "float16")):
        W = T.alloc_global((m,), "float32")
        with T.Kernel(T.ceildiv(m, 128), threads=128) as bx:
            for i in T.Parallel(128):
                W[bx * 128 + i] = A[bx * 128 + i] * 2.0
        with T.Kernel(T.ceildiv(m, 128), threads=128) as bx:
            for i in T.Parallel(128):
                B[bx * 128 + i] = W[bx * 128 + i] + 1.0

    kernel = tilelang.compile(main, target="sm_80")
    host = kernel.get_host_source()
    assert "tl_workspace_alloc(2, dev_id, ((uint64_t)4ULL * ((uint64_t)m)), 2, 32)" in host
    cuda.compile_object(kernel.get_kernel_source(), kernel.target, host_src=host)


def test_launcher_without_workspace_is_unchanged():
    @T.prim_func
    def main(A: T.Tensor((128,), "float32")):
        with T.Kernel(1, threads=128):
            for i in T.Parallel(128):
                A[i] = A[i] + 1.0

    assert "tl_workspace" not in tilelang.compile(main, target="sm_80").get_host_source()


def test_alloc_global_inside_a_kernel_points_at_the_line():
    with pytest.raises(Exception) as info:

        @T.prim_func
        def main(A: T.Tensor((128,), "float32")):
            with T.Kernel(1, threads=128):
                W = T.alloc_global((128,), "float32")  # noqa: F841

    text = str(info.value)
    assert "T.alloc_global((128,)) inside `with T.Kernel(...)`" in text and "before the first `with T.Kernel`" in text
    assert 'W = T.alloc_global((128,), "float32")' in text


def test_alloc_buffer_in_global_scope_is_a_workspace():
    @T.prim_func
    def main(A: T.Tensor((128,), "float32")):
        W = T.alloc_buffer((128,), "float32", scope="global")
        with T.Kernel(1, threads=128):
            for i in T.Parallel(128):
                W[i] = A[i]
                A[i] = W[127 - i]

    (alloc,) = _collect(main.body, tirx.AllocBuffer)
    assert alloc.buffer.scope() == "global"
    # raised at the call: the traceback shows the user's line
    with pytest.raises(UserError, match="scope must be 'global'"):
        T.alloc_global((4,), "float32", scope="shared")


def _collect(node, kind):
    out = []
    tvm_ffi.structural_walk(node, [(kind, out.append)], order="pre")
    return out


@pytest.mark.parametrize("arch", ["sm_80", "sm_90a"])
def test_workspace_accessed_in_vectors_is_declared_with_scalars_on_the_host(arch):
    # Every access of W is 8 halves at a time, so TVM's storage rewrite gives W the element type
    # float16x8: the kernels take it as a vector pointer, and the launcher declared `half8* W`,
    # a type the host unit does not have (it did not compile).
    @T.prim_func
    def main(A: T.Tensor((2048,), "float16"), B: T.Tensor((2048,), "float16")):
        W = T.alloc_global((2048,), "float16")
        with T.Kernel(2, threads=128) as bx:
            for i in T.Parallel(1024):
                W[bx * 1024 + i] = A[bx * 1024 + i] * T.float16(2)
        with T.Kernel(2, threads=128) as bx:
            for i in T.Parallel(1024):
                B[bx * 1024 + i] = W[bx * 1024 + i] + T.float16(1)

    kernel = tilelang.compile(main, target=arch)
    src, host = kernel.get_kernel_source(), kernel.get_host_source()
    assert all("uint4* __restrict__ W_ptr" in body for body in cuda.kernel_bodies(src).values())
    assert "half* W = ((half*)((half*)tl_workspace_alloc(2, dev_id, (uint64_t)4096ULL, 2, 16)));" in host
    assert "half8" not in host
    cuda.compile_object(src, kernel.target, host_src=host)

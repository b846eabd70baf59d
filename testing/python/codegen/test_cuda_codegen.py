"""Generated CUDA: the lines that matter, and nvcc compiling it for sm_80, sm_89 and sm_90a (no GPU needed)."""

import os
import sys

import pytest

import tilelang
import tilelang.language as T
from tilelang.codegen import cuda

EXAMPLES = os.path.join(os.path.dirname(__file__), "..", "..", "..", "examples")
sys.path.insert(0, os.path.join(EXAMPLES, "elementwise"))
sys.path.insert(0, os.path.join(EXAMPLES, "copy"))
sys.path.insert(0, os.path.join(EXAMPLES, "norm"))
sys.path.insert(0, os.path.join(EXAMPLES, "softmax"))

import example_elementwise_add  # noqa: E402
import example_rms_norm  # noqa: E402
import example_softmax  # noqa: E402
import example_transpose  # noqa: E402

ARCHS = ["sm_80", "sm_89", "sm_90a"]
KERNELS = {
    "vector_add": lambda: example_elementwise_add.vector_add.factory(1000003),
    "vector_add_divisible": lambda: example_elementwise_add.vector_add.factory(1 << 20),
    "fused": lambda: example_elementwise_add.fused_scale_add_relu.factory(1000, 1000),
    "transpose": lambda: example_transpose.transpose.factory(1000, 777),
    "rms_norm": lambda: example_rms_norm.rms_norm.factory(8192, 4096),
    "softmax": lambda: example_softmax.softmax.factory(1000, 1000, 4, 128),
}


@pytest.mark.parametrize("arch", ARCHS)
@pytest.mark.parametrize("name", sorted(KERNELS))
def test_examples_compile_with_nvcc(name, arch):
    kernel = tilelang.compile(KERNELS[name](), out_idx=[-1], target=arch)
    cuda.compile_object(kernel.get_kernel_source(), kernel.target)


def _body(src: str) -> str:
    """The last kernel's definition (after TVM's helper prelude)."""
    return src[src.rindex('extern "C" __global__') :]


def test_vectorized_accesses_are_128_bit():
    src = tilelang.compile(KERNELS["vector_add_divisible"](), out_idx=[-1], target="sm_90a").get_kernel_source()
    body = _body(src)
    assert body.count("*(float4*)") == 3 and "if (" not in body  # divisible: no guards, one float4 per operand


def test_partial_tiles_are_guarded():
    src = tilelang.compile(KERNELS["vector_add"](), out_idx=[-1], target="sm_90a").get_kernel_source()
    assert "< 1000003" in src


def test_shared_memory_gets_a_barrier_between_write_and_read():
    src = tilelang.compile(KERNELS["transpose"](), out_idx=[-1], target="sm_80").get_kernel_source()
    assert "extern __shared__" in src and "__syncthreads();" in src


def _big_shared(rows):
    @T.prim_func
    def main(A: T.Tensor((rows, 128), "float32"), B: T.Tensor((rows, 128), "float32")):
        with T.Kernel(1, threads=256):
            s = T.alloc_shared((rows, 128), "float32")
            t = T.alloc_shared((rows, 128), "float32")
            T.copy(A, s)
            for i, j in T.Parallel(rows, 128):
                t[i, j] = s[i, j] * 2.0
            T.copy(t, B)

    return main


def test_dynamic_shared_memory_is_merged_and_limit_raised_past_48kb():
    k = tilelang.compile(_big_shared(128), target="sm_90a")  # 2 x 64 KiB of shared tiles
    src, host = k.get_kernel_source(), k.get_host_source()
    assert src.count("extern __shared__") == 1
    assert "tl_kernel_main_kernel().set_attribute( cudaFuncAttributeMaxDynamicSharedMemorySize" in host
    cuda.compile_object(src, k.target, host_src=host)


def test_two_kernels_launch_in_order():
    @T.prim_func
    def main(A: T.Tensor((256,), "float32"), B: T.Tensor((256,), "float32")):
        with T.Kernel(2, threads=128) as bx:
            for i in T.Parallel(128):
                A[bx * 128 + i] = A[bx * 128 + i] + 1.0
        with T.Kernel(2, threads=128) as bx:
            for i in T.Parallel(128):
                B[bx * 128 + i] = A[bx * 128 + i] * 2.0

    src = tilelang.compile(main, target="sm_80").get_host_source()
    first, second = src.index("tl_kernel_main_kernel().launch("), src.index("tl_kernel_main_kernel_1().launch(")
    assert first < second


@pytest.mark.parametrize("dtype", ["float8_e4m3fn", "float8_e5m2", "bfloat16", "int8"])
def test_narrow_dtypes_copy_compiles(dtype):
    @T.prim_func
    def main(A: T.Tensor((256, 64), dtype), B: T.Tensor((256, 64), dtype)):
        with T.Kernel(2, threads=128) as bx:
            s = T.alloc_shared((128, 64), dtype)
            T.copy(A[bx * 128, 0], s)
            T.copy(s, B[bx * 128, 0])

    k = tilelang.compile(main, target="sm_90a")
    cuda.compile_object(k.get_kernel_source(), k.target)


def test_library_links_and_loads_without_a_gpu(tmp_path):
    """Both units compile and link; the cubin is embedded (hidden) and the entry point loads. The
    kernels themselves are loaded on the first call, so no GPU is needed up to here."""
    import subprocess

    import tvm_ffi

    k = tilelang.compile(_big_shared(128), target="sm_90a")
    lib = cuda.build_library(k.get_kernel_source(), k.get_host_source(), k.target, out_dir=str(tmp_path))
    assert cuda.build_library(k.get_kernel_source(), k.get_host_source(), k.target, out_dir=str(tmp_path)) == lib
    symbols = subprocess.run(["nm", lib], capture_output=True, text=True, check=True).stdout
    assert " r tl_cubin" in symbols or " R tl_cubin" in symbols
    # Only the entry points are exported: libraries loaded side by side must not share statics.
    exported = subprocess.run(["nm", "-D", "--defined-only", lib], capture_output=True, text=True).stdout
    names = {line.split()[-1] for line in exported.splitlines() if line.strip()}
    assert "__tvm_ffi_main" in names
    assert not [n for n in names if "tl_" in n], names
    assert tvm_ffi.load_module(lib)["main"] is not None


def test_kernel_signatures_bind_pointer_and_scalar_parameters():
    src = 'extern "C" __global__ void __launch_bounds__(128) k(half* __restrict__ A, int n, float s) {\n}'
    assert cuda.kernel_signatures(src) == {"k": ["void*", "int", "float"]}

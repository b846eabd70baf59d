"""widen_large_indices: accesses to a tensor of 2**31 elements or more flatten to int64 offsets (an
int32 offset wraps past 2**31, reading another address), smaller tensors keep int32 ones."""

import pytest

import tilelang
import tilelang.language as T
from tilelang.codegen import cuda


def gather_rows(E=160, N=4096, K=4096, dtype="int8"):
    """Row 7 of each of E [N, K] matrices (E * N * K = 2.7e9 elements by default)."""

    @T.prim_func
    def main(B: T.Tensor((E, N, K), dtype), out: T.Tensor((E, 64), dtype)):
        with T.Kernel(E, threads=64) as e:
            for i in T.Parallel(64):
                out[e, i] = B[e, 7, i]

    return main


def tile_loads(E=160, N=4096, K=4096):
    """Tiles of each matrix through shared memory (a copy that becomes cp.async or TMA)."""

    @T.prim_func
    def main(B: T.Tensor((E, N, K), "float16"), out: T.Tensor((E, 64, 64), "float16")):
        with T.Kernel(E, threads=128) as e:
            s = T.alloc_shared((64, 64), "float16")
            T.copy(B[e, 64, 128], s)
            T.copy(s, out[e, 0, 0])

    return main


def _device_source(func, arch="sm_80"):
    kernel = tilelang.compile(func, target=arch)
    src = kernel.get_kernel_source()
    return src[src.index("__global__ void __launch_bounds__") :], kernel


def test_a_tensor_past_int32_gets_int64_offsets():
    src, _ = _device_source(gather_rows())
    line = next(x for x in src.splitlines() if "B_ptr[" in x)
    assert "(int64_t)16777216" in line  # e * N * K in int64


def test_a_smaller_tensor_keeps_int32_offsets():
    src, _ = _device_source(gather_rows(E=8))
    assert "int64_t" not in src


@pytest.mark.parametrize("arch", ["sm_80", "sm_90a"])
def test_tile_loads_from_a_large_tensor_compile(arch):
    src, kernel = _device_source(tile_loads(), arch)
    if arch == "sm_80":
        assert "int64_t" in src
    cuda.compile_object(kernel.get_kernel_source(), kernel.target, host_src=kernel.host_source)

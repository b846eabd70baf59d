"""A fragment of packed bytes read two loop iterations per element, `B_local[i, j // 2]`, in a
T.Parallel over the unpacked tile: the public dequantize_gemm examples (fp4 Hopper GEMM, w4a8 GEMM)
unpack 4-bit values this way. Layout inference stops today: in those examples with "cannot derive a
layout for fragment 'B_local' of shape [.., 64] from a T.Parallel loop of shape [.., 128] indexing it
as [i, j // 2]", in this kernel (the fragment laid out by its T.copy first) with "used by two
operations that need different layouts". The public compiler builds both. Strict xfail until this
one lowers; the GPU twin is test_packed_fragment_reads_gpu.py."""

import pytest

import tilelang
import tilelang.language as T


def unpack_int4(n: int = 64, k: int = 128, threads: int = 128):
    """B (n, k // 2) uint8, two signed 4-bit values per byte (low nibble first) -> C (n, k) int8."""

    @T.prim_func
    def main(B: T.Tensor((n, k // 2), T.uint8), C: T.Tensor((n, k), T.int8)):
        with T.Kernel(1, threads=threads):
            B_shared = T.alloc_shared((n, k // 2), T.uint8)
            B_local = T.alloc_fragment((n, k // 2), T.uint8)
            C_local = T.alloc_fragment((n, k), T.int8)
            T.copy(B, B_shared)
            T.copy(B_shared, B_local)
            for i, j in T.Parallel(n, k):
                nibble = (B_local[i, j // 2] >> ((j % 2) * 4).astype(T.uint8)) & T.uint8(15)
                C_local[i, j] = T.reinterpret(T.int8, nibble << T.uint8(4)) >> T.int8(4)
            T.copy(C_local, C)

    return main


@pytest.mark.xfail(strict=True, reason="layout inference: a fragment read as [i, j // 2] by its unpacking loop")
@pytest.mark.parametrize("target", ["sm_80", "sm_90a"])
def test_packed_fragment_read_by_two_iterations_per_element_lowers(target):
    tilelang.compile(unpack_int4(), target=target).get_kernel_source()

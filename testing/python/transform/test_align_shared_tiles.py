"""On sm_90a every dynamic shared tile takes whole 1024-byte blocks, so packed tiles start aligned
(a TMA destination needs 128 bytes, the 128-byte swizzle 1024); other targets pack as before."""

import re

import tilelang
import tilelang.language as T
from tilelang.codegen import cuda


def _two_tiles():
    @T.prim_func
    def main(A: T.Tensor((64, 200), "float32"), Init: T.Tensor((64,), "float32"), B: T.Tensor((64,), "float32")):
        with T.Kernel(4, threads=128) as bx:
            x = T.alloc_shared((16, 200), "float32")  # 12800 bytes
            r = T.alloc_shared((16,), "float32")  # 64 bytes, placed after x (tiles go largest first)
            T.copy(A[bx * 16, 0], x)
            T.copy(Init[bx * 16], r)
            T.reduce_max(x, r, dim=1, clear=True)
            T.copy(r, B[bx * 16])

    return main


def test_tma_destinations_start_on_1024_bytes():
    k = tilelang.compile(_two_tiles(), out_idx=[-1], target="sm_90a")
    src = k.get_kernel_source()
    offsets = [int(o) for o in re.findall(r"tl::tma_load\([^;]*\(\(float\*\)buf_dyn_shmem_ptr\)\[(\d+)\]", src)]
    assert sorted(offsets) == [0, 3328]  # floats: x at byte 0 (grown to 13 KiB), r at byte 13312
    # Each one-off copy waits on its own barrier of one array (separate ones could share bytes).
    assert "uint64_t tma_bars_ptr[2];" in src
    assert "tl::mbarrier_wait((&(tma_bars_ptr[0])), 0);" in src and "tl::mbarrier_wait((&(tma_bars_ptr[1])), 0);" in src
    cuda.compile_object(src, k.target, host_src=k.host_source)


def test_other_targets_pack_tiles_as_they_are():
    src = tilelang.compile(_two_tiles(), out_idx=[-1], target="sm_80").get_kernel_source()
    assert "buf_dyn_shmem_ptr)[(((int)threadIdx.x) + 3200)]" in src  # r right after x's 12800 bytes


def test_a_tile_of_vectors_is_sized_by_its_lanes():
    """A tile the vectorizer rewrote to 16-byte elements (bfloat16x8) of 4 KiB stays 4 KiB: its
    size counts the lanes (it was taken for 2-byte elements, 512 bytes, and grown to 8 KiB)."""
    from tvm import tirx

    from tilelang.transform.align_shared_tiles import _padded

    four_k = tirx.decl_buffer((256,), "bfloat16x8", "x", scope="shared.dyn")
    assert _padded(four_k) is None
    small = tirx.decl_buffer((16,), "float32x4", "r", scope="shared.dyn")  # 256 bytes: grown to 1 KiB
    assert [int(n) for n in _padded(small).shape] == [64]

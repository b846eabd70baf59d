"""Copies that run once per kernel become TMA loads on sm_90a (lower_tma_copies): the flash-attention
Q tile, its barrier, and the proxy fences the wgmmas no longer need; copies in loops stay."""

import os
import re
import sys

import tilelang
import tilelang.language as T

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "..", "..", "examples", "flash_attention"))
import example_mha_fwd_bshd as fa  # noqa: E402


def _fa_source(configs=None, target="sm_90a"):
    f = fa.flashattn.factory(1, 4, 256, 128, False, 128, 64, 2, 256)
    return tilelang.compile(f, out_idx=[3], target=target, pass_configs=configs or {}).get_kernel_source()


def test_the_query_tile_is_one_tma_load_on_its_own_barrier():
    src = _fa_source()
    assert "tl::mbarrier_init((&(Q_shared_bar_ptr[0])), 1)" in src
    # 128 x 128 fp16 in two 128-byte-swizzled panels of 64 columns, 32 KiB in all.
    assert len(re.findall(r"tl::tma_load\(Q_tma", src)) == 2
    assert "tl::mbarrier_arrive_expect_tx((&(Q_shared_bar_ptr[0])), (uint)32768)" in src
    assert "tl::mbarrier_wait((&(Q_shared_bar_ptr[0])), 0)" in src
    # Every shared operand of both gemms is written only by TMA: no proxy fence (Fence = false).
    gemms = re.findall(r"tl::wgmma_(?:ss|rs)<[^>]*>", src)
    assert len(gemms) == 4 and all(g.endswith(", false>") for g in gemms)  # prologue, loop, epilogue


def test_switched_off_or_off_hopper_the_copy_stays_element_wise():
    assert "Q_shared_bar" not in _fa_source({"tl.disable_tma_lower": True})
    assert "Q_shared_bar" not in _fa_source(target="sm_80")


@tilelang.jit(out_idx=[-1])
def _copy_in_a_loop():
    @T.prim_func
    def main(A: T.Tensor((4, 64, 64), "float16"), B: T.Tensor((4, 64, 64), "float16")):
        with T.Kernel(1, threads=128):
            S = T.alloc_shared((64, 64), "float16")
            for k in T.serial(4):
                T.copy(A[k, 0:64, 0:64], S)
                T.copy(S, B[k, 0:64, 0:64])

    return main


def test_a_copy_inside_a_loop_stays_element_wise():
    k = tilelang.compile(_copy_in_a_loop.factory(), out_idx=[-1], target="sm_90a")
    assert "tma_load" not in k.get_kernel_source()


@tilelang.jit(out_idx=[-1])
def _two_tiles():
    @T.prim_func
    def main(A: T.Tensor((64, 64), "float16"), B: T.Tensor((64, 64), "float16"), C: T.Tensor((64, 64), "float32")):
        with T.Kernel(1, threads=128):
            A_s = T.alloc_shared((64, 64), "float16")
            B_s = T.alloc_shared((64, 64), "float16")
            acc = T.alloc_fragment((64, 64), "float32")
            T.copy(A, A_s)
            T.copy(B, B_s)
            T.clear(acc)
            T.gemm(A_s, B_s, acc)
            T.copy(acc, C)

    return main


def test_back_to_back_copies_are_in_flight_together():
    src = tilelang.compile(_two_tiles.factory(), out_idx=[-1], target="sm_90a").get_kernel_source()
    # Both loads issued before either wait: one TMA round trip before the gemm, not two.
    issue = [m.start() for m in re.finditer(r"tl::tma_load\(", src)]
    waits = [m.start() for m in re.finditer(r"tl::mbarrier_wait\(\(&\(tma_bars_ptr\[\d\]\)\), 0\)", src)]
    assert len(waits) == 2 and max(issue) < min(waits)

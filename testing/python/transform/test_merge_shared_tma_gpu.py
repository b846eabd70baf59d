"""A shared tile written once by TMA before a loop and read after it must keep its bytes through
the loop. TVM's merge_shared_memory counts an access through T.address_of (how tl::tma_load names
its destination) as no access, so the tile seems to live only from its first plain read, and a
reduction's workspace used inside the loop is placed on the same bytes: the tile is overwritten.
This is the NaN of the public DeepSeek-V4 sparse attention example (its attention-sink tile, loaded
by TMA before the loop, shares offset 0 with reduce_max/reduce_sum's workspace). Known bug, strict
xfail until merge_shared_memory sees TMA destinations."""

import pytest
import torch

import tilelang
import tilelang.language as T

pytestmark = pytest.mark.gpu


def sink_after_loop():
    @T.prim_func
    def main(X: T.Tensor((4, 1024), "float32"), Sk: T.Tensor((64,), "float16"), Y: T.Tensor((4,), "float32")):
        with T.Kernel(1, threads=256):
            s = T.alloc_shared((64,), "float16")
            a = T.alloc_fragment((4, 1024), "float32")
            m = T.alloc_fragment((4,), "float32")
            T.copy(Sk, s)  # once per kernel: a TMA load on sm_90a
            T.fill(m, 0)
            for _ in T.serial(2):
                T.copy(X, a)
                T.reduce_max(a, m, dim=1, clear=False)  # across warps: a shared workspace
            for i in T.Parallel(4):
                Y[i] = m[i] + s[i]

    return main


@pytest.mark.xfail(strict=True, reason="merge_shared_memory ignores TMA (address_of) writes")
def test_tma_tile_read_after_a_loop_keeps_its_values():
    x = torch.rand(4, 1024, device="cuda")
    sk = torch.randn(64, device="cuda").half()
    y = tilelang.compile(sink_after_loop(), out_idx=[-1], target="sm_90a")(x, sk)
    torch.testing.assert_close(y, x.amax(dim=1) + sk[:4].float())

"""T.sync_grid: a barrier over the whole launch. CPU: the device call and the host's cooperative
launch, built by nvcc; GPU: each block reads what the next block wrote before the barrier."""

import pytest

import tilelang
import tilelang.language as T


def neighbour_sum(blocks=8, n=256):
    """Each block adds 1 to its row of A, then (after the grid barrier) sums the next block's row."""

    @T.prim_func
    def main(A: T.Tensor((blocks, n), "float32"), Out: T.Tensor((blocks,), "float32")):
        with T.Kernel(blocks, threads=n) as b:
            tx = T.get_thread_binding()
            A[b, tx] = A[b, tx] + 1
            T.sync_grid()
            if tx == 0:
                s = T.alloc_var("float32")
                s = 0.0
                for k in T.serial(n):
                    s = s + A[(b + 1) % blocks, k]
                Out[b] = s

    return main


@pytest.mark.parametrize("target", ["sm_80", "sm_90a"])
def test_grid_barrier_launches_cooperatively(target):
    kernel = tilelang.compile(neighbour_sum(), target=target)
    src = kernel.get_kernel_source()
    assert '#include "tl_templates/cuda/grid.h"' in src and "tl::sync_grid();" in src
    assert "tl_kernel_main_kernel().launch_cooperative(" in kernel.get_host_source()
    kernel._ensure_built()  # nvcc: cooperative groups' grid sync needs no separate compilation


def test_kernels_without_it_launch_plainly():
    @T.prim_func
    def main(A: T.Tensor((128,), "float32")):
        with T.Kernel(1, threads=128):
            A[T.get_thread_binding()] = 1.0

    assert "launch_cooperative" not in tilelang.compile(main, target="sm_80").get_host_source()


@pytest.mark.gpu
def test_blocks_see_each_others_writes():
    import torch

    kernel = tilelang.compile(neighbour_sum())
    a = torch.randn(8, 256, device="cuda")
    out = torch.empty(8, device="cuda")
    expected = (a + 1).roll(-1, dims=0).sum(dim=1)
    kernel(a, out)
    torch.testing.assert_close(out, expected)

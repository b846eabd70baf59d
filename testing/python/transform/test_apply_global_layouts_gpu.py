"""Global tensors with a layout on the GPU (the kernels of test_apply_global_layouts.py and a round
trip through a gemm-fragment order): what lands in memory is the layout's order, against torch."""

import pytest
import torch
from test_apply_global_layouts import _load_to_shared, transposed

import tilelang
import tilelang.language as T

pytestmark = pytest.mark.gpu


def test_a_copy_reads_through_the_layout():
    @T.prim_func
    def main(A: T.Tensor((64, 64), "float32"), B: T.Tensor((64, 64), "float32")):
        with T.Kernel(1, threads=128):
            T.annotate_layout({A: transposed((64, 64))})
            T.copy(A, B)

    a = torch.randn(64, 64, device="cuda")
    b = tilelang.compile(main, out_idx=[-1])(a)
    torch.testing.assert_close(b, a.T)  # element (i, j) of A is stored where a holds a[j, i]


def test_element_atomics_add_through_the_layout():
    @T.prim_func
    def main(A: T.Tensor((64, 64), "float32"), B: T.Tensor((64, 64), "float32")):
        with T.Kernel(4, threads=128):
            T.annotate_layout({A: transposed((64, 64))})
            for i, j in T.Parallel(64, 64):
                T.atomic_add(A[i, j], B[i, j])

    a, b = torch.zeros(64, 64, device="cuda"), torch.randn(64, 64, device="cuda")
    tilelang.compile(main)(a, b)
    torch.testing.assert_close(a, 4 * b.T)


@pytest.mark.parametrize("target", ["auto", "sm_80"])
def test_pipelined_copies_of_a_laid_out_tensor(target):
    # cp.async (sm_80 form) or the element-wise copies sm_90a keeps instead of TMA.
    if target == "sm_80" and torch.cuda.get_device_capability()[0] != 8:
        pytest.skip("an sm_80 cubin runs on an sm_8x GPU only (the library holds no PTX to JIT)")
    a = torch.randn(4, 64, 64, device="cuda", dtype=torch.float16)
    b = tilelang.compile(_load_to_shared(True), out_idx=[-1], target=target)(a)
    torch.testing.assert_close(b, a.transpose(1, 2))  # A's layout stores each [64, 64] slice transposed


def _fragment_order(shape):
    """Rows in groups of 8 and columns in pairs, the order an mma accumulator's threads hold them."""
    return T.Layout(shape, lambda s, d: [s // 8, d // 8, d % 2, 4 * (s % 8) + d % 8 // 2])


def test_a_tensor_written_and_read_back_through_one_layout():
    @T.prim_func
    def scatter(X: T.Tensor((128, 64), "float32"), A: T.Tensor((128, 64), "float32")):
        with T.Kernel(2, threads=128) as bx:
            T.annotate_layout({A: _fragment_order((128, 64))})
            T.copy(X[bx * 64 : bx * 64 + 64, :], A[bx * 64 : bx * 64 + 64, :])

    @T.prim_func
    def gather(A: T.Tensor((128, 64), "float32"), Y: T.Tensor((128, 64), "float32")):
        with T.Kernel(2, threads=128) as bx:
            T.annotate_layout({A: _fragment_order((128, 64))})
            T.copy(A[bx * 64 : bx * 64 + 64, :], Y[bx * 64 : bx * 64 + 64, :])

    x = torch.randn(128, 64, device="cuda")
    a = tilelang.compile(scatter, out_idx=[-1])(x)
    assert not torch.equal(a, x)  # stored in the layout's order
    s, d = torch.meshgrid(torch.arange(128), torch.arange(64), indexing="ij")
    offset = (s // 8) * 512 + (d // 8) * 64 + (d % 2) * 32 + 4 * (s % 8) + (d % 8) // 2
    torch.testing.assert_close(a.view(-1)[offset.view(-1).cuda()].view(128, 64), x)
    torch.testing.assert_close(tilelang.compile(gather, out_idx=[-1])(a), x)

"""Replicated fragments on the GPU: a value every iteration reads, and a per-row value read along
its row, against torch on random inputs."""

import pytest
import torch

import tilelang
import tilelang.language as T

pytestmark = pytest.mark.gpu


def test_scale_read_by_every_iteration():
    @T.prim_func
    def main(A: T.Tensor((8, 256), "float32"), S: T.Tensor((8,), "float32"), B: T.Tensor((8, 256), "float32")):
        with T.Kernel(8, threads=128) as bx:
            scale = T.alloc_fragment((1,), "float32")
            T.copy(S[bx : bx + 1], scale)
            for i in T.Parallel(256):
                B[bx, i] = A[bx, i] * scale[0]

    a, s = torch.randn(8, 256, device="cuda"), torch.randn(8, device="cuda")
    b = tilelang.compile(main, out_idx=[-1])(a, s)
    torch.testing.assert_close(b, a * s[:, None])


def test_row_value_read_along_its_row():
    @T.prim_func
    def main(A: T.Tensor((64, 256), "float32"), S: T.Tensor((64,), "float32"), B: T.Tensor((64, 256), "float32")):
        with T.Kernel(1, threads=128):
            r = T.alloc_fragment((64,), "float32")
            for i in T.Parallel(64):
                r[i] = S[i] * 2.0
            for i, j in T.Parallel(64, 256):
                B[i, j] = A[i, j] * r[i]

    a, s = torch.randn(64, 256, device="cuda"), torch.randn(64, device="cuda")
    b = tilelang.compile(main, out_idx=[-1])(a, s)
    torch.testing.assert_close(b, a * (2 * s)[:, None])

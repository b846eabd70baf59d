"""test_packed_fragment_reads.py's kernels on the GPU, against torch."""

import pytest
import torch
from test_packed_fragment_reads import dequantize_into_gemm, unpack_int4

import tilelang
import tilelang.language as T

pytestmark = pytest.mark.gpu


def _signed_nibbles(b):
    nibbles = torch.stack((b & 15, b >> 4), dim=-1).reshape(b.shape[0], -1).to(torch.int8)
    return torch.where(nibbles > 7, nibbles - 16, nibbles)


def test_unpack_int4():
    b = torch.randint(0, 256, (64, 64), dtype=torch.uint8, device="cuda")
    c = tilelang.compile(unpack_int4(), out_idx=[-1])(b)
    torch.testing.assert_close(c, _signed_nibbles(b))


def test_unpack_int4_a_byte_on_two_threads():
    layout = T.Fragment((8, 128), forward_thread_fn=lambda i, j: j, forward_index_fn=lambda i, j: i)
    b = torch.randint(0, 256, (8, 64), dtype=torch.uint8, device="cuda")
    c = tilelang.compile(unpack_int4(n=8, c_layout=layout), out_idx=[-1])(b)
    torch.testing.assert_close(c, _signed_nibbles(b))


def test_dequantize_into_gemm():
    b = torch.randint(0, 256, (64, 32), dtype=torch.uint8, device="cuda")
    a = torch.randn(64, 64, dtype=torch.float16, device="cuda")
    c = tilelang.compile(dequantize_into_gemm(), out_idx=[-1])(b, a)
    unpacked = torch.stack((b & 15, b >> 4), dim=-1).reshape(64, 64).to(torch.float32)
    torch.testing.assert_close(c, unpacked @ a.float().T, rtol=1e-2, atol=1e-2)

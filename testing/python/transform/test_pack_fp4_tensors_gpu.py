"""test_pack_fp4_tensors.py's kernels on the GPU, against torch: fp4 tensors in and out, as torch's
float4_e2m1fn_x2 (two values a byte, low nibble first)."""

import pytest
import torch
from test_pack_fp4_tensors import FP4_VALUES, _reference_code, dequantize_rows, quantize_dynamic_rows, quantize_rows

import tilelang

pytestmark = pytest.mark.gpu


def _packed_reference(x: torch.Tensor) -> torch.Tensor:
    codes = torch.tensor([_reference_code(v) for v in x.reshape(-1).tolist()], dtype=torch.uint8)
    codes = codes.reshape(x.shape[0], -1, 2)
    return (codes[..., 0] | (codes[..., 1] << 4)).to(x.device)


def test_quantize_rows():
    x = torch.randn(64, 64, device="cuda") * 6
    y = tilelang.compile(quantize_rows(), out_idx=[-1])(x)
    assert y.dtype == torch.float4_e2m1fn_x2 and y.shape == (64, 32)
    torch.testing.assert_close(y.view(torch.uint8), _packed_reference((x / 2).clamp(-6, 6)))


def test_dequantize_rows():
    b = torch.randint(0, 256, (64, 32), dtype=torch.uint8, device="cuda")
    y = tilelang.compile(dequantize_rows(), out_idx=[-1])(b.view(torch.float4_e2m1fn_x2))
    codes = torch.stack((b & 15, b >> 4), dim=-1).reshape(64, 64).long()
    table = torch.tensor(FP4_VALUES + [-v for v in FP4_VALUES], device="cuda")
    torch.testing.assert_close(y, table[codes])


def test_eager_kernel_returns_fp4():
    x = torch.randn(96, 64, device="cuda") * 4
    y = quantize_dynamic_rows(x, block=32)
    assert y.dtype == torch.float4_e2m1fn_x2 and y.shape == (96, 32)
    torch.testing.assert_close(y.view(torch.uint8), _packed_reference(x.clamp(-6, 6)))

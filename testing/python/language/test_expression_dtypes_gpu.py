"""The dequantization kernel of test_expression_dtypes.py (a helper reading `val.dtype` of a buffer
element, parameters annotated `T.Tensor[shape, dtype]`) on the GPU, against torch on random bytes."""

import pytest
import torch
from test_expression_dtypes import dequantize, reference_dequantize

import tilelang

pytestmark = pytest.mark.gpu


@pytest.mark.parametrize("n", [64, 200])
def test_dequantize_fp4_bytes_to_fp16(n):
    b = torch.randint(0, 256, (n, 64), dtype=torch.uint8, device="cuda")
    c = tilelang.compile(dequantize(n, 128), out_idx=[-1])(b)
    torch.testing.assert_close(c, reference_dequantize(b), rtol=0, atol=0)

"""Vector conversions and broadcasts on the GPU (the kernels of test_vector_conversions.py), against
torch on random inputs: each lane converted as torch converts it (saturating to fp8's largest finite
value, as the scalar cast does), fills storing their value's bits."""

import numpy as np
import pytest
import torch
from test_vector_conversions import PAIRS, fill, fragment_cast, per_token_cast, scalar_cast, vector_cast

import tilelang

pytestmark = pytest.mark.gpu


def _random(dtype: str, shape) -> torch.Tensor:
    x = torch.randn(shape, device="cuda") * 8
    return x.to(getattr(torch, dtype))


def _want(x: torch.Tensor, dst: str) -> torch.Tensor:
    if dst.startswith("float8"):
        top = torch.finfo(getattr(torch, dst)).max
        return x.float().clamp(-top, top).to(getattr(torch, dst))
    return x.float().to(getattr(torch, dst))


def _same(got: torch.Tensor, want: torch.Tensor):
    torch.testing.assert_close(got.float(), want.float(), rtol=0, atol=0)


@pytest.mark.parametrize("lanes", [2, 4, 8])
@pytest.mark.parametrize("src,dst", PAIRS)
def test_vector_cast(src, dst, lanes):
    x = _random(src, (128, lanes))
    y = tilelang.compile(vector_cast(src, dst, lanes), out_idx=[-1])(x)
    _same(y, _want(x, dst))


@pytest.mark.parametrize("src,dst", [("float8_e4m3fn", "float8_e5m2"), ("float8_e5m2", "float8_e4m3fn")])
def test_vector_cast_between_fp8_formats_16_lanes(src, dst):
    x = _random(src, (128, 16))
    y = tilelang.compile(vector_cast(src, dst, 16), out_idx=[-1])(x)
    _same(y, _want(x, dst))


@pytest.mark.parametrize(
    "src,dst",
    [
        ("float32", "float8_e4m3fn"),
        ("bfloat16", "float8_e4m3fn"),
        ("float16", "float8_e5m2"),
        ("float8_e4m3fn", "float32"),
        ("float8_e4m3fn", "float16"),
        ("float8_e5m2", "bfloat16"),
    ],
)
@pytest.mark.parametrize("rows", [8, 32])
def test_fragment_cast(src, dst, rows):
    x = _random(src, (rows, 128))
    y = tilelang.compile(fragment_cast(src, dst, rows=rows), out_idx=[-1])(x)
    _same(y, _want(x, dst))


@pytest.mark.parametrize("dst", ["float8_e4m3fn", "float8_e5m2"])
def test_per_token_cast(dst):
    x = torch.randn(8, 128, device="cuda")
    y, s = tilelang.compile(per_token_cast(dst), out_idx=[1, 2])(x)
    top = torch.finfo(getattr(torch, dst)).max
    want_s = x.abs().amax(dim=1).clamp(min=1e-4) / top
    torch.testing.assert_close(s, want_s)
    _same(y, _want((x / s[:, None]).clamp(-top, top), dst))


@pytest.mark.parametrize(
    "dtype,value,lanes",
    [
        ("float8_e4m3fn", -1.5, 16),
        ("float8_e5m2", 3.0, 16),
        ("int8", -3, 16),
        ("int8", 100, 8),
        ("uint8", 200, 16),
        ("int16", -300, 8),
        ("uint16", 65000, 8),
        ("int32", -1, 8),
        ("uint32", 4294967295, 8),
        ("float32", -2.5, 8),
    ],
)
def test_fill(dtype, value, lanes):
    y = torch.empty(128 * lanes, dtype=getattr(torch, dtype), device="cuda")
    tilelang.compile(fill(dtype, 128 * lanes, value))(y)
    if dtype.startswith("float8"):
        _same(y, torch.full_like(y, value, dtype=torch.float32))
    else:  # compare the bits (torch has few operations on uint16/uint32)
        signed = {1: torch.int8, 2: torch.int16, 4: torch.int32}[y.element_size()]
        want = np.full(128 * lanes, value, dtype=getattr(np, dtype)).view(str(signed).removeprefix("torch."))
        assert torch.equal(y.cpu().view(signed), torch.from_numpy(want))


@pytest.mark.parametrize("src,dst", [("float8_e4m3fn", "float8_e5m2"), ("float8_e5m2", "float8_e4m3fn")])
def test_scalar_cast_between_fp8_formats(src, dst):
    x = _random(src, (128, 4))
    y = tilelang.compile(scalar_cast(src, dst), out_idx=[-1])(x)
    _same(y, _want(x, dst))

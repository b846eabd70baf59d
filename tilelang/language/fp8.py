"""FP8 formats by name: which fp8 dtype an 'e4m3' or 'e5m2' kernel uses on this platform.

TileLang's examples ask `determine_fp8_type("e4m3")` instead of naming a dtype, because AMD GPUs
before gfx950 use the 'fnuz' variants. tilelang compiles for NVIDIA GPUs only, whose fp8 types are
float8_e4m3fn and float8_e5m2 (PTX ISA: "e4m3" and "e5m2").
"""

from __future__ import annotations

from tilelang import dtypes
from tilelang.errors import UserError

_FORMATS = {"e4m3": dtypes.float8_e4m3fn, "e5m2": dtypes.float8_e5m2}


def determine_fp8_type(fp8_format: str = "e4m3") -> dtypes.dtype:
    """The fp8 dtype of `fp8_format` ('e4m3' or 'e5m2') on NVIDIA GPUs.

    Errors:
        UserError for another format, or when torch is a ROCm build (AMD GPUs are not supported).

    Example:
        dtype = determine_fp8_type()        # T.float8_e4m3fn
        A_shared = T.alloc_shared((64, 64), dtype)
    """
    if fp8_format not in _FORMATS:
        raise UserError(f"determine_fp8_type: fp8_format must be 'e4m3' or 'e5m2', got {fp8_format!r}")
    import torch

    if getattr(torch.version, "hip", None) is not None:
        raise UserError(
            "determine_fp8_type: AMD GPUs (ROCm, fnuz fp8 types) are not supported; tilelang targets "
            "NVIDIA sm_80, sm_89 and sm_90a"
        )
    return _FORMATS[fp8_format]


def determine_torch_fp8_type(fp8_format: str = "e4m3"):
    """The torch dtype of `determine_fp8_type(fp8_format)`, e.g. torch.float8_e4m3fn."""
    return determine_fp8_type(fp8_format).as_torch()


__all__ = ["determine_fp8_type", "determine_torch_fp8_type"]

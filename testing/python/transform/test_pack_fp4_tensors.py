"""pack_fp4_tensors: tensors and tiles of float4_e2m1fn become bytes. A global fp4 tensor (..., N) is
torch's float4_e2m1fn_x2 (..., N / 2), two values a byte, low nibble first; a tile holds one code
per byte; stores into the tensor write whole bytes. CPU: the IR, the generated code (nvcc), the
conversions of convert.h against an exact reference, the launcher's view of fp4 arguments. The GPU
twin is test_pack_fp4_tensors_gpu.py."""

import math
import re
import struct
import subprocess

import pytest
import torch

import tilelang
import tilelang.language as T
from tilelang import env
from tilelang.codegen import cuda
from tilelang.engine.pipeline import lower
from tilelang.errors import UserError
from tilelang.jit.params import Param, as_launched, check_argument, storage_shape
from tilelang.testing import assert_points_at
from tilelang.utils.target import determine_target

FP4_VALUES = [0.0, 0.5, 1.0, 1.5, 2.0, 3.0, 4.0, 6.0]


def quantize_rows(rows: int = 64, cols: int = 64, threads: int = 128):
    """Y = fp4(clamp(X / 2, -6, 6)) through a fragment and a shared tile, as act_quant does."""

    @T.prim_func
    def main(X: T.Tensor((rows, cols), T.float32), Y: T.Tensor((rows, cols), T.float4_e2m1fn)):
        with T.Kernel(1, threads=threads):
            x_local = T.alloc_fragment((rows, cols), T.float32)
            y_local = T.alloc_fragment((rows, cols), T.float4_e2m1fn)
            y_shared = T.alloc_shared((rows, cols), T.float4_e2m1fn)
            T.copy(X, x_local)
            for i, j in T.Parallel(rows, cols):
                y_local[i, j] = T.clamp(x_local[i, j] / 2.0, -6.0, 6.0)
            T.copy(y_local, y_shared)
            T.copy(y_shared, Y, disable_tma=True)

    return main


def dequantize_rows(rows: int = 64, cols: int = 64, threads: int = 128):
    """Y = float(X) for an fp4 tensor X."""

    @T.prim_func
    def main(X: T.Tensor((rows, cols), T.float4_e2m1fn), Y: T.Tensor((rows, cols), T.float32)):
        with T.Kernel(1, threads=threads):
            for i, j in T.Parallel(rows, cols):
                Y[i, j] = T.cast(X[i, j], T.float32)

    return main


@tilelang.jit
def quantize_dynamic_rows(x, block: int = 32):
    """An eager kernel returning a new fp4 tensor with a dynamic first dimension."""
    M = T.dynamic("M")
    x: T.Tensor[(M, 64), T.float32]
    y = T.empty((M, 64), T.float4_e2m1fn)
    with T.Kernel(T.ceildiv(M, block), threads=128) as bx:
        y_shared = T.alloc_shared((block, 64), T.float4_e2m1fn)
        for i, j in T.Parallel(block, 64):
            y_shared[i, j] = x[bx * block + i, j]
        T.copy(y_shared, y[bx * block, 0], disable_tma=True)
    return y


@pytest.mark.parametrize("target", ["sm_80", "sm_90a"])
def test_a_stored_fp4_tensor_is_written_a_byte_per_two_values(target):
    kernel = tilelang.compile(quantize_rows(), target=target)
    src = kernel.get_kernel_source()
    assert re.search(r"main_kernel\(float\* __restrict__ X_ptr, uchar\* __restrict__ Y_ptr", src)
    assert "tl::fp4_e2m1_from_float(" in src and "tl_templates/cuda/convert.h" in src
    stores = re.findall(r"Y_ptr\[[^\]]*\] = \(([^;]*)\);", src)
    assert stores and all("<< (uchar)4" in s for s in stores)  # low nibble | high nibble << 4
    assert "alignas(64) uchar y_local_local_ptr[32];" in src  # a tile: one code per byte
    cuda.compile_object(src, kernel.target)


def test_the_kernel_takes_the_bytes_of_an_fp4_tensor():
    lowered = lower(quantize_rows(), determine_target("sm_90a"))
    host = str(lowered.host_mod)
    # The launcher checks a (64, 32) uint8 tensor: torch's float4_e2m1fn_x2 one, viewed as bytes.
    assert re.search(r"Y: Tensor\(\[64, 32\], uint8\)", host)
    assert "float4_e2m1fn" not in str(lowered.device_mod)


def test_a_read_fp4_tensor_is_unpacked():
    kernel = tilelang.compile(dequantize_rows(), target="sm_90a")
    src = kernel.get_kernel_source()
    assert re.search(r"tl::fp4_e2m1_to_float\(\(\(X_ptr\[.*\] >> .*\) & \(uchar\)15\)\)", src)
    cuda.compile_object(src, kernel.target)


def test_an_eager_kernel_returns_a_new_fp4_tensor(monkeypatch):
    monkeypatch.setenv("TILELANG_DEFAULT_TARGET", "sm_90a")
    kernel = quantize_dynamic_rows.compile(torch.empty(96, 64), block=32)
    (y,) = [p for p in kernel.params if p.name == "y"]
    assert y.dtype == "float4_e2m1fn" and y.shape == ("M", 64)
    assert storage_shape(y, (96, 64)) == (96, 32)
    cuda.compile_object(kernel.get_kernel_source(), kernel.target)


def test_an_fp4_argument_is_torchs_fp4x2_of_half_the_columns():
    param = Param("Y", (64, 64), "float4_e2m1fn")
    packed = torch.zeros(64, 32, dtype=torch.uint8).view(torch.float4_e2m1fn_x2)
    check_argument(param, packed, 1, "main", device=False)
    assert as_launched(param, packed).dtype == torch.uint8 and as_launched(param, packed).shape == (64, 32)
    wide = torch.zeros(64, 64, dtype=torch.uint8).view(torch.float4_e2m1fn_x2)
    with pytest.raises(ValueError, match=r"shape \[64, 128\] instead of \[64, 64\]"):
        check_argument(param, wide, 1, "main", device=False)
    with pytest.raises(ValueError, match="dtype float16 instead of float4_e2m1fn"):
        check_argument(param, torch.zeros(64, 32, dtype=torch.float16), 1, "main", device=False)


def test_an_odd_last_dimension_is_an_error():
    with pytest.raises(UserError, match=r"float4_e2m1fn tensor 'Y' has last dimension 63.*constant even size") as err:
        tilelang.compile(quantize_rows(cols=63, threads=63), target="sm_90a").get_kernel_source()
    assert_points_at(err, "T.copy(y_shared, Y, disable_tma=True)")  # the parameter's first use


def test_a_store_of_one_value_into_a_byte_is_an_error():
    @T.prim_func
    def main(X: T.Tensor((64,), T.float32), Y: T.Tensor((64, 2), T.float4_e2m1fn)):
        with T.Kernel(1, threads=64):
            for i in T.Parallel(64):
                Y[i, 0] = X[i]

    with pytest.raises(UserError, match=r"(?s)writes one 4-bit value, half a byte.*Y\[i, 0\] = X\[i\]") as err:
        tilelang.compile(main, target="sm_90a").get_kernel_source()
    assert_points_at(err, "Y[i, 0] = X[i]")


def test_arithmetic_on_fp4_values_is_an_error():
    @T.prim_func
    def main(X: T.Tensor((64, 64), T.float4_e2m1fn), Y: T.Tensor((64, 64), T.float4_e2m1fn)):
        with T.Kernel(1, threads=128):
            for i, j in T.Parallel(64, 64):
                Y[i, j] = X[i, j] + X[i, j]

    with pytest.raises(UserError, match="fp4 values can be stored, copied and converted") as err:
        tilelang.compile(main, target="sm_90a").get_kernel_source()
    assert_points_at(err, "Y[i, j] = X[i, j] + X[i, j]")


# ---- convert.h's conversions, on the host ----------------------------------------------------------

_PROGRAM = r"""
#include "tl_templates/cuda/convert.h"
#include <cstdio>
int main() {
  float x;
  while (fread(&x, sizeof(x), 1, stdin) == 1) {
    unsigned char c = tl::fp4_e2m1_from_float(x);
    float back = tl::fp4_e2m1_to_float(c);
    fwrite(&c, 1, 1, stdout);
    fwrite(&back, sizeof(back), 1, stdout);
  }
}
"""


def _reference_code(x: float) -> int:
    """Nearest e2m1 value, ties to the even code, saturating; NaN to +6."""
    if math.isnan(x):
        return 7
    sign = 8 if math.copysign(1.0, x) < 0 else 0
    a = min(abs(x), 6.0)
    best = min(range(8), key=lambda c: (abs(FP4_VALUES[c] - a), c % 2))
    return sign | best


def test_fp4_conversions_round_to_nearest_even_and_saturate(tmp_path):
    src = tmp_path / "fp4.cu"
    src.write_text(_PROGRAM)
    exe = tmp_path / "fp4"
    cmd = [env.nvcc_path(), "-std=c++17", "-w", f"-I{env.template_path()}", "-o", str(exe), str(src)]
    subprocess.run(cmd, check=True, capture_output=True)
    mids = [(a + b) / 2 for a, b in zip(FP4_VALUES, FP4_VALUES[1:])]
    values = FP4_VALUES + mids + [m + d for m in mids for d in (-1e-3, 1e-3)] + [7.0, 1e30, float("inf")]
    values += [-v for v in values] + [float("nan"), -0.1, 0.1]
    raw = b"".join(struct.pack("f", v) for v in values)
    out = subprocess.run([str(exe)], input=raw, capture_output=True, check=True).stdout
    for k, x in enumerate(values):
        code, back = out[5 * k], struct.unpack("f", out[5 * k + 1 : 5 * k + 5])[0]
        assert code == _reference_code(x), (x, code)
        assert back == (-1.0 if code & 8 else 1.0) * FP4_VALUES[code & 7]

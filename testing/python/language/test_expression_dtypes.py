"""What code written for the public TileLang reads off expressions and writes as annotations:
`x.dtype` of any expression (dequantization helpers check `val.dtype == T.uint8` of a buffer
element), and `T.Tensor[shape, dtype]` as a parameter annotation Python evaluates itself.
The dequantization kernel here runs on the GPU in test_expression_dtypes_gpu.py."""

import pytest
import torch
import tvm
from tvm import tirx

import tilelang
import tilelang.language as T
from tilelang.codegen import cuda


def test_dtype_of_a_buffer_element():
    b = tirx.decl_buffer((4,), "uint8")
    assert b[0].dtype == T.uint8 and repr(b[0].dtype) == "T.uint8"


def test_dtype_of_scalars_and_arithmetic():
    x = tirx.Var("x", "int32")
    assert x.dtype == "int32" and (x + 1).dtype == T.int32
    assert (x.astype("uint16") >> tirx.const(1, "uint16")).dtype == T.uint16
    assert tirx.const(1.5, "float16").dtype == T.float16
    assert tirx.Ramp(0, 1, 4).dtype == "int32x4" and tirx.Ramp(0, 1, 4).dtype.lanes == 4


def test_dtype_of_a_pointer_variable():
    h = tirx.Var("h", tvm.ir.PointerType(tvm.ir.PrimType("float32")))
    assert h.dtype == "handle"


def test_buffer_dtype_is_unchanged():
    b = tirx.decl_buffer((4,), "float16")
    assert b.dtype == "float16" and not hasattr(tirx.Var("x", "int32"), "shape")


def u4_to_f16(val, pos):
    """Nibble `pos` of the uint8 `val` as an fp16 s1e2m1 value (the public fp4 dequantization
    example's bit manipulation, written here from its description)."""
    assert val.dtype == T.uint8
    f4 = (val >> (pos.astype(T.uint8) * tirx.const(4, T.uint8))) & tirx.const(15, T.uint8)
    f4 = f4.astype(T.uint16)
    sign = f4 >> tirx.const(3, T.uint16)
    exponent = ((f4 & tirx.const(6, T.uint16)) >> tirx.const(1, T.uint16)) + tirx.const(14, T.uint16)
    mantissa = f4 & tirx.const(1, T.uint16)
    bits = ((exponent | (sign << tirx.const(5, T.uint16))) << tirx.const(10, T.uint16)) | (
        mantissa << tirx.const(9, T.uint16)
    )
    return tirx.reinterpret(T.float16, bits)


def dequantize(n: int = 64, k: int = 128):
    """B (n, k // 2) uint8, two s1e2m1 values per byte (low nibble first) -> C (n, k) float16."""

    @T.prim_func
    def main(B: T.Tensor[(n, k // 2), T.uint8], C: T.Tensor[(n, k), T.float16]):
        with T.Kernel(T.ceildiv(n, 128), threads=128) as bx:
            b = T.alloc_local((k // 2,), T.uint8)
            row = bx * 128 + T.get_thread_binding()
            if row < n:
                for j in T.serial(k // 2):
                    b[j] = B[row, j]
                for j in T.serial(k):
                    C[row, j] = u4_to_f16(b[j // 2], j % 2)

    return main


def reference_dequantize(b: torch.Tensor) -> torch.Tensor:
    f4 = torch.stack((b & 15, b >> 4), dim=-1).reshape(b.shape[0], -1).to(torch.int32)
    bits = ((f4 >> 3) << 15) | ((((f4 & 6) >> 1) + 14) << 10) | ((f4 & 1) << 9)
    return bits.to(torch.int16).view(torch.float16)


def test_dequantization_helper_reads_the_dtype_of_a_buffer_element():
    kernel = tilelang.compile(dequantize(), target="sm_90a")
    src = kernel.get_kernel_source()
    assert "C_ptr[" in src
    cuda.compile_object(src, kernel.target)


def test_reference_dequantize_matches_the_format():
    # s1e2m1 with the exponent rebiased to fp16's: 0b0010 (e=1, m=0) is 1.0, 0b1011 is -1.5.
    b = torch.tensor([[0x2 | (0xB << 4)]], dtype=torch.uint8)
    assert reference_dequantize(b).tolist() == [[1.0, -1.5]]


# ---- T.Tensor[...] ------------------------------------------------------------------------------

M = 4


@T.prim_func
def subscripted(A: T.Tensor[(M, 8), T.float16], B: T.Tensor[(M, 8), T.float16], C: T.Buffer[M, 8]):
    with T.Kernel(1, threads=32):
        A[0, 0] = B[0, 0]
        C[0, 0] = T.float32(1)


def test_subscripted_tensor_annotations():
    text = subscripted.script()
    assert 'A: T.Buffer((4, 8), "float16"), B: T.Buffer((4, 8), "float16"), C: T.Buffer((4, 8), "float32")' in text


def test_subscript_is_the_call():
    assert T.Tensor[(2, 3), "int8"].shape == T.Tensor((2, 3), "int8").shape
    assert T.Tensor[2, 3].dtype == "float32" and list(T.Tensor[2, 3].shape) == [2, 3]
    assert list(T.SharedBuffer[(16, 16), T.float16].shape) == [16, 16]
    assert T.Tensor.__name__ == "Tensor" and "annotation" in T.Tensor.__doc__


@pytest.mark.parametrize("name", ["Tensor", "Buffer", "SharedBuffer", "FragmentBuffer", "LocalBuffer"])
def test_every_tensor_annotation_subscripts(name):
    assert getattr(T, name)[(8,), "int32"].dtype == "int32"

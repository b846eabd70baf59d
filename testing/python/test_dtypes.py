"""Dtype objects (`T.float16`, `T.dtype(...)`): TileLang's behaviour as strings, conversions to torch,
constants built by calling them, and their use wherever a dtype is accepted."""

import pickle

import numpy as np
import pytest
import torch
import tvm_ffi
from tvm import ir, tirx

import tilelang
import tilelang.language as T
from tilelang import cache, dtypes
from tilelang.errors import UserError
from tilelang.language.fp8 import determine_fp8_type, determine_torch_fp8_type
from tilelang.testing import assert_points_at


def test_objects_are_strings_equal_to_their_name():
    assert T.float16 == "float16" and "float16" == T.float16
    assert hash(T.float16) == hash("float16")
    assert {"float16": 1}[T.float16] == 1 and {T.bfloat16: 2}["bfloat16"] == 2
    assert T.float16 != T.bfloat16 and T.float16 != "float32"
    assert str(T.float16) == "float16" and type(str(T.float16)) is str
    assert repr(T.float16) == "T.float16"
    assert isinstance(T.float16, T.dtype) and isinstance(T.float16, tvm_ffi.dtype)
    assert tilelang.DataType is T.dtype


def test_c_style_names():
    assert (T.float, T.double, T.half) == ("float32", "float64", "float16")
    assert (T.int, T.uint, T.long, T.short) == ("int32", "uint32", "int64", "int16")
    assert T.bool == "bool" and T.boolean == "bool"
    # What TileLang's quantization helpers compare against.
    assert T.dtype("uint") == T.uint and T.dtype("int") in [T.int, T.uint]


def test_bits_bytes_lanes():
    assert (T.float16.bits, T.float16.bytes, T.float16.lanes) == (16, 2, 1)
    assert (T.float32x4.bits, T.float32x4.lanes, T.float32x4.bytes) == (32, 4, 16)
    assert T.int4.bits == 4 and T.float4_e2m1fn.bits == 4 and T.float8_e4m3fn.bits == 8
    assert T.tfloat32.bits == 32
    assert dtypes.bits("float") == 32 and dtypes.bits(torch.bfloat16) == 16


@pytest.mark.parametrize(
    "value, name",
    [
        ("float", "float32"),
        ("float16", "float16"),
        (torch.float16, "float16"),
        (torch.half, "float16"),
        (torch.float8_e4m3fn, "float8_e4m3fn"),
        (np.float16, "float16"),
        (np.dtype("int8"), "int8"),
        (float, "float32"),
        (int, "int32"),
        (bool, "bool"),
        (tvm_ffi.dtype("bfloat16"), "bfloat16"),
    ],
)
def test_dtype_normalizes_every_spelling(value, name):
    assert T.dtype(value) == name
    assert type(T.dtype(value)) is T.dtype
    assert T.dtype(T.dtype(value)) is T.dtype(value) or T.dtype(T.dtype(value)) == name


def test_unknown_dtype_is_a_user_error():
    # raised at the call: the traceback shows the user's line
    with pytest.raises(UserError, match="unknown dtype 'floaty'"):
        T.dtype("floaty")
    with pytest.raises(UserError, match="expected a dtype"):  # raised at the call: the traceback shows the user's line
        T.dtype(3.5)


@pytest.mark.parametrize(
    "dt, want",
    [
        (T.float16, torch.float16),
        (T.bfloat16, torch.bfloat16),
        (T.float, torch.float32),
        (T.int8, torch.int8),
        (T.uint32, torch.uint32),
        (T.bool, torch.bool),
        (T.float8_e4m3fn, torch.float8_e4m3fn),
        (T.float8_e4m3, torch.float8_e4m3fn),  # NVIDIA's e4m3 is the 'fn' variant
        (T.float8_e5m2, torch.float8_e5m2),
        (T.int4, torch.int8),  # sub-byte types travel as bytes
        (T.float4_e2m1fn, torch.float4_e2m1fn_x2),
        (T.tfloat32, torch.float32),
    ],
)
def test_as_torch(dt, want):
    assert dt.as_torch() is want
    assert dtypes.to_torch(str(dt)) is want


def test_getattr_torch_as_examples_use_it():
    assert getattr(torch, T.float16) is torch.float16
    assert getattr(torch, T.dtype("float")) is torch.float32
    assert torch.empty(2, dtype=T.bfloat16.as_torch()).dtype == torch.bfloat16


def test_canonical_is_the_ir_name():
    assert dtypes.canonical(T.float) == "float32" and type(dtypes.canonical(T.float)) is str
    assert dtypes.canonical(T.float8_e4m3) == "float8_e4m3fn"
    assert dtypes.canonical(T.tfloat32) == "float32"
    assert dtypes.canonical("half") == "float16"
    # raised at the call: the traceback shows the user's line
    with pytest.raises(UserError, match=r"Blackwell.*sm_100"):
        dtypes.canonical(T.float4_e2m1_unpacked)


def test_calling_builds_ir():
    c = T.float16(1.5)
    assert isinstance(c, tirx.FloatImm) and str(c.ty.dtype) == "float16" and c.value == 1.5
    i = T.int32(3)
    assert isinstance(i, tirx.IntImm) and int(i) == 3
    assert str(T.float32("-inf")) == 'T.float32("-inf")'
    x = tirx.Var("x", "int32")
    assert str(T.float32(x)) == 'T.Cast("float32", x)'
    v = T.float32()
    assert isinstance(v, ir.Var) and str(v.ty.dtype) == "float32"
    assert str(T.int4(3)) == "T.int4(3)"
    vec = T.float16x2(1.0, 2.0)
    assert isinstance(vec, tirx.Shuffle) and str(vec.ty.dtype) == "float16x2"


def test_pickles_and_keys_the_cache_stably():
    assert pickle.loads(pickle.dumps(T.float16)) == T.float16
    assert type(pickle.loads(pickle.dumps(T.float16))) is T.dtype

    def factory(dtype):
        return dtype

    a = cache.key_for(factory, (T.float16,), {"acc": T.float}, None, "sm_80", None)
    b = cache.key_for(factory, (T.dtype("float16"),), {"acc": T.dtype(torch.float32)}, None, "sm_80", None)
    assert a == b
    assert a != cache.key_for(factory, (T.bfloat16,), {"acc": T.float}, None, "sm_80", None)


def test_dtype_objects_everywhere_a_dtype_is_accepted():
    @T.prim_func
    def main(A: T.Tensor((64,), T.float16), B: T.Tensor((64,), T.float)):
        with T.Kernel(1, threads=64):
            s = T.alloc_shared((64,), T.half)
            f = T.alloc_fragment((64,), T.dtype(torch.float32))
            v = T.alloc_var(T.int)
            v = 2
            for i in T.Parallel(64):
                s[i] = A[i] * T.float16(1.5)
            for i in T.Parallel(64):
                f[i] = T.Cast(T.float32, s[i]) + T.cast(v, T.float)
            T.copy(f, B)

    allocs = {a.buffer.name: str(a.buffer.dtype) for a in _collect(main.body, tirx.AllocBuffer)}
    assert allocs["s"] == "float16" and allocs["f"] == "float32"
    assert str(main.params[1].dtype) == "float32"
    kernel = tilelang.compile(main, target="sm_80")
    assert "(half)" in kernel.get_kernel_source() or "__float2half" in kernel.get_kernel_source()


def test_factory_compares_dtype_objects():
    def pick(dtype=T.float16):
        dtype = T.dtype(dtype)
        return "mma16" if dtype == T.float16 or dtype == "bfloat16" else "other"

    assert pick() == pick("float16") == pick(torch.float16) == pick(T.bfloat16) == "mma16"
    assert pick(T.float) == "other"


def test_fp8_module():
    assert determine_fp8_type() is T.float8_e4m3fn and determine_fp8_type("e5m2") is T.float8_e5m2
    assert determine_torch_fp8_type() is torch.float8_e4m3fn
    with pytest.raises(UserError, match="'e4m3' or 'e5m2'"):  # raised at the call: the traceback shows the user's line
        determine_fp8_type("e3m4")


def test_new_dtype_names_as_buffer_dtypes():
    @T.prim_func
    def main(A: T.Tensor((64,), T.float8_e4m3), B: T.Tensor((64,), T.int4), C: T.Tensor((64,), T.tfloat32)):
        with T.Kernel(1, threads=64) as bx:
            s = T.alloc_shared((64,), T.float4_e2m1fn)
            s[bx] = T.Cast(T.float4_e2m1fn, A[bx])

    assert [str(p.dtype) for p in main.params] == ["float8_e4m3fn", "int4", "float32"]
    ((alloc),) = _collect(main.body, tirx.AllocBuffer)
    assert str(alloc.buffer.dtype) == "float4_e2m1fn"


def test_blackwell_only_dtype_is_an_error_at_the_users_line():
    with pytest.raises(UserError, match=r"float4_e2m1_unpacked[\s\S]*test_dtypes.py") as err:

        @T.prim_func
        def main(A: T.Tensor((64,), T.float16)):
            with T.Kernel(1, threads=64):
                s = T.alloc_shared((64,), T.float4_e2m1_unpacked)  # noqa: F841

    assert_points_at(err, "s = T.alloc_shared((64,), T.float4_e2m1_unpacked)")


def _collect(node, kind):
    out = []
    tvm_ffi.structural_walk(node, [(kind, out.append)], order="pre")
    return out


def test_tilelang_language_dtypes_module():
    from tilelang.language.dtypes import _TORCH_DTYPE_TO_STR, dtype, float16, get_tvm_dtype

    assert dtype is T.dtype and float16 is T.float16
    assert dtype(_TORCH_DTYPE_TO_STR[torch.bfloat16]) == T.bfloat16
    assert _TORCH_DTYPE_TO_STR[torch.float8_e4m3fn] == "float8_e4m3fn"
    assert get_tvm_dtype(torch.float32) == T.float

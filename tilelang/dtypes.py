"""Data types of the T.* language: the dtype objects (`T.float16`, ...), their spellings and conversions.

A dtype can be given as a string ("float16", "float" for float32), as a `T.float16`-style object, as a
`tvm.DataType`, a `torch.dtype`, a NumPy dtype or a Python type (`float` is float32); everything
inside the compiler uses the canonical string (`canonical`).

The objects behave like TileLang's: each is a `str` subclass equal to its name (`T.float16 ==
"float16"`, hashed like it, so a dict or a cache keyed by either finds the other; `getattr(torch,
T.float16)` works), carries `.bits`/`.lanes`/`.bytes`, converts with `.as_torch()`, and builds IR
when called (`T.float16(1.5)` is a constant, `T.int32(x)` a cast, `T.float32()` a new scalar
variable, as the parser needs for `x: T.float32` parameters). `T.dtype(x)` normalizes any spelling.

A few names exist for code written against TileLang that spells them but is not compiled here as a
type of its own: `T.tfloat32` (stored as float32: `T.gemm` on float32 tiles already runs on tf32
tensor cores) and `T.float4_e2m1_unpacked` (Blackwell's tcgen05 shared-memory format: an error
when used).
"""

from __future__ import annotations

import builtins

import tvm_ffi
from tvm import tirx
from tvm.script import tirx as _tirx

from tilelang.errors import UserError

# TileLang's short C-style names, as `T.dtype("float")` and `T.float` read them.
_SHORT_NAMES = {
    "float": "float32",
    "double": "float64",
    "half": "float16",
    "int": "int32",
    "long": "int64",
    "short": "int16",
    "uint": "uint32",
    "ulong": "uint64",
    "e4m3_float8": "float8_e4m3",
    "e5m2_float8": "float8_e5m2",
}

# Dtypes TVM 0.27 has no type for: name -> (the storage type in the IR, or None if it cannot be
# compiled here, and why).
_STORED_AS = {
    # TileLang registers tf32 as a custom TVM type; here it is float32 storage. A T.gemm on
    # float32 operands is a tf32 mma (m16n8k8), which is what a tfloat32 operand asks for; a cast
    # to tfloat32 does not round to 10 mantissa bits first (the tensor core ignores those bits).
    "tfloat32": ("float32", None),
    "float4_e2m1_unpacked": (
        None,
        "T.float4_e2m1_unpacked is the shared-memory format of Blackwell's tcgen05 mma (sm_100), which "
        "tilelang does not support (its targets are sm_80, sm_89 and sm_90a); use T.float4_e2m1fn",
    ),
}

# What the IR uses for a dtype the objects name differently (CUDA's e4m3 is the 'fn' variant).
_IR_NAME = {"float8_e4m3": "float8_e4m3fn"}

_PYTHON_TYPES = {builtins.bool: "bool", builtins.int: "int32", builtins.float: "float32"}


class dtype(tvm_ffi.dtype):  # noqa: N801  (TileLang's name: T.dtype)
    """A data type: a string equal to its name, with TileLang's conversions.

    Example:
        dt = T.dtype(torch.float16)        # == T.float16 == "float16"
        A_shared = T.alloc_shared((64, 64), dt)
        x = T.float16(1.5)                  # inside a kernel: a float16 constant
        torch_dt = T.float8_e4m3fn.as_torch()
    """

    __slots__ = ()

    def __new__(cls, value):
        if isinstance(value, dtype):
            return value
        name = _name_of(value)
        stored = _STORED_AS.get(name)
        self = str.__new__(cls, name)
        try:
            # The IR type TVM sees when the object itself reaches an FFI call.
            self._tvm_ffi_dtype = tvm_ffi.core.DataType((stored[0] or "uint8") if stored else name)
        except ValueError:
            raise UserError(f"unknown dtype {value!r}; expected a name such as 'float16' or T.float16") from None
        return self

    def __repr__(self) -> str:
        return f"T.{self}" if self.isidentifier() else f"T.dtype({str(self)!r})"

    def __reduce__(self):
        return (dtype, (str(self),))

    @property
    def bytes(self) -> int:
        """Bytes of one element (all lanes); 0 for sub-byte types such as int4."""
        return self.itemsize

    def as_torch(self):
        """The torch dtype tensors of this type have (int4 and fp4: their byte storage)."""
        return to_torch(self)

    def __call__(self, *args, is_size_var: bool = False):
        """Inside a kernel: `T.float16(1.5)` a constant, `T.int32(x)` a cast, `T.float32()` a new
        scalar variable, `T.float16x2(a, b)` a vector of its lanes."""
        name = canonical(self)
        if len(args) > 1:
            return tirx.Shuffle([_scalar(a, str(dtype(name).with_lanes(1))) for a in args], list(range(len(args))))
        value = args[0] if args else None
        if value is None:
            return tirx.SizeVar("", name) if is_size_var else tirx.Var("", name)
        ctor = getattr(_tirx, name, None)
        if ctor is not None and hasattr(ctor, "_dtype_str"):  # TVM's constructor: consts, casts, "inf"
            return ctor(value)
        return _scalar(value, name)


def _scalar(value, name: str):
    if isinstance(value, (builtins.bool, builtins.int, builtins.float)):
        return tirx.const(value, name)
    return tirx.Cast(name, value)


def _name_of(value) -> str:
    """The dtype name of any accepted spelling (raises UserError for anything else)."""
    if isinstance(value, str):
        return _SHORT_NAMES.get(str(value), str(value))
    if isinstance(value, type) and value in _PYTHON_TYPES:
        return _PYTHON_TYPES[value]
    ctor_name = getattr(value, "_dtype_str", None)  # TVM's script constructors, tvm.script.tirx.float16
    if isinstance(ctor_name, str):
        return ctor_name
    if value is _tirx.boolean:
        return "bool"
    if type(value).__module__.startswith("torch"):
        text = str(value).removeprefix("torch.")
        name = _FROM_TORCH.get(text, text)
        if name in _TORCH_NAMES:
            return name
    try:
        import numpy as np

        if isinstance(value, np.dtype) or (isinstance(value, type) and issubclass(value, np.generic)):
            return tvm_ffi.dtype._NUMPY_DTYPE_TO_STR.get(np.dtype(value), np.dtype(value).name)
    except ImportError:  # pragma: no cover (numpy comes with torch)
        pass
    raise UserError(f"expected a dtype such as 'float16' or T.float16, got {value!r}")


# torch's names for the dtypes it has, where they differ from ours.
_FROM_TORCH = {"float4_e2m1fn_x2": "float4_e2m1fnx2", "half": "float16", "float": "float32", "double": "float64"}
_TORCH_NAMES = {
    "bool",
    "int8",
    "int16",
    "int32",
    "int64",
    "uint8",
    "uint16",
    "uint32",
    "uint64",
    "float16",
    "bfloat16",
    "float32",
    "float64",
    "float8_e4m3fn",
    "float8_e4m3fnuz",
    "float8_e5m2",
    "float8_e5m2fnuz",
    "float8_e8m0fnu",
    "float4_e2m1fnx2",
}


def canonical(value) -> str:
    """The dtype string the IR uses for any accepted spelling (a plain `str`).

    Raises:
        UserError: if `value` is not a dtype, or names one that cannot be compiled here.
    """
    name = str(dtype(value))
    stored = _STORED_AS.get(name)
    if stored is not None:
        if stored[0] is None:
            raise UserError(stored[1])
        return stored[0]
    return _IR_NAME.get(name, name)


# Dtypes whose torch type has another name: int4 and fp4 travel as bytes (two values per byte for
# fp4, as torch's float4_e2m1fn_x2), tf32 as float32.
_TO_TORCH = {
    "float8_e4m3": "float8_e4m3fn",
    "int4": "int8",
    "float4_e2m1fn": "float4_e2m1fn_x2",
    "float4_e2m1fnx2": "float4_e2m1fn_x2",
    "tfloat32": "float32",
}


def to_torch(value):
    """The torch dtype of a dtype in any spelling.

    Raises:
        UserError: if torch has no such dtype.
    """
    import torch

    name = str(dtype(value))
    torch_name = _TO_TORCH.get(name, name)
    if name in ("float4_e2m1fn", "float4_e2m1fnx2") and not hasattr(torch, torch_name):
        torch_name = "int8"  # torch before 2.8 has no fp4 storage type
    result = getattr(torch, torch_name, None)
    if not isinstance(result, torch.dtype):
        raise UserError(f"dtype {name} has no torch equivalent")
    return result


def bits(value) -> int:
    """Width of one element in bits."""
    return dtype(value).bits


def bits_with_lanes(value) -> int:
    """Width of one element in bits, vector lanes included (a buffer of float32x4 has 128-bit
    elements once the vectorizer rewrote it)."""
    d = dtype(value)
    return d.bits * d.lanes


# ---- an expression's dtype ----------------------------------------------------------------------
# Code written for the public TileLang reads `x.dtype` of any expression (`assert val.dtype ==
# T.uint8` in a dequantization helper given `B_local[i, j]`); TVM 0.27's expressions carry their
# type as `x.ty`, and its Var answers `.dtype` for buffers only. Expressions get a `dtype` property
# giving their type as a dtype object; a buffer's `.dtype` stays TVM's.


def _expr_dtype(expr) -> dtype:
    from tvm import ir

    ty = expr.ty
    if isinstance(ty, ir.PrimType):
        return dtype(str(ty.dtype))
    if isinstance(ty, ir.PointerType):
        return dtype("handle")
    raise AttributeError(f"a {type(expr).__name__} of type {ty} has no dtype")


def _install_expr_dtype():
    from tvm import ir

    buffer_dtype = ir.Var.__dict__.get("dtype")  # TVM's property for buffers (a Var with BufferType)

    def var_dtype(var):
        try:
            return buffer_dtype.fget(var)
        except AttributeError:  # a scalar variable, not a buffer
            return _expr_dtype(var)

    ir.Expr.dtype = property(_expr_dtype)
    if isinstance(buffer_dtype, property):
        ir.Var.dtype = property(var_dtype)


_install_expr_dtype()


# ---- the dtype objects ------------------------------------------------------------------------------

_SCALARS = [
    "bool",
    "int4",
    "int8",
    "int16",
    "int32",
    "int64",
    "uint8",
    "uint16",
    "uint32",
    "uint64",
    "float16",
    "float32",
    "float64",
    "bfloat16",
    "float8_e3m4",
    "float8_e4m3",
    "float8_e4m3b11fnuz",
    "float8_e4m3fn",
    "float8_e4m3fnuz",
    "float8_e5m2",
    "float8_e5m2fnuz",
    "float8_e8m0fnu",
    "float6_e2m3fn",
    "float6_e3m2fn",
    "float4_e2m1fn",
    "tfloat32",
    "float4_e2m1_unpacked",
]
# Vector types, as TileLang lists them: 2 to 64 lanes of the integer, float and fp8 types.
_VECTOR_BASES = [
    "int8",
    "int16",
    "int32",
    "int64",
    "uint8",
    "uint16",
    "uint32",
    "uint64",
    "float16",
    "float32",
    "float64",
    "float8_e3m4",
    "float8_e4m3",
    "float8_e4m3b11fnuz",
    "float8_e4m3fn",
    "float8_e4m3fnuz",
    "float8_e5m2",
    "float8_e5m2fnuz",
    "float8_e8m0fnu",
    "float6_e2m3fn",
    "float6_e3m2fn",
    "float4_e2m1fn",
]
_LANES = (2, 4, 8, 16, 32, 64)
_C_NAMES = ("float", "double", "half", "int", "long", "short", "uint")

DTYPES: dict[str, dtype] = {name: dtype(name) for name in _SCALARS}
DTYPES.update({f"{b}x{n}": dtype(f"{b}x{n}") for b in _VECTOR_BASES for n in _LANES})
DTYPES["bfloat16x2"] = dtype("bfloat16x2")
# TileLang's C-style names (T.float is float32, T.int int32, ...).
DTYPES.update({short: DTYPES[full] for short, full in _SHORT_NAMES.items() if short in _C_NAMES})
DTYPES["boolean"] = DTYPES["bool"]

globals().update(DTYPES)

__all__ = ["dtype", *DTYPES]  # what `T` re-exports; canonical, to_torch and bits are imported by name

"""What a compiled kernel knows about its parameters, and the checks of a call's arguments.

The host launcher already checks every tensor (dtype, rank, shape, strides, device) at no Python
cost. When it rejects a call, `diagnose` re-checks the arguments in Python to say, in the user's
terms, which parameter is wrong, what was expected and what came.

A dimension of a parameter is an int, or, for a dynamic dimension (`T.dynamic("m")`), a string: the
symbol's name ("m") or an expression of symbols ("m * 2"). Strings survive the JSON of the disk
cache unchanged. At call time `bind_symbols` reads each symbol's size from the tensors that have it
as a whole dimension (and checks that they agree); `resolve_shape` then gives the concrete shape of
an output to allocate.
"""

from __future__ import annotations

import ast
import functools
import math
from dataclasses import dataclass

from tilelang.jit.exported import CALLS, evaluate_dim, parse_dim

# A tensor of 4-bit floats is torch's float4_e2m1fn_x2: two values per byte, the last dimension
# halved. The kernel takes its bytes (transform/pack_fp4_tensors.py), passed as a uint8 view.
FP4 = "float4_e2m1fn"
_FP4_TORCH = ("float4_e2m1fnx2", "float4_e2m1fn", "uint8")  # (canonical names of what may carry fp4)


def storage_shape(param, shape) -> tuple:
    """The torch shape of a tensor holding `param` of logical shape `shape`."""
    if param.dtype != FP4 or not shape:
        return tuple(shape)
    return (*shape[:-1], shape[-1] // 2)


def as_launched(param, arg):
    """`arg` as the launcher takes it: an fp4 tensor as its bytes."""
    if param.dtype == FP4 and hasattr(arg, "view") and hasattr(arg, "dtype"):
        import torch

        return arg.view(torch.uint8)
    return arg


# The largest size a symbol of each dtype holds (the launcher reads sizes into variables of that type).
_SYMBOL_MAX = {"int32": 2**31 - 1, "int64": 2**63 - 1}


@dataclass(frozen=True)
class Param:
    """One kernel parameter: a tensor of a dtype and a shape whose dimensions may be symbolic."""

    name: str
    shape: tuple  # per dimension: int, or str (a symbol's name, or an expression of symbols)
    dtype: str
    symbols: tuple = ()  # ((symbol name, dtype), ...) of the symbols in `shape`; () if not recorded
    # "tensor"; "scalar" (`n: T.int32`: a Python number, shape ()); "pointer" (`p: T.ptr(...)`: a
    # tensor whose data address is passed, or the address as an int, shape ())
    kind: str = "tensor"

    def describe(self) -> str:
        if self.kind == "scalar":
            return f"a Python {_SCALAR_TYPES[_scalar_class(self.dtype)][0]} ({self.dtype})"
        if self.kind == "pointer":
            return "a CUDA tensor (its data address is passed) or a device address as an int"
        return f"a CUDA tensor of shape {format_shape(self.shape)} and dtype {self.dtype}"

    @functools.cached_property
    def symbol_dims(self) -> tuple:
        """((dimension, symbol name), ...) of the dimensions that are a whole symbol."""
        return tuple((d, s) for d, s in enumerate(self.shape) if isinstance(s, str) and s.isidentifier())

    @functools.cached_property
    def expression_dims(self) -> tuple:
        """((dimension, expression), ...) of the dimensions computed from symbols."""
        return tuple((d, s) for d, s in enumerate(self.shape) if isinstance(s, str) and not s.isidentifier())

    def concrete_shape(self, sizes: dict) -> tuple:
        """The shape with every symbol replaced by its size in `sizes`; KeyError names a missing one."""
        from tilelang.jit.exported import evaluate_dim

        return tuple(d if isinstance(d, int) else evaluate_dim(str(d), sizes) for d in self.shape)

    @functools.cached_property
    def is_static(self) -> bool:
        return all(isinstance(s, int) for s in self.shape)

    def to_json(self) -> dict:
        """The parameter for a disk-cache entry (JSON-serializable)."""
        out = {"name": self.name, "shape": list(self.shape), "dtype": self.dtype, "symbols": dict(self.symbols)}
        if self.kind != "tensor":
            out["kind"] = self.kind
        return out

    @staticmethod
    def from_json(data: dict) -> Param:
        symbols = tuple(data.get("symbols", {}).items())
        return Param(data["name"], tuple(data["shape"]), data["dtype"], symbols, data.get("kind", "tensor"))


# What a scalar parameter of each dtype class takes from Python: (word for errors, accepted types).
_SCALAR_TYPES = {"int": ("int", (int,)), "float": ("float", (int, float)), "bool": ("bool", (bool, int))}


def _scalar_class(dtype: str) -> str:
    if dtype == "bool":
        return "bool"
    return "float" if dtype.startswith(("float", "bfloat")) else "int"


def format_shape(shape) -> str:
    """`[m, 64]`: a shape as the user wrote it (symbols unquoted)."""
    return "[" + ", ".join(str(s) for s in shape) + "]"


def params_of(func) -> list[Param]:
    from tvm import ir, tirx

    from tilelang.dtypes import canonical
    from tilelang.errors import UserError
    from tilelang.language.symbolics import dim_text

    out = []
    for p in func.params:
        if not tirx.is_buffer_var(p):
            ty = p.ty
            dtype = str(ty.dtype) if isinstance(ty, ir.PrimType) else "handle"
            if dtype == "handle":  # `p: T.ptr(...)`
                out.append(Param(p.name, (), "handle", kind="pointer"))
            elif dtype.startswith(("int", "uint", "float", "bfloat", "bool")) and "x" not in dtype:
                out.append(Param(p.name, (), canonical(dtype), kind="scalar"))  # `n: T.int32`
            else:
                raise UserError(f"kernel parameter '{p.name}' has type {dtype}, which the launcher cannot pass")
            continue
        shape = tuple(dim_text(s) for s in p.shape)
        symbols = {}
        for dim in p.shape:
            if not isinstance(dim, int):
                for v in _symbols_in(dim):
                    symbols[v.name] = str(v.ty.dtype)
        out.append(Param(p.name, shape, canonical(str(p.dtype)), tuple(symbols.items())))
    return out


def _symbols_in(expr) -> list:
    import tvm_ffi
    from tvm import ir, tirx

    found = []
    tvm_ffi.structural_walk(expr, [(ir.Var, found.append)])
    return [v for v in found if not tirx.is_buffer_var(v)]


# ---- checks of a call ----------------------------------------------------------------------------


def _describe_arg(arg) -> str:
    try:
        import torch

        if isinstance(arg, torch.Tensor):
            dtype = str(arg.dtype).removeprefix("torch.")
            layout = "" if arg.is_contiguous() else ", non-contiguous"
            return f"a {arg.device.type} tensor of shape {list(arg.shape)} and dtype {dtype}{layout}"
    except ImportError:
        pass
    return f"{type(arg).__name__} {arg!r}"[:200]


def _where(param: Param, position: int, kernel_name: str) -> str:
    return f"{kernel_name}: parameter '{param.name}' (argument #{position})"


_DEVICES = {"cuda": "a CUDA device", "cpu": "the CPU"}


def _problems(param: Param, arg, device: str | None = "cuda") -> list[str]:
    """What is wrong with `arg` as `param`, on its own (symbols shared with others are not checked).
    `device`: the device type the kernel runs on ("cuda", "cpu"), or None/False not to check it."""
    from tilelang.dtypes import canonical

    problems = []
    got_dtype = canonical(arg.dtype)
    if got_dtype != param.dtype and not (param.dtype == FP4 and got_dtype in _FP4_TORCH):
        problems.append(f"dtype {got_dtype} instead of {param.dtype}")
    shape = logical_shape(param, arg.shape)
    if arg.dim() != len(param.shape):
        problems.append(f"{arg.dim()} dimensions instead of {len(param.shape)}")
    elif any(isinstance(want, int) and want != got for want, got in zip(param.shape, shape)):
        problems.append(f"shape {list(shape)} instead of {format_shape(param.shape)}")
    if device and arg.device.type != device:
        problems.append(f"device {arg.device} instead of {_DEVICES.get(device, device)}")
    if not arg.is_contiguous():
        problems.append("a non-contiguous layout (call .contiguous() first)")
    return problems


def check_argument(param: Param, arg, position: int, kernel_name: str, device: str | None = "cuda") -> None:
    """Raise ValueError if `arg` cannot be passed as `param` (its dynamic dimensions may be any
    size here; `bind_symbols` checks that tensors sharing a symbol agree). A scalar parameter takes
    a Python number that fits its dtype; a pointer parameter a tensor or an int address."""
    import torch

    where = _where(param, position, kernel_name)
    if param.kind == "scalar":
        accepted = _SCALAR_TYPES[_scalar_class(param.dtype)][1]
        if not isinstance(arg, accepted) or (isinstance(arg, bool) and param.dtype != "bool"):
            raise ValueError(f"{where} expects {param.describe()}, got {_describe_arg(arg)}")
        if param.dtype in _SYMBOL_MAX and not -_SYMBOL_MAX[param.dtype] - 1 <= arg <= _SYMBOL_MAX[param.dtype]:
            raise ValueError(f"{where} expects {param.describe()}, got {arg}, which does not fit in {param.dtype}")
        return
    if param.kind == "pointer":
        if isinstance(arg, bool) or not isinstance(arg, (int, torch.Tensor)):
            raise ValueError(f"{where} expects {param.describe()}, got {_describe_arg(arg)}")
        if device and isinstance(arg, torch.Tensor) and arg.device.type != device:
            raise ValueError(f"{where} expects {param.describe()}, got {_describe_arg(arg)}")
        return
    if not isinstance(arg, torch.Tensor):
        raise ValueError(f"{where} expects {param.describe()}, got {_describe_arg(arg)}")
    problems = _problems(param, arg, device)
    if problems:
        raise ValueError(f"{where} expects {param.describe()}, got {_describe_arg(arg)}: " + "; ".join(problems))


def bind_symbols(params: list[Param], args, kernel_name: str = "kernel") -> dict[str, int]:
    """The size of each symbol, read from the arguments that have it as a whole dimension.

    `args` lines up with `params`; an argument may be None (an output not given yet). Raises
    ValueError when two tensors sharing a symbol disagree (naming both parameters, the symbol and
    the two sizes), when a size does not fit the symbol's dtype, or when a dimension computed from
    symbols ("m * 2") does not match. Costs nothing for parameters without symbols.
    """
    values, sources, computed = {}, {}, []
    for k, (param, arg) in enumerate(zip(params, args)):
        if param.is_static or arg is None:
            continue
        shape = _shape_of(param, arg, k, kernel_name)
        for d, name in param.symbol_dims:
            size = int(shape[d])
            if name not in values:
                _check_fits(param, d, name, size, k, kernel_name)
                values[name], sources[name] = size, (param, d, k, shape)
            elif values[name] != size:
                raise ValueError(_disagreement(name, sources[name], (param, d, k, shape), kernel_name))
        _check_offsets_fit(param, shape, k, kernel_name)
        if param.expression_dims:
            computed.append((k, param, shape))
    for k, param, shape in computed:  # once every symbol is known
        for d, expression in param.expression_dims:
            try:
                want = evaluate_dim(expression, values)
            except KeyError:
                continue  # a symbol no argument gave (the launcher reports it)
            if int(shape[d]) != want:
                given = ", ".join(f"{n} = {values[n]}" for n in _names(expression))
                raise ValueError(
                    f"{_where(param, k, kernel_name)} has size {int(shape[d])} in dimension {d} "
                    f"(shape {list(shape)}), but that dimension is {expression} = {want} with {given}"
                )
    return values


def _shape_of(param, arg, position, kernel_name):
    """The logical shape of `arg`, which has `param`'s rank; otherwise check_argument raises the full story."""
    shape = getattr(arg, "shape", None)
    if shape is None or len(shape) != len(param.shape):
        check_argument(param, arg, position, kernel_name)
    return logical_shape(param, shape)


def logical_shape(param, shape) -> tuple:
    """The logical shape of a tensor of torch shape `shape` holding `param` (fp4: two values a byte)."""
    if param.dtype != FP4 or not len(shape):
        return tuple(shape)
    return (*shape[:-1], shape[-1] * 2)


def _names(expression: str) -> list[str]:
    return sorted({n.id for n in ast.walk(parse_dim(expression)) if isinstance(n, ast.Name) and n.id not in CALLS})


def _check_fits(param, d, name, size, position, kernel_name):
    if size <= _SYMBOL_MAX["int32"]:
        return  # fits any symbol
    dtype = dict(param.symbols).get(name)
    if dtype in _SYMBOL_MAX and size > _SYMBOL_MAX[dtype]:
        raise ValueError(
            f"{_where(param, position, kernel_name)} has size {size} in dimension {d}, which is symbol "
            f"'{name}' of dtype {dtype}; sizes of 2**31 or more need T.dynamic('{name}', 'int64')"
        )


def _check_offsets_fit(param, shape, position, kernel_name):
    """A tensor whose sizes are int32 symbols and constants is addressed with int32 offsets (the kernel
    was compiled not knowing its size): 2**31 elements or more would wrap to other addresses."""
    dtypes = dict(param.symbols)
    if not dtypes or "int64" in dtypes.values():
        return
    elements = math.prod(int(n) for n in shape)
    if elements <= _SYMBOL_MAX["int32"]:
        return
    name = sorted(dtypes)[0]
    raise ValueError(
        f"{_where(param, position, kernel_name)} has {elements} elements (shape {list(shape)}), 2**31 or more; its "
        f"sizes are int32 symbols and constants, so the kernel addresses it with int32 offsets, which would wrap. "
        f"Declare its size T.dynamic('{name}', 'int64') for int64 offsets"
    )


def _disagreement(name, first, second, kernel_name) -> str:
    (p1, d1, k1, s1), (p2, d2, k2, s2) = first, second
    return (
        f"{kernel_name}: parameters '{p1.name}' and '{p2.name}' share the dynamic dimension '{name}', but "
        f"'{p1.name}' (argument #{k1}, shape {list(s1)}) has {name} = {int(s1[d1])} in dimension {d1} and "
        f"'{p2.name}' (argument #{k2}, shape {list(s2)}) has {name} = {int(s2[d2])} in dimension {d2}; "
        f"tensors sharing a symbol must have the same size there"
    )


def resolve_shape(param: Param, bindings: dict) -> tuple:
    """The concrete shape of `param` (an output to allocate) given the symbol sizes `bindings`.

    Raises ValueError when a symbol of its shape is not in `bindings` (no input tensor has it).
    """
    if param.is_static:
        return param.shape
    try:
        return tuple(evaluate_dim(dim, bindings) for dim in param.shape)
    except KeyError as missing:
        name = missing.args[0]
        raise ValueError(
            f"cannot allocate output '{param.name}' of shape {format_shape(param.shape)}: no input tensor has "
            f"the dynamic dimension '{name}', so its size is unknown; pass '{param.name}' as an input "
            f"(leave it out of out_idx)"
        ) from None


def diagnose(params: list[Param], args, kernel_name: str, device: str = "cuda") -> None:
    """Raise the first user-facing ValueError about `args`; return if all of them look right
    (`device`: the device type the kernel runs on, "cuda" or "cpu").

    Order: each tensor on its own (type, dtype, rank, fixed dimensions, layout), then the dynamic
    dimensions the tensors share, then where they live.
    """
    if len(args) != len(params):
        names = ", ".join(p.name for p in params)
        raise ValueError(f"{kernel_name} takes {len(params)} arguments ({names}), got {len(args)}")
    for k, (param, arg) in enumerate(zip(params, args)):
        check_argument(param, arg, k, kernel_name, device=None)
    bind_symbols(params, args, kernel_name)
    devices = set()
    for k, (param, arg) in enumerate(zip(params, args)):
        check_argument(param, arg, k, kernel_name, device=device)
        if param.kind == "tensor":
            devices.add(arg.device)
    if len(devices) > 1:
        raise ValueError(f"{kernel_name}: all tensors must be on one device, got {sorted(map(str, devices))}")


def as_pointer(arg):
    """The value a pointer parameter receives for `arg`: a tensor's data address (not the tensor
    itself: the launcher would pass its DLTensor), or an int taken as an address."""
    import ctypes

    address = arg if isinstance(arg, int) else arg.data_ptr()
    return ctypes.c_void_p(address)

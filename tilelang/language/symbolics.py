"""Dynamic dimensions: `T.dynamic("m")` names a tensor dimension whose size is known only at call time.

One compiled kernel serves every size. The host launcher reads a symbol from the first tensor that
has it as a whole dimension, checks that every other tensor sharing it agrees, and passes it to the
kernels; global accesses past a tensor's edge are predicated (`legalize_safe_memory_access`).

    M = T.dynamic("m")

    @T.prim_func
    def main(A: T.Tensor((M, 64), "float16"), B: T.Tensor((M, 64), "float16")):
        with T.Kernel(T.ceildiv(M, 128), threads=128) as bx:
            T.copy(A[bx * 128, 0], B[bx * 128, 0])        # the last tile is predicated

A dimension may also be an expression of symbols (`T.Tensor((M * 2,), ...)`), as long as each
symbol is a whole dimension of some tensor: that is where the launcher reads it.
"""

from __future__ import annotations

import inspect
import keyword
import re

import tvm_ffi
from tvm import ir, tirx

from tilelang.dtypes import canonical
from tilelang.errors import UserError, format_location

SYMBOL_DTYPES = ("int32", "int64")


def dynamic(name: str, dtype="int32"):
    """A dynamic dimension (a symbol) for tensor shapes and kernel code.

    Args:
        name: the symbol's name, a Python identifier ("m"). Several comma-separated names
            ("m, n") give a tuple of symbols.
        dtype: "int32" (default) or "int64"; sizes of 2**31 or more need "int64".

    Errors:
        UserError if a name is not an identifier or the dtype is not int32/int64.

    Example:
        M = T.dynamic("m")
        def main(A: T.Tensor((M, K), "float16"), C: T.Tensor((M, N), "float16")): ...
            with T.Kernel(T.ceildiv(N, 128), T.ceildiv(M, 128), threads=128) as (bx, by): ...
    """
    if not isinstance(name, str):
        raise UserError(f"T.dynamic: the name must be a string such as 'm', got {name!r}")
    dtype = canonical(dtype)
    if dtype not in SYMBOL_DTYPES:
        raise UserError(f"T.dynamic('{name}'): dtype must be int32 or int64, got {dtype}")
    names = [n.strip() for n in name.split(",")]
    for n in names:
        if not n.isidentifier() or keyword.iskeyword(n):
            raise UserError(f"T.dynamic: '{n}' is not a valid symbol name; use an identifier such as 'm' or 'seq_len'")
    symbols = tuple(tirx.Var(n, dtype) for n in names)
    return symbols[0] if len(symbols) == 1 else symbols


def symbolic(name: str, dtype="int32"):
    """TileLang's older spelling of `T.dynamic`; the same symbol."""
    return dynamic(name, dtype)


# ---- checks right after tracing -------------------------------------------------------------------


def _vars_of(expr) -> list:
    found = []
    tvm_ffi.structural_walk(expr, [(ir.Var, found.append)])
    return [v for v in found if not tirx.is_buffer_var(v)]


def dim_text(expr) -> str | int:
    """A tensor dimension as the user wrote it: an int, a symbol's name, or a Python expression of
    symbols ("m * 2", "(m + 127) // 128"), which `jit/params.py` evaluates at call time.

    Raises UserError for a dimension that uses anything but + - * // % min max on ints and symbols.
    """
    if isinstance(expr, int):
        return expr
    if isinstance(expr, tirx.IntImm):
        return int(expr.value)
    return _text(expr, top=True)


_INFIX = {tirx.Add: "+", tirx.Sub: "-", tirx.Mul: "*", tirx.FloorDiv: "//", tirx.FloorMod: "%"}


def _text(expr, top: bool = False) -> str:
    if isinstance(expr, tirx.IntImm):
        return str(int(expr.value))
    if isinstance(expr, ir.Var):
        return expr.name
    if isinstance(expr, tirx.Cast) and str(expr.ty.dtype).startswith("int"):
        return _text(expr.value, top)
    for kind, op in _INFIX.items():
        if isinstance(expr, kind):
            text = f"{_text(expr.a)} {op} {_text(expr.b)}"
            return text if top else f"({text})"
    if isinstance(expr, (tirx.Min, tirx.Max)):
        name = "min" if isinstance(expr, tirx.Min) else "max"
        return f"{name}({_text(expr.a)}, {_text(expr.b)})"
    raise UserError(
        f"a tensor dimension may combine symbols with + - * // % min and max only; got {expr} ({type(expr).__name__})"
    )


def check_symbols(func, where: str = "") -> None:
    """Check the symbols of a traced kernel's tensor shapes (`where`: the kernel's location, for errors).

    Each symbol must be a whole dimension of at least one tensor (the launcher reads it there), and
    two different symbols may not share a name (their sizes could not be told apart in errors).
    """

    def error(message):
        return UserError(message + ("\n" + where if where else ""))

    whole, used, by_name = {}, {}, {}
    for p in func.params:
        if not tirx.is_buffer_var(p):
            continue
        for d, dim in enumerate(p.shape):
            if isinstance(dim, tirx.IntImm):
                continue
            dim_text(dim)  # only arithmetic the call-time checks can evaluate
            if isinstance(dim, ir.Var):
                whole.setdefault(dim, (p.name, d))
            for v in _vars_of(dim):
                used.setdefault(v, (p.name, d, dim))
                other = by_name.setdefault(v.name, v)
                if not other.same_as(v):
                    raise error(
                        f"two different symbols are named '{v.name}' (T.dynamic was called twice with that "
                        f"name); create the symbol once and use it in every shape that shares the size"
                    )
    for v, (name, d, dim) in used.items():
        if v not in whole:
            raise error(
                f"symbol '{v.name}' appears in the shape of '{name}' only inside the expression "
                f"{dim_text(dim)} (dimension {d}); at least one tensor must have '{v.name}' as a whole "
                f"dimension, which is where the launcher reads its value"
            )


def explain_undefined(message: str, func=None) -> str:
    """TVM's parse error for a variable the kernel uses but never defines, reworded: in a kernel
    this is nearly always a T.dynamic symbol that no tensor shape has. It points at the kernel's
    first line using the symbol when `func` (the kernel's Python function) shows one, else where TVM
    does (the decorator). Other messages pass through."""
    found = re.search(r"undefined variable (\w+)", message)
    if not found:
        return message
    location = message[message.index("\n -->") :] if "\n -->" in message else ""
    use = _first_use(func, found.group(1)) if func is not None else ""
    return (
        f"'{found.group(1)}' is used in the kernel but is not defined there; if it is a T.dynamic symbol, "
        f"make it a whole dimension of some T.Tensor parameter: the launcher reads its value from that "
        f"tensor's shape" + (f"\n{use}" if use else location)
    )


def _first_use(func, symbol: str) -> str:
    """The location (`format_location`) of the first statement of `func`'s body that names a Python
    variable holding the symbol `symbol` (a tirx.Var of that name), or ''."""
    try:
        bound = inspect.getclosurevars(func)
        lines, start = inspect.getsourcelines(func)
    except (TypeError, OSError):
        return ""
    scope = {**bound.globals, **bound.nonlocals}
    names = [n for n, v in scope.items() if isinstance(v, tirx.Var) and v.name == symbol]
    if not names:
        return ""
    pattern = re.compile(r"\b(" + "|".join(map(re.escape, names)) + r")\b")
    body = next((k + 1 for k, line in enumerate(lines) if line.lstrip().startswith("def ")), 0)
    for k in range(body, len(lines)):
        if pattern.search(lines[k]):
            return format_location(func.__code__.co_filename, start + k)
    return ""

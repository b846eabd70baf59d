"""TVM as code written for the public TileLang sees it: `from tilelang import tvm as tvm`.

The public TileLang ships a fork of TVM and re-exports it as `tilelang.tvm`; code written against
it reaches TIR as `tvm.tir` (older releases) or `tvm.tirx` (newer), and names expressions
`PrimExpr`. This tilelang runs on apache-tvm 0.27, whose TIR namespace is `tvm.tirx` and whose
expression base class is `tvm.ir.Expr`. This module is that TVM, unchanged (every attribute is
TVM's own object: `tvm.DataType`, `tvm.IRModule`, `tvm.ir.Range`, `tvm.target.Target`, ...), seen
through three views that add the fork's names:

    tvm.tir, tvm.tirx   tvm.tirx, plus PrimExpr (= tvm.ir.Expr), Call and StringImm (in tvm.ir in 0.27)
    tvm.ir              tvm.ir, plus PrimExpr, structural_equal and structural_hash (from tvm_ffi)
    tvm.testing         tvm.testing, plus requires_cuda and requires_package (tilelang.testing's)

    from tilelang import tvm as tvm
    isinstance(func, tvm.tir.PrimFunc)      # the same class as tvm.tirx.PrimFunc
    n = tvm.tir.IntImm("int32", 128)

The views are objects in front of the modules. One change reaches TVM itself: the three names the
fork has in `tvm.tirx` and 0.27 keeps in `tvm.ir` (PrimExpr, Call, StringImm) are added to
`tvm.tirx` as aliases, because code written for the public TileLang imports them from TVM directly
(`from tvm import tirx` then `def f(x: tirx.PrimExpr)`); no name TVM has is changed. Names the fork
has and TVM 0.27 lacks (e.g. `tir.stmt_functor`) raise an AttributeError that says what 0.27 has
instead.
"""

from __future__ import annotations

import sys
import types

import tvm as _tvm
import tvm.ir as _ir
import tvm.tirx as _tirx
import tvm_ffi as _tvm_ffi

# Names of the fork that TVM 0.27 does not have, and what to use instead.
_MOVED = {
    "stmt_functor": "TVM 0.27 has no tir.stmt_functor; walk and rewrite IR with tvm_ffi.structural_walk "
    "and tvm_ffi.structural_mutate",
}


class _View(types.ModuleType):
    """A module-like object: its own attributes first, then `base`'s."""

    def __init__(self, name: str, base, extras: dict):
        super().__init__(name, base.__doc__)
        self.__dict__.update(extras)
        self._base = base

    def __getattr__(self, attr):
        if attr in _MOVED:
            raise AttributeError(f"{self.__name__}.{attr}: {_MOVED[attr]}")
        return getattr(self._base, attr)

    def __dir__(self):
        return sorted(set(dir(self._base)) | set(self.__dict__) - {"_base"})


class _TestingView(_View):
    """tvm.testing plus tilelang.testing's requires_cuda and requires_package (the fork's tvm.testing
    has them; 0.27's does not). Both are imported on first use: tvm.testing imports pytest (a
    quarter of a second), and tilelang.testing much of tilelang."""

    def __init__(self, name: str):
        types.ModuleType.__init__(self, name, "tvm.testing, plus requires_cuda and requires_package")

    def __getattr__(self, attr):
        if attr in ("requires_cuda", "requires_package"):
            from tilelang import testing as tilelang_testing

            return getattr(tilelang_testing, attr)
        if attr == "_base":
            import tvm.testing

            self.__dict__["_base"] = tvm.testing
            return tvm.testing
        return super().__getattr__(attr)


_FORK_NAMES = {"PrimExpr": _ir.Expr, "Call": _ir.Call, "StringImm": _ir.StringImm}
for _name, _value in _FORK_NAMES.items():
    if not hasattr(_tirx, _name):
        setattr(_tirx, _name, _value)

tir = _View(__name__ + ".tir", _tirx, {"PrimExpr": _ir.Expr, "Call": _ir.Call, "StringImm": _ir.StringImm})
tirx = tir
ir = _View(
    __name__ + ".ir",
    _ir,
    {"PrimExpr": _ir.Expr, "structural_equal": _tvm_ffi.structural_equal, "structural_hash": _tvm_ffi.structural_hash},
)
testing = _TestingView(__name__ + ".testing")

# `from tilelang.tvm.tir import PrimFunc` and friends.
for _name, _view in (("tir", tir), ("tirx", tirx), ("ir", ir), ("testing", testing)):
    sys.modules[f"{__name__}.{_name}"] = _view

__version__ = _tvm.__version__


def __getattr__(name: str):
    return getattr(_tvm, name)


def __dir__():
    return sorted(set(dir(_tvm)) | {"tir", "tirx", "ir", "testing"})

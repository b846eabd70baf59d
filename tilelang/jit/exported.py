"""Exported kernels: a built library plus a JSON sidecar, loadable without the compiler.

    kernel.export_library("gemm.so")           # writes gemm.so and gemm.so.json
    gemm = tilelang.load_library("gemm.so")    # elsewhere: needs only torch and tvm_ffi
    C = gemm(A, B)                             # allocates C (out_idx), launches

The library is the one the JIT built (host launcher + embedded cubin, see codegen/cuda.py); the
sidecar records what calling it needs: the function name, the parameters (name, shape, dtype) and
which of them the caller gets back. A dynamic dimension is recorded as a string, the symbol's name
("m") or an expression of symbols ("m * 2"); the sizes of an output's symbols are read from the
inputs that have them as a whole dimension (the launcher checks that those agree).

This file imports only the standard library at import time, and torch and tvm_ffi when a library
is loaded, never tvm or the rest of tilelang, so a deployment can copy this one file and load it
by path (`importlib.util.spec_from_file_location`) in a process where the compiler is absent.
For the same reason it has its own short argument checks instead of sharing tilelang/jit/params.py.
"""

from __future__ import annotations

import ast
import ctypes
import functools
import hashlib
import json
import operator
import os
import shutil
from typing import NamedTuple

FORMAT = "tilelang-exported-kernel"
VERSION = 1


class Param(NamedTuple):
    """One kernel parameter, as the sidecar records it (the fields of tilelang.jit.params.Param)."""

    name: str
    shape: tuple
    dtype: str
    kind: str = "tensor"  # or "scalar" (a Python number), "pointer" (a tensor's address or an int)


def sidecar_path(lib_path: str) -> str:
    """Where the metadata of the library at `lib_path` lives: beside it, with ".json" appended."""
    return os.fspath(lib_path) + ".json"


def _sha256(path: str) -> str:
    with open(path, "rb") as f:
        return hashlib.sha256(f.read()).hexdigest()


def write_library(path: str, built_lib: str, meta: dict) -> None:
    """Copy `built_lib` to `path` and write its sidecar from `meta` (name, params, out_idx, ...)."""
    path = os.fspath(path)
    folder = os.path.dirname(os.path.abspath(path))
    os.makedirs(folder, exist_ok=True)
    shutil.copyfile(built_lib, path)
    record = {"format": FORMAT, "version": VERSION, **meta, "lib_sha256": _sha256(path)}
    with open(sidecar_path(path), "w", encoding="utf-8") as f:
        json.dump(record, f, indent=1)


def load_library(path: str) -> ExportedKernel:
    """Load a kernel written by `JITKernel.export_library(path)`.

    Raises:
        FileNotFoundError: if the library or its sidecar (`<path>.json`) is missing.
        ValueError: if the sidecar is not one this version reads, or the library is not the one
            the sidecar describes (copied over from another export, or truncated).
    """
    path = os.fspath(path)
    meta_path = sidecar_path(path)
    for needed in (path, meta_path):
        if not os.path.exists(needed):
            raise FileNotFoundError(f"tilelang.load_library: {needed} does not exist (export_library writes both)")
    with open(meta_path, encoding="utf-8") as f:
        meta = json.load(f)
    if meta.get("format") != FORMAT or meta.get("version") != VERSION:
        raise ValueError(
            f"tilelang.load_library: {meta_path} is not a version-{VERSION} tilelang export "
            f"(format {meta.get('format')!r}, version {meta.get('version')!r})"
        )
    if _sha256(path) != meta["lib_sha256"]:
        raise ValueError(f"tilelang.load_library: {path} is not the library {meta_path} describes (checksum differs)")
    return ExportedKernel(path, meta)


class ExportedKernel:
    """A loaded exported kernel, called like the JITKernel it came from.

    `kernel(*inputs)` takes the parameters not in `out_idx` as CUDA tensors, allocates the others,
    launches on torch's current stream, and returns the allocated outputs (one tensor, a list
    when there are several, None when there are none).
    """

    def __init__(self, path: str, meta: dict):
        import tvm_ffi

        self.path = path
        self.name = meta["name"]
        self.arch = meta.get("arch")
        self.params = [Param(p["name"], tuple(p["shape"]), p["dtype"], p.get("kind", "tensor")) for p in meta["params"]]
        self.out_idx = list(meta["out_idx"])
        self._in_idx = [k for k in range(len(self.params)) if k not in self.out_idx]
        self.device = "cpu" if self.arch == "cpu" else "cuda"  # the CPU target's libraries: "cpu"
        if self.device == "cpu":
            _load_tvm_runtime()
        # Loading maps the library and binds its function; no GPU is touched until the first call.
        self._module = tvm_ffi.load_module(path)
        self._func = self._module[self.name]

    def __repr__(self) -> str:
        args = ", ".join(f"{p.name}: {p.dtype}{list(p.shape)}" for p in self.params)
        return f"<exported tilelang kernel {self.name}({args}) for {self.arch}, outputs {self.out_idx}>"

    def __call__(self, *inputs):
        import torch

        if len(inputs) != len(self._in_idx):
            names = ", ".join(self.params[k].name for k in self._in_idx)
            raise ValueError(f"{self.name} takes {len(self._in_idx)} input tensors ({names}), got {len(inputs)}")
        device = next((a.device for a in inputs if isinstance(a, torch.Tensor)), None)
        if device is None:  # nothing to allocate the outputs beside: report the first argument
            self._check(self._in_idx[0], inputs[0])
        sizes = self._symbol_sizes(inputs)
        args, outs, it = [], [], iter(inputs)
        for k, p in enumerate(self.params):
            if k in self.out_idx:
                shape = tuple(self._size(dim, sizes, p) for dim in p.shape)
                outs.append(torch.empty(shape, dtype=getattr(torch, p.dtype), device=device))
                args.append(outs[-1])
            elif p.kind == "pointer":
                arg = next(it)
                address = arg.data_ptr() if isinstance(arg, torch.Tensor) else arg
                args.append(ctypes.c_void_p(address) if isinstance(address, int) else address)
            else:
                args.append(next(it))
        try:
            self._func(*args)
        except (ValueError, TypeError):
            # The launcher's own message names argument positions; say which parameter is wrong.
            for k, arg in enumerate(args):
                self._check(k, arg)
            raise
        if not outs:
            return None
        return outs[0] if len(outs) == 1 else outs

    def _symbol_sizes(self, inputs) -> dict:
        """{symbol: size} from the inputs that have a symbol as a whole dimension."""
        sizes = {}
        for k, arg in zip(self._in_idx, inputs):
            shape = getattr(arg, "shape", ())
            for d, dim in enumerate(self.params[k].shape):
                if isinstance(dim, str) and dim.isidentifier() and d < len(shape):
                    sizes.setdefault(dim, int(shape[d]))
        return sizes

    def _size(self, dim, sizes: dict, param: Param) -> int:
        try:
            return evaluate_dim(dim, sizes)
        except KeyError as missing:
            raise ValueError(
                f"{self.name}: cannot allocate output '{param.name}' of shape {list(param.shape)}: no input "
                f"has the dynamic dimension '{missing.args[0]}'"
            ) from None

    def _check(self, k: int, arg) -> None:
        import torch

        p = self.params[k]
        if p.kind != "tensor":
            return  # the launcher's message names the scalar's or pointer's position and type
        kind = "CPU" if self.device == "cpu" else "CUDA"
        where = f"{self.name}: parameter '{p.name}' (argument #{k}) expects a {kind} tensor of shape {list(p.shape)} "
        where += f"and dtype {p.dtype}"
        if not isinstance(arg, torch.Tensor):
            raise ValueError(f"{where}, got {type(arg).__name__} {arg!r}"[:300])
        problems = []
        if arg.dtype != getattr(torch, p.dtype):
            problems.append(f"dtype {str(arg.dtype).removeprefix('torch.')}")
        if arg.dim() != len(p.shape) or any(isinstance(w, int) and w != g for w, g in zip(p.shape, arg.shape)):
            problems.append(f"shape {list(arg.shape)}")
        if arg.device.type != self.device:
            problems.append(f"device {arg.device}")
        if not arg.is_contiguous():
            problems.append("a non-contiguous layout (call .contiguous() first)")
        if problems:
            raise ValueError(f"{where}, got " + ", ".join(problems))


@functools.cache
def _load_tvm_runtime() -> None:
    """TVM's runtime, which a CPU-target library calls (its thread pool): loaded once, globally. (The
    same as `tilelang.codegen.cpu`'s loader: this file cannot import the package.)"""
    import importlib.util

    import tvm_ffi  # noqa: F401  (libtvm_runtime links against libtvm_ffi: loaded first)

    spec = importlib.util.find_spec("tvm")
    ctypes.CDLL(os.path.join(os.path.dirname(spec.origin), "lib", "libtvm_runtime.so"), mode=ctypes.RTLD_GLOBAL)


# Dimension expressions ("m * 2 + 1"), shared with tilelang.jit.params (this file must stay free of
# tilelang imports, so the evaluator lives here). Integer arithmetic only, so a corrupt sidecar or
# cache entry cannot make the loader run code.
_BINARY = {
    ast.Add: operator.add,
    ast.Sub: operator.sub,
    ast.Mult: operator.mul,
    ast.FloorDiv: operator.floordiv,
    ast.Mod: operator.mod,
}
CALLS = {"min": min, "max": max}


@functools.cache
def parse_dim(expression: str):
    return ast.parse(expression, mode="eval").body


def evaluate_dim(dim, sizes: dict) -> int:
    """The size of dimension `dim` (int, symbol or expression) given the symbol sizes; KeyError
    names the first symbol `sizes` lacks."""
    if isinstance(dim, int):
        return dim
    return _evaluate(parse_dim(dim), sizes)


def _evaluate(node, sizes: dict) -> int:
    if isinstance(node, ast.Constant) and isinstance(node.value, int):
        return node.value
    if isinstance(node, ast.Name):
        return sizes[node.id]
    if isinstance(node, ast.BinOp) and type(node.op) in _BINARY:
        return _BINARY[type(node.op)](_evaluate(node.left, sizes), _evaluate(node.right, sizes))
    if isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.USub):
        return -_evaluate(node.operand, sizes)
    if isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id in CALLS:
        return CALLS[node.func.id](*(_evaluate(a, sizes) for a in node.args))
    raise ValueError(f"unsupported dimension expression: {ast.unparse(node)}")

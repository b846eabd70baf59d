"""Calling an eager kernel: from a call's arguments to the kernel specialized for them, and its launch.

A call `matmul(A, B, 128, 128, 32)` is split into its tensor arguments (the parameters declared
`A: T.Tensor(...)`) and its compile-time arguments (the others, plus keywords naming `T.const`
sizes). Two caches, as in TileLang:

1. per compile-time arguments: the prologue run once with symbolic sizes, which says which tensor
   dimension each `T.const` size is read from (`tilelang.language.eager.Specialization`);
2. per sizes read from the tensors: the compiled kernel. A repeated call costs a few dictionary
   lookups and one read of each size from its tensor before the launch.

The first call of a specialization checks every tensor in Python (dtype, rank, shape, device), so
a wrong argument is a clear ValueError before anything is built; later calls rely on the launcher's
own checks, which report through the same messages (`tilelang/jit/params.py`).
"""

from __future__ import annotations

import inspect

from tilelang.dtypes import canonical
from tilelang.errors import UserError
from tilelang.jit.params import Param, bind_symbols, check_argument, logical_shape
from tilelang.language.eager import EagerFunction
from tilelang.language.symbolics import dim_text

_MISSING = inspect.Parameter.empty


def _is_torch_tensor(value) -> bool:
    return hasattr(value, "shape") and hasattr(value, "dtype") and hasattr(value, "device")


def _param(name, buf) -> Param:
    """A declared tensor as a kernel parameter, its sizes by name ("M") where they are symbolic."""
    return Param(name, tuple(dim_text(d) for d in buf.shape), canonical(str(buf.dtype)))


def _frozen(value):
    """`value` as part of a cache key: lists and dicts by content."""
    if isinstance(value, (list, tuple)):
        return tuple(_frozen(v) for v in value)
    if isinstance(value, dict):
        return tuple(sorted((k, _frozen(v)) for k, v in value.items()))
    return value


class EagerKernel:
    """An eager kernel's calls: binds arguments, keeps the two caches, launches."""

    def __init__(self, fn, build):
        """`build(trace, compile_args, sizes, out_idx)` gives the JITKernel of one specialization, calling
        `trace()` for its prim_func unless a cache has the kernel."""
        self.function = EagerFunction(fn)
        self.name = self.function.name
        self.build = build
        params = list(self.function.signature.parameters.values())
        self.names = [p.name for p in params]
        self.index = {n: k for k, n in enumerate(self.names)}
        self.defaults = [p.default for p in params]
        self.tensors = self.function.tensor_params
        self.tensor_index = [self.index[n] for n in self.tensors]
        self.compile_index = [k for k, n in enumerate(self.names) if n not in self.tensors]
        self._templates = {}  # compile-time key -> Specialization (symbolic sizes)
        self._kernels = {}  # (compile-time key, sizes) -> JITKernel

    # ---- binding ------------------------------------------------------------------------------------

    def bind(self, args, kwargs):
        """(values of every parameter, keywords that are not parameters) for a call."""
        if len(args) > len(self.names):
            raise TypeError(f"{self.name}() takes {len(self.names)} arguments, got {len(args)}")
        values = list(args) + self.defaults[len(args) :]
        extra = {}
        for key, value in kwargs.items():
            k = self.index.get(key)
            if k is None:
                extra[key] = value  # a T.const size given by name
            elif k < len(args):
                raise TypeError(f"{self.name}() got multiple values for argument '{key}'")
            else:
                values[k] = value
        return values, extra

    def _compile_key(self, values, extra):
        """The compile-time arguments as a cache key (checked when a key is first seen, in `_plan`)."""
        key = tuple([values[k] for k in self.compile_index])
        if extra:
            key += (tuple(sorted(extra.items())),)
        try:
            hash(key)
        except TypeError:  # lists or dicts among them: by content
            key = _frozen(key)
            try:
                hash(key)
            except TypeError:
                raise UserError(
                    f"{self.name}: the compile-time arguments must be hashable (ints, strings, dtypes, ...), "
                    f"got {[values[k] for k in self.compile_index]}"
                ) from None
        return key

    def _check_compile_args(self, values):
        for k in self.compile_index:
            if values[k] is _MISSING:
                raise TypeError(f"{self.name}() missing required argument: '{self.names[k]}'")
            if _is_torch_tensor(values[k]):
                raise UserError(
                    f"{self.name}: parameter '{self.names[k]}' was given a tensor, but the kernel does not declare "
                    f"it as one; add `{self.names[k]}: T.Tensor((...), dtype)` at the start of the kernel body"
                )

    def _plan(self, key, values, extra):
        """How to read each T.const size of a call: [(name, parameter index or None, dimension, Param)]."""
        plan = self._templates.get(key)
        if plan is None:
            self._check_compile_args(values)
            template = self.function.specialize(self._arguments(values), None)
            unknown = [k for k in extra if k not in template.sizes]
            if unknown:
                sizes = ", ".join(template.sizes) or "none"
                raise TypeError(
                    f"{self.name}() got unexpected keyword arguments {unknown}: they are neither parameters "
                    f"({', '.join(self.names)}) nor T.const sizes ({sizes})"
                )
            declared = {n: _param(n, buf) for n, buf in template.inputs}
            plan = [
                (name, None, 0, None) if src is None else (name, self.index[src[0]], src[1], declared[src[0]])
                for name, src in template.sizes.items()
            ]
            self._templates[key] = plan
        return plan

    def _arguments(self, values) -> dict:
        return {n: (None if k in self.tensor_index else values[k]) for k, n in enumerate(self.names)}

    def _sizes(self, plan, values, extra) -> tuple:
        sizes = []
        for name, k, dim, param in plan:
            if name in extra:
                sizes.append(int(extra[name]))
                continue
            tensor = _MISSING if k is None else values[k]
            if tensor is _MISSING or tensor is None:
                where = "in an output's shape only" if k is None else f"dimension {dim} of '{self.names[k]}'"
                given = "" if k is None else f"tensor '{self.names[k]}' or "
                raise UserError(f"{self.name}: the size '{name}' (T.const) is {where}; pass {given}{name}=<int>")
            shape = getattr(tensor, "shape", None)
            if shape is None or len(shape) != len(param.shape):  # the full story, as a kernel's call tells it
                check_argument(param, tensor, self.tensors.index(param.name), self.name, device=None)
            sizes.append(int(logical_shape(param, shape)[dim]))
        return tuple(sizes)

    # ---- the kernel for a call ------------------------------------------------------------------------

    def kernel(self, args, kwargs, run=False):
        """(JITKernel for the call, the call's input tensors in the kernel's order). A new kernel's
        tensors are checked first (their device too when the call is to `run` it)."""
        values, extra = self.bind(args, kwargs)
        key = self._compile_key(values, extra)
        plan = self._plan(key, values, extra)
        sizes = self._sizes(plan, values, extra)
        inputs = [values[k] for k in self.tensor_index]
        kernel = self._kernels.get((key, sizes))
        if kernel is None:
            named = {name: size for (name, *_), size in zip(plan, sizes)}
            arguments = self._arguments(values)
            n_in = len(self.tensor_index)
            out_idx = list(range(n_in, n_in + len(self.function.returned)))
            kernel = self.build(
                lambda: self.function.prim_func(arguments, named),
                [values[k] for k in self.compile_index],
                {**extra, **named},
                out_idx,
            )
            self._check_inputs(kernel, inputs, device=kernel.device_type if run else None)
            self._kernels[(key, sizes)] = kernel
        return kernel, inputs

    def prim_func(self, args, kwargs):
        """The kernel's TIR for a call (nothing compiled)."""
        values, extra = self.bind(args, kwargs)
        key = self._compile_key(values, extra)
        plan = self._plan(key, values, extra)
        sizes = self._sizes(plan, values, extra)
        return self.function.prim_func(self._arguments(values), {name: size for (name, *_), size in zip(plan, sizes)})

    def _check_inputs(self, kernel, inputs, device):
        torch_inputs = [(k, t) for k, t in zip(kernel._in_idx, inputs) if _is_torch_tensor(t)]
        for position, tensor in torch_inputs:
            check_argument(kernel.params[position], tensor, position, kernel.name, device=device)
        if len(torch_inputs) == len(inputs):
            bind_symbols([kernel.params[k] for k in kernel._in_idx], inputs, kernel.name)

    def __call__(self, args, kwargs):
        kernel, inputs = self.kernel(args, kwargs, run=True)
        if any(t is _MISSING for t in inputs):
            missing = [n for n, t in zip(self.tensors, inputs) if t is _MISSING]
            raise UserError(
                f"{self.name}: calling an eager kernel runs it, so it needs its tensors; {missing} were not given "
                f"as tensors. To compile without running, use {self.name}.compile(...)"
            )
        return kernel(*inputs)

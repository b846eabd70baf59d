"""A user hook on the generated CUDA source, as the public TileLang has it: a function
`(code: str, target) -> str` registered here rewrites the device source of every kernel compiled
afterwards, just before nvcc sees it (and `kernel.get_kernel_source()` shows the result).

    from tilelang.engine.callback import register_cuda_postproc_callback

    @register_cuda_postproc_callback
    def add_note(code, target):
        return "// reviewed\\n" + code

The function is kept in TVM's global function registry under the public TileLang's name
(`tilelang_callback_cuda_postproc`), where the code generator (`codegen/cuda.py`) looks it up, so
code that registers it there directly works too. `unregister_cuda_postproc()` removes it.

While a hook is registered the disk kernel cache is bypassed (neither read nor written): a cached
kernel holds the source of whatever hook, if any, was set when it was built, and a function's
effect cannot be hashed. Kernels already compiled in this process (a `@tilelang.jit` factory's
kernels per argument) are not rebuilt: register the hook before compiling.

HIP, Metal and the public TileLang's C host-source hooks have no counterpart here (CUDA only, and
the host launcher is not a separate C module); their names raise a UserError that says so.
"""

from __future__ import annotations

from collections.abc import Callable

import tvm_ffi

from tilelang.codegen.cuda import POSTPROC_HOOK as CUDA_POSTPROC
from tilelang.codegen.cuda import postproc_hook
from tilelang.errors import UserError

# The hook runs as a TVM function: a UserError raised in it (see `checked` below) crosses the FFI
# back to the compile call, and arrives as a UserError rather than a RuntimeError once registered.
tvm_ffi.register_error("UserError", UserError)


def register_cuda_postproc(func: Callable, override: bool = True) -> None:
    """Register `func(code, target) -> code` as the CUDA source post-processor.

    Raises: UserError if `func` is not callable, or a hook is registered and `override` is False;
    when a kernel is compiled, UserError if `func` does not return a string."""
    if not callable(func):
        raise UserError(f"register_cuda_postproc: expected a function (code, target) -> code, got {func!r}")
    if not override and has_cuda_postproc():
        raise UserError("register_cuda_postproc: a CUDA post-processor is already registered (override=False)")

    def checked(code, target):
        result = func(code, target)
        if not isinstance(result, str):
            name = getattr(func, "__name__", repr(func))
            raise UserError(
                f"the CUDA post-processor {name} returned {type(result).__name__}, not the source code (a str)"
            )
        return result

    tvm_ffi.register_global_func(CUDA_POSTPROC, f=checked, override=True)


def register_cuda_postproc_callback(func=None, override: bool = True):
    """Decorator form of `register_cuda_postproc`, with or without parentheses:
    `@register_cuda_postproc_callback`, `@register_cuda_postproc_callback()`,
    `@register_cuda_postproc_callback(override=False)` (or `(False)`, as the public TileLang
    accepts). Returns the function unchanged."""
    if callable(func):
        register_cuda_postproc(func, override)
        return func
    if func is None or isinstance(func, bool):
        # The public TileLang reads a bool first argument as `override`.
        chosen = func if isinstance(func, bool) else override

        def register(fn):
            register_cuda_postproc(fn, chosen)
            return fn

        return register
    raise UserError(f"register_cuda_postproc_callback: expected a function or override=True/False, got {func!r}")


def unregister_cuda_postproc() -> None:
    """Remove the CUDA post-processor, if any."""
    tvm_ffi.remove_global_func(CUDA_POSTPROC)


def has_cuda_postproc() -> bool:
    return postproc_hook() is not None


def _absent(kind: str, instead: str):
    def refuse(*args, **kwargs):
        raise UserError(f"{kind} post-processing hooks are not supported here: {instead}")

    refuse.__doc__ = f"Not supported here ({kind}): raises UserError. {instead}"
    return refuse


_NOT_CUDA = "this tilelang targets CUDA only; post-process CUDA code with register_cuda_postproc"
_HOST = (
    "the host launcher is generated C++ compiled together with the kernel, not a separate C module; "
    "post-process the device source with register_cuda_postproc"
)
register_hip_postproc = register_hip_postproc_callback = _absent("HIP", _NOT_CUDA)
register_metal_postproc = register_metal_postproc_callback = _absent("Metal", _NOT_CUDA)
register_c_postproc = register_c_postproc_callback = _absent("C host source", _HOST)

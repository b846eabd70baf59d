"""`@tilelang.jit` and `tilelang.compile`: from a kernel to a JITKernel, callable with torch tensors.

`@tilelang.jit` takes three forms of kernel, told apart when it is applied (`JITImpl`):

- lazy: a factory whose compile-time parameters (sizes, tile shapes, dtypes) build and return a
  `@T.prim_func`; calling the factory compiles once per distinct arguments and returns the kernel.
- eager: the decorated function is the kernel body itself, its tensors declared with
  `A: T.Tensor((M, K), dtype)`, sizes with `T.const`, outputs with `T.empty` (see
  `tilelang/language/eager.py`); calling it with tensors compiles for their sizes (once per sizes)
  and runs it, returning the outputs.
- a `@T.prim_func` itself: calling it with tensors compiles once and runs it; without arguments it
  returns the kernel.

`tilelang.compile(func)` compiles a prim_func. A repeated compile of the same function (structurally
equal: the same IR, whether or not the same Python object) with the same options comes from an
in-memory cache, so a module that compiles its kernel on every forward pays a structural hash, not
a compile. `tilelang.disable_cache()` turns that cache off with the disk cache.
"""

from __future__ import annotations

import concurrent.futures
import dataclasses
import functools
import logging

from tilelang.errors import UserError
from tilelang.jit.kernel import JITKernel
from tilelang.jit.options import JITOptions, log_compile, write_debug_sources
from tilelang.log import timed

logger = logging.getLogger("tilelang")

# Compiled kernels by (structural hash, name, out_idx, target, pass configs, compile flags).
_compiled: dict[tuple, list[JITKernel]] = {}


def compile(  # noqa: A001 (TileLang's name)
    func=None,
    out_idx=None,
    execution_backend=None,
    target="auto",
    target_host=None,
    verbose=False,
    pass_configs=None,
    compile_flags=None,
) -> JITKernel:
    """Compile a prim_func into a JITKernel (nvcc runs at its first call).

    Args:
        func: a `@T.prim_func`.
        out_idx: the parameters the kernel allocates and returns (int or list, negative allowed).
        execution_backend: None, "auto", "tvm_ffi" or "cython" (all mean our tvm-ffi launcher).
        target: "auto" (the current GPU), "cuda", or an arch such as "sm_90a".
        target_host: None, "c" or "llvm": the launcher runs on this machine.
        verbose: log the compile at INFO.
        pass_configs: compiler options, e.g. {"tl.enable_fast_math": True}.
        compile_flags: extra nvcc flags (a string or a list of strings).

    Errors:
        UserError for an option that is not supported (naming it), or a func that is not a prim_func.

    Example:
        kernel = tilelang.compile(main, out_idx=[-1], target="sm_90a")
        C = kernel(A, B)
    """
    from tvm import tirx

    if not isinstance(func, tirx.PrimFunc):
        raise UserError(f"tilelang.compile expects a @T.prim_func, got {type(func).__name__}")
    options = JITOptions.make(
        "tilelang.compile",
        out_idx=out_idx,
        target=target,
        target_host=target_host,
        execution_backend=execution_backend,
        verbose=verbose,
        pass_configs=pass_configs,
        compile_flags=compile_flags,
    )
    return compile_with(func, options)


def compile_with(func, options: JITOptions, name: str | None = None, times=None) -> JITKernel:
    """The JITKernel of `func` under `options`: from the in-memory cache when it holds a structurally
    equal function compiled the same way, else compiled (and kept while the cache is enabled)."""
    import tvm_ffi

    from tilelang import cache
    from tilelang.utils.target import determine_target

    target = determine_target(options.target)
    label = name or _name_of(func)
    key = None
    if cache.is_enabled():
        configs = tuple(sorted((str(k), repr(v)) for k, v in (options.pass_configs or {}).items()))
        key = (tvm_ffi.structural_hash(func), name, repr(options.out_idx), str(target), configs, options.compile_flags)
        for kernel in _compiled.get(key, ()):
            if tvm_ffi.structural_equal(kernel.prim_func, func):
                if options.verbose:  # not at INFO otherwise: a module may compile on every forward
                    log_compile(True, "%s: compiled before in this process; reusing that kernel", label)
                return kernel
    log_compile(
        options.verbose,
        "compiling %s for %s (out_idx=%s, pass_configs=%s, compile_flags=%s)",
        label,
        target.attrs.get("arch"),
        options.out_idx,
        options.pass_configs or {},
        list(options.compile_flags),
    )
    kernel = JITKernel(
        func,
        out_idx=options.out_idx,
        target=target,
        pass_configs=options.pass_configs,
        compile_flags=options.compile_flags,
        verbose=options.verbose,
        name=name,
        times=times,
    )
    if key is not None:
        _compiled.setdefault(key, []).append(kernel)
    return kernel


def clear_memory_cache() -> None:
    """Forget the kernels compiled in this process (the disk cache is `tilelang.cache.clear`)."""
    _compiled.clear()


def _name_of(func) -> str:
    attrs = getattr(func, "attrs", None)
    return str(attrs.get("global_symbol", "main")) if attrs else "main"


class JITImpl:
    """What `@tilelang.jit` returns (TileLang's name for it): the kernel, compiled on demand.

    Calling it: a lazy factory returns the JITKernel for its arguments; an eager kernel or a
    prim_func with tensors runs and returns its outputs. `compile`, `get_tir` and
    `get_kernel_source` take the same arguments as a call (for an eager kernel, tensors or their
    sizes by name: `matmul.compile(M=1024, N=1024, K=1024, block_M=128, ...)`).
    """

    def __init__(self, func, options: JITOptions):
        from tvm import tirx

        from tilelang.language.eager import looks_eager

        self.options = options
        self.out_idx = options.out_idx
        self.target = options.target
        self.pass_configs = options.pass_configs
        self.compile_flags = options.compile_flags
        self.verbose = options.verbose
        self.debug_root_path = options.debug_root_path
        self.execution_backend = options.execution_backend
        self.target_host = options.target_host
        self._kernels = {}
        self._by_disk_key = {}
        if isinstance(func, tirx.PrimFunc):
            self.mode, self.factory, self.prim_func = "prim_func", None, func
            self.__name__ = self.__qualname__ = _name_of(func)
            return
        if not callable(func):
            raise UserError(f"@tilelang.jit decorates a kernel function or a @T.prim_func, got {func!r}")
        self.factory = func
        self.__name__ = self.__qualname__ = getattr(func, "__name__", type(func).__name__)
        functools.update_wrapper(self, func)
        if looks_eager(func):
            from tilelang.jit.eager import EagerKernel

            if options.out_idx is not None:
                raise UserError(
                    f"@tilelang.jit(out_idx=...) on '{func.__name__}', a kernel body: its outputs are the "
                    f"tensors it makes with T.empty and returns; drop out_idx"
                )
            self.mode = "eager"
            self.eager = EagerKernel(func, self._build_eager)
        else:
            self.mode = "lazy"

    def __repr__(self) -> str:
        return f"<tilelang.jit {self.mode} kernel {self.__name__}>"

    # ---- calls ----------------------------------------------------------------------------------------

    def __call__(self, *args, **kwargs):
        if self.mode == "eager":
            return self.eager(args, kwargs)
        if self.mode == "prim_func":
            if kwargs:
                raise UserError(f"{self.__name__}: a prim_func is called with its tensors, positionally")
            kernel = self.compile()
            return kernel(*args) if args else kernel
        return self._lazy_kernel(args, kwargs)

    def compile(self, *args, **kwargs) -> JITKernel:
        """The JITKernel for these arguments, without running it."""
        if self.mode == "eager":
            return self.eager.kernel(args, kwargs)[0]
        if self.mode == "prim_func":
            if args or kwargs:
                raise UserError(f"{self.__name__}.compile() takes no arguments: the prim_func is the whole kernel")
            if self._kernels.get(()) is None:
                self._kernels[()] = self._build(self.prim_func, self.__name__)
            return self._kernels[()]
        return self._lazy_kernel(args, kwargs)

    def get_tir(self, *args, **kwargs):
        """The kernel's prim_func for these arguments (traced, not compiled)."""
        if self.mode == "eager":
            return self.eager.prim_func(args, kwargs)
        if self.mode == "prim_func":
            return self.prim_func
        return self._trace(args, kwargs)

    def get_kernel_source(self, *args, **kwargs) -> str:
        """The CUDA source of the kernel for these arguments."""
        return self.compile(*args, **kwargs).get_kernel_source()

    def par_compile(self, configs, num_workers: int | None = None, ignore_error: bool = False) -> list:
        """Compile several configurations (each a dict of keyword arguments or a tuple of positional
        ones), running nvcc for them in parallel; returns their JITKernels in order (None for one that
        failed, with `ignore_error`)."""
        kernels = []
        for config in configs:
            try:
                if isinstance(config, dict):
                    kernels.append(self.compile(**config))
                elif isinstance(config, tuple):
                    kernels.append(self.compile(*config))
                else:
                    raise UserError(f"par_compile: a configuration is a dict or a tuple, got {config!r}")
            except Exception as err:
                if not ignore_error:
                    raise
                logger.warning("par_compile: configuration %r failed: %s", config, err)
                kernels.append(None)

        def build(kernel):
            try:
                kernel._ensure_built()
                return kernel
            except Exception as err:
                if not ignore_error:
                    raise
                logger.warning("par_compile: building %s failed: %s", kernel.name, err)
                return None

        todo = [k for k in kernels if k is not None]
        with concurrent.futures.ThreadPoolExecutor(num_workers) as pool:
            built = dict(zip(map(id, todo), pool.map(build, todo)))
        return [None if k is None else built[id(k)] for k in kernels]

    # ---- the lazy form ----------------------------------------------------------------------------

    def _trace(self, args, kwargs):
        from tvm import tirx

        func = self.factory(*args, **kwargs)
        if not isinstance(func, tirx.PrimFunc):
            raise UserError(
                f"@tilelang.jit factory '{self.__name__}' returned {type(func).__name__}, not a @T.prim_func. A "
                "factory defines a @T.prim_func and returns it; a kernel body declares its tensors "
                "(`A: T.Tensor((M, K), dtype)`) and is called with them"
            )
        return func

    def _lazy_kernel(self, args, kwargs):
        from tilelang import env

        # "auto" means what `tilelang.use_target` says at the time of the call: part of the key.
        target = self.target if self.target not in (None, "auto") else env.default_target()
        key = (args, tuple(sorted(kwargs.items())), repr(target))
        try:
            hit = self._kernels.get(key)
        except TypeError:  # unhashable compile-time argument: compile every time
            key, hit = None, None
        if hit is not None:
            return hit
        kernel = self._from_disk_or_compile(args, kwargs)
        if key is not None:
            self._kernels[key] = kernel
        return kernel

    def _from_disk_or_compile(self, args, kwargs):
        disk_key = self._disk_key(args, kwargs)
        hit = self._load(disk_key)
        if hit is not None:
            return hit
        times = {}
        with timed(times, "parse"):
            func = self._trace(args, kwargs)
        return self._build(func, self.__name__, times, disk_key)

    # ---- shared ------------------------------------------------------------------------------------

    def _disk_key(self, args, kwargs, out_idx=None):
        """The disk-cache key of the kernel for these arguments, or None (cache off, no source, or
        `debug_root_path` set: then the kernel is traced so its program can be written)."""
        from tilelang import cache
        from tilelang.utils.target import determine_target

        if not cache.is_enabled() or self.debug_root_path is not None:
            return None
        try:
            target = determine_target(self.target)
            out_idx = self.out_idx if out_idx is None else out_idx
            return cache.key_for(self.factory, args, kwargs, out_idx, target, self.pass_configs, self.compile_flags)
        except (OSError, TypeError):  # no source to hash (e.g. an interactive session): no disk cache
            return None

    def _build(self, func, name, times=None, disk_key=None, out_idx=None) -> JITKernel:
        from tilelang import cache

        options = self.options if out_idx is None else dataclasses.replace(self.options, out_idx=out_idx)
        kernel = compile_with(func, options, name=name, times=times)
        if disk_key is not None:
            self._by_disk_key[disk_key] = kernel
            if kernel._lib_path is None:
                kernel._on_built = lambda k: cache.store(disk_key, k)
            else:  # compiled before in this process (the in-memory cache): its library exists
                cache.store(disk_key, kernel)
        if self.debug_root_path is not None:
            write_debug_sources(self.debug_root_path, name, kernel, func)
        return kernel

    def _build_eager(self, trace, compile_args, sizes, out_idx) -> JITKernel:
        disk_key = self._disk_key(tuple(compile_args), sizes, out_idx)
        hit = self._load(disk_key)
        if hit is not None:
            return hit
        times = {}
        with timed(times, "parse"):
            func = trace()
        return self._build(func, self.__name__, times, disk_key, out_idx)

    def _load(self, disk_key):
        """The kernel of a disk-cache key: one this object already has, or the disk's, or None."""
        from tilelang import cache

        if disk_key is None:
            return None
        hit = self._by_disk_key.get(disk_key)
        if hit is None:
            entry = cache.load(disk_key)
            if entry is None:
                return None
            hit = JITKernel.from_cache(*entry)
            log_compile(self.verbose, "%s: loaded from the disk cache (entry %s)", self.__name__, disk_key[:16])
            self._by_disk_key[disk_key] = hit
        return hit


def jit(
    func=None,
    *,
    out_idx=None,
    target="auto",
    target_host=None,
    execution_backend=None,
    verbose=None,
    pass_configs=None,
    debug_root_path=None,
    compile_flags=None,
):
    """Decorator for a kernel: a factory returning a `@T.prim_func`, a kernel body, or a prim_func.

    Args:
        out_idx: the parameters the kernel allocates and returns (ints, negative allowed); not for a
            kernel body, whose outputs are its `T.empty` tensors.
        target: "auto" (the current GPU), "cuda", or an arch such as "sm_90a".
        target_host: None, "c" or "llvm" (the launcher runs on this machine).
        execution_backend: None, "auto", "tvm_ffi" or "cython" (all mean our tvm-ffi launcher).
        verbose: log each compile at INFO (what, for which target, cache hits, phase times).
        pass_configs: compiler options, e.g. {"tl.enable_fast_math": True}.
        debug_root_path: a folder; each kernel compiled writes its device, host and TIR sources there.
        compile_flags: extra nvcc flags, e.g. ["-DNDEBUG", "--ptxas-options=-v"].

    Errors:
        UserError naming an option that is not supported and what to use instead.

    Example:
        @tilelang.jit(out_idx=[-1])
        def add(N, block=1024):
            @T.prim_func
            def main(A: T.Tensor((N,), "float32"), B: T.Tensor((N,), "float32"), C: T.Tensor((N,), "float32")):
                ...
            return main
    """
    options = JITOptions.make(
        "@tilelang.jit",
        out_idx=out_idx,
        target=target,
        target_host=target_host,
        execution_backend=execution_backend,
        verbose=verbose,
        pass_configs=pass_configs,
        debug_root_path=debug_root_path,
        compile_flags=compile_flags,
    )

    def wrap(kernel):
        return JITImpl(kernel, options)

    return wrap(func) if func is not None else wrap


__all__ = ["JITImpl", "JITKernel", "compile", "jit"]

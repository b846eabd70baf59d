"""`@tilelang.jit` and `tilelang.compile`: from a kernel factory or a prim_func to a JITKernel.

Lazy form (TileLang's): the decorated factory takes compile-time parameters and returns a
`@T.prim_func`; calling the factory compiles (once per distinct arguments) and returns a JITKernel.
"""

from __future__ import annotations

import functools

from tilelang.jit.kernel import JITKernel
from tilelang.log import timed


def compile(func, out_idx=None, target="auto", pass_configs=None, execution_backend=None, verbose=False):  # noqa: A001
    """Compile a prim_func into a JITKernel.

    Example:
        kernel = tilelang.compile(main, out_idx=[-1], target="sm_90a")
        C = kernel(A, B)
    """
    return JITKernel(func, out_idx=out_idx, target=target, pass_configs=pass_configs)


class _JITFactory:
    """What `@tilelang.jit` returns: call it with compile-time arguments to get a JITKernel."""

    def __init__(self, factory, out_idx, target, pass_configs):
        self.factory = factory
        self.out_idx = out_idx
        self.target = target
        self.pass_configs = pass_configs
        self._kernels = {}
        functools.update_wrapper(self, factory)

    def __call__(self, *args, **kwargs):
        key = (args, tuple(sorted(kwargs.items())))
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
        from tilelang import cache
        from tilelang.utils.target import determine_target

        disk_key = None
        if cache.is_enabled():
            try:
                target = determine_target(self.target)
                disk_key = cache.key_for(self.factory, args, kwargs, self.out_idx, target, self.pass_configs)
            except (OSError, TypeError):  # no source to hash (e.g. an interactive session): no disk cache
                disk_key = None
            if disk_key is not None:
                hit = cache.load(disk_key)
                if hit is not None:
                    return hit
        times = {}
        with timed(times, "parse"):
            func = self.factory(*args, **kwargs)
        kernel = JITKernel(
            func,
            out_idx=self.out_idx,
            target=self.target,
            pass_configs=self.pass_configs,
            name=self.factory.__name__,
            times=times,
        )
        if disk_key is not None:
            kernel._on_built = lambda k: cache.store(disk_key, k)
        return kernel


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
    """Decorator for a kernel factory: `@tilelang.jit(out_idx=[-1])`.

    Args:
        out_idx: the parameters the kernel allocates and returns (ints, negative allowed).
        target: "auto" (the current GPU), "cuda", or an arch such as "sm_90a".
        pass_configs: compiler options, e.g. {"tl.enable_fast_math": True}.
    """

    def wrap(factory):
        return _JITFactory(factory, out_idx, target, pass_configs)

    return wrap(func) if func is not None else wrap

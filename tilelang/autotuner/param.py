"""What a tuning run is given and what it gives back: `CompileArgs`, `ProfileArgs`, `AutotuneResult`.

The names and defaults are public TileLang's (`AutoTuner.compile_args` and `.profile_args` hold
one of each), so code that reads or builds them runs unchanged.
"""

from __future__ import annotations

import dataclasses
import hashlib
import inspect

from tilelang.profiler import TensorSupplyType


@dataclasses.dataclass(frozen=True)
class CompileArgs:
    """How each configuration is compiled: the options of `tilelang.jit` (see there)."""

    out_idx: list[int] | int | None = None
    execution_backend: str | None = None
    target: object = "auto"
    target_host: object = None
    verbose: bool | None = None
    pass_configs: dict | None = None

    def jit_options(self) -> dict:
        """The keyword arguments of `tilelang.jit` these stand for (unset ones left out)."""
        return {f.name: getattr(self, f.name) for f in dataclasses.fields(self) if getattr(self, f.name) is not None}


@dataclasses.dataclass(frozen=True)
class ProfileArgs:
    """How each configuration is checked and timed.

    Attributes:
        warmup, rep: runs before timing, and timed runs (counts: public TileLang's autotuner passes
            them to `do_bench` as `n_warmup`/`n_repeat`).
        timeout: seconds the check and timing of one configuration may take (0 or None: no limit).
        backend: the `do_bench` backend: "event", "cupti" or "cudagraph".
        supply_type: how inputs are drawn (`TensorSupplyType`); unused with `supply_prog`.
        ref_prog: the reference program; each configuration must match it (unless `skip_check`).
        supply_prog: `supply_prog(params) -> list of inputs`, given the kernel's input parameters
            (each with `shape` and `dtype`), instead of random draws.
        rtol, atol, max_mismatched_ratio: the tolerances of the check (see `Profiler.assert_allclose`).
        skip_check: time without checking, even with a `ref_prog`.
        manual_check_prog: `manual_check_prog(outputs, expected)` judges instead of the tolerances;
            it raises to reject a configuration.
        cache_input_tensors: time every configuration on the same inputs (drawn once; drawn anew
            when a configuration's parameters differ in shape or dtype). The check always runs on
            fresh inputs, so a kernel that writes nothing cannot pass on a stale correct output.
    """

    warmup: int = 25
    rep: int = 100
    timeout: float | None = 30
    backend: str = "event"
    supply_type: TensorSupplyType = TensorSupplyType.Auto
    ref_prog: object = None
    supply_prog: object = None
    rtol: float = 1e-2
    atol: float = 1e-2
    max_mismatched_ratio: float = 0.01
    skip_check: bool = False
    manual_check_prog: object = None
    cache_input_tensors: bool = True

    def cache_repr(self) -> str:
        """What of these can change the winner, stable across processes (functions by name and
        source, not address). The timeout is left out: it only decides how long a failure takes."""
        parts = (
            self.warmup,
            self.rep,
            self.backend,
            TensorSupplyType(self.supply_type).name,
            _identity(self.ref_prog),
            _identity(self.supply_prog),
            self.rtol,
            self.atol,
            self.max_mismatched_ratio,
            self.skip_check,
            _identity(self.manual_check_prog),
            self.cache_input_tensors,
        )
        return repr(parts)


@dataclasses.dataclass(frozen=True)
class AutotuneResult:
    """The outcome of `AutoTuner.run()`.

    Attributes:
        latency: the best configuration's time in milliseconds.
        config: the best configuration (a dict of the factory's keyword arguments).
        ref_latency: the reference program's time in milliseconds (None without one).
        libcode: the CUDA source of the best kernel.
        func: its prim_func (None when the kernel came from the disk cache).
        kernel: the best JITKernel, with `.config`, `.latency` and `.ref_latency` set too.
    """

    latency: float | None = None
    config: dict | None = None
    ref_latency: float | None = None
    libcode: str | None = None
    func: object = None
    kernel: object = None


def _identity(fn) -> str | None:
    """A function's name and a hash of its source (its name alone when the source is unknown)."""
    if fn is None:
        return None
    name = getattr(fn, "__qualname__", type(fn).__name__)
    try:
        source = inspect.getsource(fn)
    except (OSError, TypeError):
        return name
    return f"{name}:{hashlib.sha256(source.encode()).hexdigest()[:16]}"

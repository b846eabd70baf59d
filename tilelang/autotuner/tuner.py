"""`@tilelang.autotune`: compile every configuration of a kernel factory, keep the fastest.

    @tilelang.autotune(configs=[{"block_M": 128, "block_N": 128}, {"block_M": 64, "block_N": 256}])
    @tilelang.jit(out_idx=[-1])
    def matmul(M, N, K, block_M=128, block_N=128): ...

    kernel = matmul(1024, 1024, 1024)   # tunes block_M and block_N, returns the fastest JITKernel
    kernel.config, kernel.latency       # {"block_M": 64, "block_N": 256}, 0.031 (milliseconds)
    matmul(1024, 1024, 1024, block_M=64, block_N=256)   # every tuned argument given: no tuning

A call that leaves the tuned arguments out tunes, in this order:
1. the tuning-result cache (results.py): on a hit only the winner is compiled (or loaded);
2. every configuration compiles in parallel, one process per core (parallel.py), into the
   disk kernel cache;
3. then, one at a time, each kernel is loaded, checked against `ref_prog` on fresh random inputs
   and timed by the profiler. Timing waits for all compiles to finish: a CPU busy with nvcc
   delays kernel launches and skews the measurements;
4. the fastest wins, and the result is cached on disk and for the rest of the process.
A configuration that fails to compile, raises when run or does not match the reference is
skipped: each reason is logged through the `tilelang` logger at INFO, and the skipped ones are
summed up in one WARNING.

A kernel that faults on the GPU (an illegal address) leaves the CUDA context unusable, so the
configurations timed after it fail too: such a factory must reject the configuration when traced.
"""

from __future__ import annotations

import dataclasses
import functools
import inspect
import logging

from tilelang.autotuner import parallel, results
from tilelang.profiler import Profiler, TensorSupplyType

logger = logging.getLogger("tilelang")


@dataclasses.dataclass(frozen=True)
class TuneSettings:
    """How candidates are compiled, checked and timed."""

    warmup: float = 25
    rep: float = 100
    timeout: float | None = None
    supply_type: TensorSupplyType = TensorSupplyType.Auto
    ref_prog: object = None
    rtol: float = 1e-2
    atol: float = 1e-2
    max_mismatched_ratio: float = 0.01
    skip_check: bool = False

    def cache_repr(self) -> str:
        """What of the settings can change the winner, without object addresses (stable across
        processes). The compile timeout is left out: it only decides how long a failure takes."""
        ref = None if self.ref_prog is None else getattr(self.ref_prog, "__qualname__", type(self.ref_prog).__name__)
        return repr(
            (self.warmup, self.rep, self.supply_type.name, ref, self.rtol, self.atol, self.max_mismatched_ratio)
            + (self.skip_check,)
        )


def autotune(
    func=None,
    *,
    configs,
    warmup: float = 25,
    rep: float = 100,
    timeout: float | None = None,
    supply_type: TensorSupplyType = TensorSupplyType.Auto,
    ref_prog=None,
    rtol: float = 1e-2,
    atol: float = 1e-2,
    max_mismatched_ratio: float = 0.01,
    skip_check: bool = False,
    _bench=None,
    _workers: int | None = None,
    _device: str = "cuda",
):
    """Decorator stacked above `@tilelang.jit`: calling the factory returns its fastest configuration.

    Args:
        configs: a list of dicts of the factory's keyword arguments, or a callable that takes the
            call's arguments and returns such a list.
        warmup, rep: milliseconds of warm-up and of timed runs per configuration.
        timeout: seconds one configuration may take to compile (None: no limit).
        supply_type: how the random inputs are drawn (`TensorSupplyType`).
        ref_prog: the reference program; when given (and not `skip_check`), each configuration must
            match it within `rtol`/`atol` (`max_mismatched_ratio` of the elements may not) on fresh
            inputs. Its own latency is kept as `kernel.ref_latency`.

    Returns, from a call: the best JITKernel, with `.config` (dict), `.latency` and `.ref_latency`
    (milliseconds; None without a reference).

    Raises, from a call:
        RuntimeError: when no configuration compiled, ran and matched; lists each one's reason.
        ValueError: for an empty configuration list, a configuration naming an argument the
            factory does not take, or a call giving some tuned arguments but not all of them.

    Compiling runs in separate processes started with this interpreter and import path.
    `_bench(profiler, func) -> ms`, `_workers` (0: compile in this process) and `_device` are for
    tests that run the tuner without a GPU.
    """
    settings = TuneSettings(
        warmup=warmup,
        rep=rep,
        timeout=timeout,
        supply_type=TensorSupplyType(supply_type),
        ref_prog=ref_prog,
        rtol=rtol,
        atol=atol,
        max_mismatched_ratio=max_mismatched_ratio,
        skip_check=skip_check,
    )

    def wrap(jit):
        return AutoTuneImpl(jit, configs, settings, bench=_bench, workers=_workers, device=_device)

    return wrap(func) if func is not None else wrap


class AutoTuneImpl:
    """What `@tilelang.autotune` returns: call it like the factory to get the best kernel."""

    def __init__(self, jit, configs, settings: TuneSettings, bench=None, workers=None, device="cuda"):
        if not all(hasattr(jit, a) for a in ("factory", "out_idx", "target", "pass_configs")):
            raise TypeError(f"@tilelang.autotune goes above @tilelang.jit (it tunes a jit kernel factory), got {jit!r}")
        self.jit = jit
        self.configs = configs
        self.settings = settings
        self._bench = bench or self._time
        self._workers = workers
        self._device = device
        self._tuned = {}  # (args, kwargs) -> the best kernel, for this process
        functools.update_wrapper(self, jit.factory)

    def _time(self, profiler, func) -> float:
        """The benchmark: `func` (None: the kernel) on the profiler's inputs, on the GPU."""
        return profiler.do_bench(func, warmup=self.settings.warmup, rep=self.settings.rep)

    @property
    def name(self) -> str:
        return self.jit.factory.__name__

    def __call__(self, *args, **kwargs):
        configs = self._configs(args, kwargs)
        tuned = set().union(*configs)
        given = tuned & (set(inspect.signature(self.jit.factory).bind_partial(*args, **kwargs).arguments) | set(kwargs))
        if given == tuned:  # the caller fixed everything tuning would choose
            return self.jit(*args, **kwargs)
        if given:
            raise ValueError(
                f"{self.name}: {sorted(given)} given while {sorted(tuned - given)} are tuned; "
                f"give all of {sorted(tuned)} to skip tuning, or none of them to tune"
            )
        key = (args, tuple(sorted(kwargs.items())))
        try:
            hit = self._tuned.get(key)
        except TypeError:  # an unhashable argument: tune (the disk record still saves the timing)
            key, hit = None, None
        if hit is None:
            hit = self._tune(args, kwargs, configs)
            if key is not None:
                self._tuned[key] = hit
        return hit

    def _configs(self, args, kwargs) -> list[dict]:
        configs = self.configs(*args, **kwargs) if callable(self.configs) else self.configs
        configs = list(configs)
        if not configs:
            raise ValueError(f"autotune {self.name}: the configuration list is empty")
        params = inspect.signature(self.jit.factory).parameters
        open_kwargs = any(p.kind is inspect.Parameter.VAR_KEYWORD for p in params.values())
        for config in configs:
            if not isinstance(config, dict):
                raise ValueError(f"autotune {self.name}: configurations are dicts of keyword arguments, not {config!r}")
            unknown = [k for k in config if k not in params]
            if unknown and not open_kwargs:
                raise ValueError(f"autotune {self.name}: configuration {config} sets {unknown}, which it does not take")
        return configs

    def _tune(self, args, kwargs, configs):
        from tilelang.utils.target import determine_target

        target = determine_target(self.jit.target)
        key = results.key_for(self.jit, args, kwargs, target, configs, self.settings.cache_repr())
        record = results.load(key, configs) if key is not None and results.enabled() else None
        if record is not None:
            best = self.jit(*args, **kwargs, **configs[record["config_index"]])
            best.config = dict(configs[record["config_index"]])
            best.latency, best.ref_latency = record["latency"], record["ref_latency"]
            logger.info("autotune %s: %s from the tuning cache (%.4f ms)", self.name, best.config, best.latency)
            return best

        errors = self._compile(args, kwargs, configs, target)
        for config, error in zip(configs, errors):
            if error is not None:
                logger.info("autotune %s: %s does not compile: %s", self.name, config, error)
        measured = self._measure(args, kwargs, configs, errors)
        skipped = [(c, e) for c, e in zip(configs, errors) if e is not None]
        if not measured:
            lines = "\n".join(f"  {c}: {_headline(e)}" for c, e in skipped)
            raise RuntimeError(f"autotune {self.name}: none of the {len(configs)} configurations works:\n{lines}")
        if skipped:
            lines = "\n".join(f"  {c}: {_headline(e)}" for c, e in skipped)
            n = len(skipped)
            logger.warning("autotune %s: skipped %d of %d configurations:\n%s", self.name, n, len(configs), lines)

        best_index = min(measured, key=lambda i: (measured[i].latency, i))  # the first of equals
        best = measured[best_index]
        best.ref_latency = self._ref_latency(best)
        logger.info("autotune %s: best %s, %.4f ms", self.name, best.config, best.latency)
        if key is not None and results.enabled():
            results.store(key, _record(configs, best_index, measured, errors))
        return best

    def _compile(self, args, kwargs, configs, target) -> list[str | None]:
        """Build every configuration; for each, None or why it did not build."""
        import cloudpickle
        from tqdm import tqdm

        from tilelang.utils.target import arch_of

        workers = parallel.default_workers() if self._workers is None else self._workers
        payloads = None
        if workers > 0:
            # The resolved arch, not "auto": the workers need no GPU, and their cache keys must
            # equal the ones this process computes for the same target.
            factory = self.jit.factory
            filename = getattr(getattr(factory, "__code__", None), "co_filename", None)
            job = (factory, filename, self.jit.out_idx, arch_of(target), self.jit.pass_configs)
            try:
                payloads = [cloudpickle.dumps((*job, args, {**kwargs, **c})) for c in configs]
            except Exception as err:  # noqa: BLE001 - e.g. a lock in the factory's closure
                logger.warning("autotune %s: compiling in this process (cannot send the factory: %s)", self.name, err)
        with tqdm(total=len(configs), desc=f"autotune {self.name}: compiling") as bar:
            if payloads is not None:
                return parallel.compile_all(payloads, workers, self.settings.timeout, progress=bar.update)
            errors = []
            for config in configs:
                try:
                    self.jit(*args, **kwargs, **config)._ensure_built()
                    errors.append(None)
                except Exception as err:  # noqa: BLE001 - any failure only disqualifies this configuration
                    errors.append(parallel.describe_error(err))
                bar.update()
            return errors

    def _measure(self, args, kwargs, configs, errors: list) -> dict:
        """Load, check and time each built configuration: {index: kernel} of those that passed,
        with `.config` and `.latency` set. A failure is written into `errors`."""
        from tqdm import tqdm

        measured = {}
        for i, config in enumerate(tqdm(configs, desc=f"autotune {self.name}: timing")):
            if errors[i] is not None:
                continue
            try:
                kernel = self.jit(*args, **kwargs, **config)  # a disk-cache hit: the worker built it
                kernel.config = dict(config)
                profiler = Profiler(kernel, self.settings.supply_type, device=self._device)
                if self.settings.ref_prog is not None and not self.settings.skip_check:
                    profiler.assert_allclose(
                        self.settings.ref_prog,
                        rtol=self.settings.rtol,
                        atol=self.settings.atol,
                        max_mismatched_ratio=self.settings.max_mismatched_ratio,
                    )
                kernel.latency = float(self._bench(profiler, None))
            except Exception as err:  # noqa: BLE001 - any failure only disqualifies this configuration
                errors[i] = parallel.describe_error(err)
                logger.info("autotune %s: %s fails: %s", self.name, config, errors[i])
                continue
            logger.info("autotune %s: %s takes %.4f ms", self.name, config, kernel.latency)
            measured[i] = kernel
        return measured

    def _ref_latency(self, best) -> float | None:
        if self.settings.ref_prog is None:
            return None
        try:
            profiler = Profiler(best, self.settings.supply_type, device=self._device)
            return float(self._bench(profiler, self.settings.ref_prog))
        except Exception as err:  # noqa: BLE001 - the winner stands without it
            logger.warning("autotune %s: timing the reference failed: %s", self.name, parallel.describe_error(err))
            return None


def _record(configs, best_index: int, measured: dict, errors: list) -> dict:
    """The tuning record for results.store: the winner, and every candidate's latency or failure."""
    best = measured[best_index]
    candidates = [
        {"config": repr(c), "latency": measured[i].latency if i in measured else None, "skipped": errors[i]}
        for i, c in enumerate(configs)
    ]
    return {
        "config_index": best_index,
        "config": repr(configs[best_index]),
        "latency": best.latency,
        "ref_latency": best.ref_latency,
        "candidates": candidates,
    }


def _headline(reason: str) -> str:
    """A failure in one line for the summary: its first line, and for a multi-line one (a compiler's
    output) the first later line that says "error"."""
    lines = [line.strip() for line in reason.splitlines() if line.strip()] or ["(no message)"]
    detail = next((x for x in lines[1:] if "error" in x.lower()), None)
    line = lines[0] if detail is None else f"{lines[0]} {detail}"
    return line if len(line) <= 240 else line[:237] + "..."

"""`AutoTuner`: compile every configuration of a kernel factory, check and time each, keep the fastest.

Two ways in, both public TileLang's:

    @tilelang.autotune(configs=[{"block_M": 128, "block_N": 128}, {"block_M": 64, "block_N": 256}])
    @tilelang.jit(out_idx=[-1])
    def matmul(M, N, K, block_M=128, block_N=128): ...

    kernel = matmul(1024, 1024, 1024)   # tunes block_M and block_N, returns the fastest JITKernel
    kernel.config, kernel.latency       # {"block_M": 64, "block_N": 256}, 0.031 (milliseconds)
    matmul(1024, 1024, 1024, block_M=64, block_N=256)   # tuned arguments given: no tuning

    result = (AutoTuner.from_kernel(kernel=factory, configs=configs)   # factory returns a prim_func
              .set_compile_args(out_idx=[-1], target="auto")
              .set_profile_args(ref_prog=ref, supply_type=tilelang.TensorSupplyType.Integer)
              .run(warmup=3, rep=20))
    result.latency, result.config, result.ref_latency, result.kernel

A configuration may carry compiler options under "pass_configs" ({"pass_configs": {key: value}}),
merged over the factory's. A run goes, in this order:
1. the tuning-result cache (results.py): on a hit only the winner is compiled (or loaded);
2. every configuration compiles in parallel, one process per core (parallel.py), into the disk
   kernel cache (in this process when that cache is off or the call holds tensors);
3. then, one at a time, each kernel is loaded, checked against `ref_prog` and timed (measure.py).
   Timing waits for all compiles to finish: a CPU busy with nvcc delays kernel launches and skews
   the measurements;
4. the fastest wins, and the result is cached on disk and for the rest of the process.
A configuration that fails to compile, raises when run, does not match the reference or runs past
the timeout is skipped: each reason is logged through the `tilelang` logger at INFO, and the
skipped ones are summed up in one WARNING.

A kernel that faults on the GPU (an illegal address) leaves the CUDA context unusable, so the
configurations timed after it fail too: such a factory must reject the configuration when traced.
"""

from __future__ import annotations

import dataclasses
import inspect
import logging

from tilelang.autotuner import parallel, results
from tilelang.autotuner.capture import get_autotune_inputs
from tilelang.autotuner.measure import Measurement
from tilelang.autotuner.param import AutotuneResult, CompileArgs, ProfileArgs
from tilelang.errors import UserError
from tilelang.profiler import TensorSupplyType

logger = logging.getLogger("tilelang")

# A configuration's own compiler options, merged over the jit's (public TileLang's key).
PASS_CONFIGS_KEY = "pass_configs"


class AutoTuner:
    """Tunes one kernel factory over a list of configurations.

    Args:
        fn: a function that takes the tuned arguments as keywords and returns a `@T.prim_func`
            (compiled with `set_compile_args`), or a `@tilelang.jit` object.
        configs: a list of dicts of `fn`'s keyword arguments, or a function returning one (called
            with the arguments of the call being tuned; with none for `AutoTuner.run`).
    """

    def __init__(self, fn, configs):
        self.fn = fn
        self.configs = configs
        self.compile_args = CompileArgs()
        self.profile_args = ProfileArgs()
        self._jit = fn if _is_jit(fn) else None
        self._jits = {}  # merged pass_configs of a configuration -> its jit object
        self._call = ((), {})  # the arguments of the call being tuned (the decorator's)
        self._key_call = None  # the call as the tuning-result cache sees it (None: all of it)
        self._mode = "lazy"  # or "eager": a jit whose function is the kernel body itself
        self._inputs = None  # set_autotune_inputs' tensors, taken when the profile args were set
        self._resolved = None  # the configuration list, once resolved
        self._compile_timeout = None
        self._bench, self._workers, self._device = None, None, "cuda"  # for tests without a GPU

    @classmethod
    def from_kernel(cls, kernel, configs) -> AutoTuner:
        """An AutoTuner over `kernel` (see the class); public TileLang's way to make one."""
        return cls(kernel, configs)

    def set_compile_args(
        self,
        out_idx=None,
        target=None,
        execution_backend=None,
        target_host=None,
        verbose=None,
        pass_configs=None,
        compile_timeout: float | None = None,
    ) -> AutoTuner:
        """How each configuration compiles: the options of `tilelang.jit` (`target` None: the
        TILELANG_DEFAULT_TARGET environment variable, else "auto"). `compile_timeout`: seconds one
        configuration may take to compile (None: no limit). Returns the tuner."""
        from tilelang import env

        self.compile_args = CompileArgs(
            out_idx=out_idx,
            execution_backend=execution_backend,
            target=env.default_target() if target is None else target,
            target_host=target_host,
            verbose=verbose,
            pass_configs=pass_configs,
        )
        self._compile_timeout = compile_timeout
        self._jit = _make_jit(self._factory(), self.compile_args.jit_options())  # a bad option fails here
        self._jits = {}
        return self

    def set_profile_args(
        self,
        warmup: int = 25,
        rep: int = 100,
        timeout: float | None = 30,
        supply_type: TensorSupplyType = TensorSupplyType.Auto,
        ref_prog=None,
        supply_prog=None,
        rtol: float = 1e-2,
        atol: float = 1e-2,
        max_mismatched_ratio: float = 0.01,
        skip_check: bool = False,
        manual_check_prog=None,
        cache_input_tensors: bool = False,
        backend: str = "event",
    ) -> AutoTuner:
        """How each configuration is checked and timed (see `ProfileArgs`). Inside a
        `set_autotune_inputs` block, its tensors become the inputs. Returns the tuner."""
        from tilelang.profiler.bench import BACKENDS

        if backend not in BACKENDS:
            raise UserError(f"set_profile_args: unknown backend {backend!r}; the backends are {', '.join(BACKENDS)}")
        self.profile_args = ProfileArgs(
            warmup=warmup,
            rep=rep,
            timeout=timeout,
            backend=backend,
            supply_type=TensorSupplyType(supply_type),
            ref_prog=ref_prog,
            supply_prog=supply_prog,
            rtol=rtol,
            atol=atol,
            max_mismatched_ratio=max_mismatched_ratio,
            skip_check=skip_check,
            manual_check_prog=manual_check_prog,
            cache_input_tensors=cache_input_tensors,
        )
        self._inputs = get_autotune_inputs()
        _warn_unused_supply(self.profile_args, self._inputs)
        return self

    def run(
        self,
        warmup: int | None = None,
        rep: int | None = None,
        timeout: float | None = None,
        use_pipeline: bool = False,
        enable_grouped_compile: bool = False,
        group_compile_size: int = 2,
        benchmark_devices: list[int] | None = None,
        benchmark_multi_gpu: bool = False,
        early_stop: bool = False,
        early_stop_factor: float = 2.0,
    ) -> AutotuneResult:
        """Tune; the best configuration, its latency and kernel (`AutotuneResult`).

        Args:
            warmup, rep, timeout: override those of `set_profile_args` (run counts, seconds).
            early_stop: stop timing a configuration whose first estimate is `early_stop_factor`
                (at least 1) times slower than the best so far; it cannot win.
            use_pipeline, enable_grouped_compile, group_compile_size: how public TileLang
                schedules its compile threads. Here every configuration compiles in a process of
                its own, all at once, and timing starts when they are done; the result is the same.
            benchmark_multi_gpu, benchmark_devices: configurations are timed one after another on
                the current GPU (`torch.cuda.set_device` picks it); asking for several GPUs logs
                a warning, as public TileLang does where it cannot use them.

        Raises:
            RuntimeError: when no configuration compiled, ran and matched; lists each one's reason.
            UserError: for an empty configuration list, a configuration naming an argument the
                factory does not take, or an early_stop_factor below 1.
        """
        from tilelang.utils.target import determine_target, is_cpu

        if early_stop and early_stop_factor < 1.0:
            raise UserError(f"autotune: early_stop_factor must be at least 1.0, got {early_stop_factor}")
        given = {"warmup": warmup, "rep": rep, "timeout": timeout}
        profile = dataclasses.replace(self.profile_args, **{k: v for k, v in given.items() if v is not None})
        self._note_scheduling(
            use_pipeline, enable_grouped_compile, group_compile_size, benchmark_multi_gpu, benchmark_devices
        )
        inputs = self._inputs if self._inputs is not None else get_autotune_inputs()
        jit = self._jit_object()
        configs = self._configs()
        target = determine_target(jit.target)

        key = None
        if results.enabled():
            key_args, key_kwargs = self._key_call or describe_call(*self._call)
            settings = repr((profile.cache_repr(), early_stop and early_stop_factor, describe_value(inputs)))
            key = results.key_for(jit, key_args, key_kwargs, target, configs, settings)
        record = results.load(key, configs) if key is not None else None
        if record is not None:
            config = configs[record["config_index"]]
            logger.info("autotune %s: %s from the tuning cache (%.4f ms)", self.name, config, record["latency"])
            return _result(self._kernel(config), config, record["latency"], record["ref_latency"])

        errors, built = self._compile(configs, target)
        for config, error in zip(configs, errors):
            if error is not None:
                logger.info("autotune %s: %s does not compile: %s", self.name, config, error)
        device = "cpu" if is_cpu(target) else self._device  # the CPU target's kernels: inputs and timing there
        measurement = Measurement(profile, early_stop, early_stop_factor, inputs, device, self._bench)
        measured = self._measure(configs, errors, built, measurement)
        skipped = [(c, e) for c, e in zip(configs, errors) if e is not None]
        lines = "\n".join(f"  {c}: {_headline(e)}" for c, e in skipped)
        if not measured:
            raise RuntimeError(f"autotune {self.name}: none of the {len(configs)} configurations works:\n{lines}")
        if skipped:
            n = len(skipped)
            logger.warning("autotune %s: skipped %d of %d configurations:\n%s", self.name, n, len(configs), lines)

        best_index = min(measured, key=lambda i: (measured[i], i))  # the first of equals
        best = built[best_index]
        for i, kernel in built.items():  # the jit caches the others: they must not look tuned
            if i != best_index:
                kernel.config = None
        ref_latency = self._ref_latency(measurement, best)
        logger.info("autotune %s: best %s, %.4f ms", self.name, configs[best_index], measured[best_index])
        if key is not None:
            results.store(key, _record(configs, best_index, measured, errors, ref_latency))
        return _result(best, configs[best_index], measured[best_index], ref_latency)

    def __call__(self) -> AutotuneResult:
        return self.run()

    @property
    def name(self) -> str:
        return getattr(self._factory(), "__name__", "kernel")

    # ---- configurations and kernels ----------------------------------------------------------

    def _factory(self):
        factory = self.fn.factory if _is_jit(self.fn) else self.fn
        if not callable(factory):
            raise UserError(
                f"AutoTuner tunes a function that takes the tuned values as keyword arguments and returns a "
                f"@T.prim_func (or a @tilelang.jit of one), got {self.fn!r}"
            )
        return factory

    def _jit_object(self):
        if self._jit is None:
            self._jit = _make_jit(self._factory(), self.compile_args.jit_options())
        return self._jit

    def _configs(self) -> list[dict]:
        if self._resolved is not None:
            return self._resolved
        args, kwargs = self._call
        configs = self.configs(*args, **kwargs) if callable(self.configs) else self.configs
        configs = list(configs) if configs is not None else []
        if not configs:
            raise UserError(f"autotune {self.name}: the configuration list is empty")
        params = inspect.signature(self._factory()).parameters
        open_kwargs = any(p.kind is inspect.Parameter.VAR_KEYWORD for p in params.values())
        for config in configs:
            if not isinstance(config, dict):
                raise UserError(f"autotune {self.name}: configurations are dicts of keyword arguments, not {config!r}")
            unknown = [k for k in config if k not in params and k != PASS_CONFIGS_KEY]
            if unknown and not open_kwargs:
                raise UserError(f"autotune {self.name}: configuration {config} sets {unknown}, which it does not take")
            extra = config.get(PASS_CONFIGS_KEY)
            if extra is not None and not isinstance(extra, dict):
                raise UserError(f"autotune {self.name}: {PASS_CONFIGS_KEY} of {config} is not a dict of pass configs")
        self._resolved = configs
        return configs

    def _jit_for(self, config: dict):
        """The jit object that compiles `config` (the tuner's, or one with the configuration's
        pass configs merged in), and the keyword arguments the configuration passes."""
        kwargs = {k: v for k, v in config.items() if k != PASS_CONFIGS_KEY}
        extra = config.get(PASS_CONFIGS_KEY)
        jit = self._jit_object()
        if not extra:
            return jit, kwargs
        merged = {**(jit.pass_configs or {}), **extra}
        key = repr(sorted(merged.items(), key=lambda kv: str(kv[0])))
        if key not in self._jits:
            self._jits[key] = _make_jit(jit.factory, {**jit_options(jit), "pass_configs": merged})
        return self._jits[key], kwargs

    def _kernel(self, config: dict):
        """The kernel of `config`, compiled in this process (or loaded from the disk cache)."""
        jit, kwargs = self._jit_for(config)
        args, call_kwargs = self._call
        return build_kernel(jit, self._mode, args, {**call_kwargs, **kwargs})

    def _compile(self, configs, target) -> tuple[list, dict]:
        """Build every configuration: for each, None or why it did not build; and the kernels
        built in this process, by index."""
        from tqdm import tqdm

        from tilelang import cache

        workers = parallel.default_workers() if self._workers is None else self._workers
        payloads = None
        if workers > 0:
            if not cache.is_enabled():
                reason = "the kernel cache is off, and compile processes hand kernels over through it"
            elif holds_tensor(self._call):
                reason = "the call's tensors cannot be sent to compile processes"
            else:
                reason, payloads = self._payloads(configs, target)
            if payloads is None:  # an unsendable factory is worth a warning: it may be slow
                level = logging.WARNING if reason.startswith("cannot send") else logging.INFO
                logger.log(level, "autotune %s: compiling in this process (%s)", self.name, reason)
        built = {}
        with tqdm(total=len(configs), desc=f"autotune {self.name}: compiling") as bar:
            if payloads is not None:
                return parallel.compile_all(payloads, workers, self._compile_timeout, progress=bar.update), built
            errors = []
            for i, config in enumerate(configs):
                try:
                    kernel = self._kernel(config)
                    kernel._ensure_built()
                    built[i] = kernel
                    errors.append(None)
                except Exception as err:  # noqa: BLE001 - any failure only disqualifies this configuration
                    errors.append(parallel.describe_error(err))
                bar.update()
            return errors, built

    def _payloads(self, configs, target):
        """(None, the compile jobs), or (why not, None) when the factory cannot be sent."""
        import cloudpickle

        from tilelang.utils.target import arch_of

        args, call_kwargs = self._call
        payloads = []
        try:
            for config in configs:
                jit, kwargs = self._jit_for(config)
                factory = jit.factory
                filename = getattr(getattr(factory, "__code__", None), "co_filename", None)
                # The resolved arch, not "auto": the workers need no GPU, and their cache keys must
                # equal the ones this process computes for the same target.
                options = {**jit_options(jit), "target": arch_of(target)}
                job = (factory, filename, options, self._mode, args, {**call_kwargs, **kwargs})
                payloads.append(cloudpickle.dumps(job))
        except Exception as err:  # noqa: BLE001 - e.g. a lock in the factory's closure
            return f"cannot send the factory to compile processes: {err}", None
        return None, payloads

    def _measure(self, configs, errors: list, built: dict, measurement: Measurement) -> dict:
        """Load, check and time each built configuration: {index: latency} of those that passed.
        Their kernels go into `built`; a failure is written into `errors`."""
        from tqdm import tqdm

        measured = {}
        for i, config in enumerate(tqdm(configs, desc=f"autotune {self.name}: timing")):
            if errors[i] is not None:
                continue
            try:
                kernel = built.get(i) or self._kernel(config)  # a disk-cache hit: a worker built it
                kernel.config = dict(config)
                built[i] = kernel
                measured[i] = measurement.measure(kernel)
            except Exception as err:  # noqa: BLE001 - any failure only disqualifies this configuration
                errors[i] = parallel.describe_error(err)
                logger.info("autotune %s: %s fails: %s", self.name, config, errors[i])
                continue
            logger.info("autotune %s: %s takes %.4f ms", self.name, config, measured[i])
        return measured

    def _ref_latency(self, measurement: Measurement, best) -> float | None:
        try:
            return measurement.ref_latency(best)
        except Exception as err:  # noqa: BLE001 - the winner stands without it
            logger.warning("autotune %s: timing the reference failed: %s", self.name, parallel.describe_error(err))
            return None

    def _note_scheduling(self, use_pipeline, grouped, group_size, multi_gpu, devices) -> None:
        if use_pipeline or grouped:
            logger.info(
                "autotune %s: use_pipeline=%s, enable_grouped_compile=%s (group_compile_size=%s): every configuration "
                "compiles in a process of its own, all at once, and timing starts when they are done",
                self.name,
                use_pipeline,
                grouped,
                group_size,
            )
        if multi_gpu or (devices and len(devices) > 1):
            logger.warning(
                "autotune %s: timing on several GPUs at once (benchmark_multi_gpu=%s, benchmark_devices=%s) is not "
                "available; configurations are timed one after another on the current GPU",
                self.name,
                multi_gpu,
                devices,
            )


# ---- the decorator ---------------------------------------------------------------------------------


def autotune(
    func=None,
    *,
    configs=None,
    warmup: int = 25,
    rep: int = 100,
    timeout: float | None = 100,
    supply_type: TensorSupplyType = TensorSupplyType.Auto,
    ref_prog=None,
    supply_prog=None,
    rtol: float = 1e-2,
    atol: float = 1e-2,
    max_mismatched_ratio: float = 0.01,
    skip_check: bool = False,
    manual_check_prog=None,
    cache_input_tensors: bool = False,
    do_not_specialize=None,
    early_stop: bool = False,
    early_stop_factor: float = 2.0,
    compile_timeout: float | None = None,
    _bench=None,
    _workers: int | None = None,
    _device: str = "cuda",
):
    """Decorator stacked above `@tilelang.jit`: a call that leaves the tuned arguments out returns
    the kernel of its fastest configuration (an eager kernel runs it on the call's tensors).

    Args:
        configs: a list of dicts of the factory's keyword arguments (each may also hold
            "pass_configs"), or a function returning one, called with the call's arguments.
        warmup, rep: runs before timing and timed runs per configuration (counts, as public
            TileLang's autotuner uses them).
        timeout: seconds the check and timing of one configuration may take (None: no limit).
        compile_timeout: seconds one configuration may take to compile (None: no limit).
        supply_type, supply_prog, ref_prog, rtol, atol, max_mismatched_ratio, skip_check,
            manual_check_prog, cache_input_tensors: how configurations are fed and checked (see
            `tilelang.autotuner.ProfileArgs`); `set_autotune_inputs` gives the inputs instead.
        do_not_specialize: names of arguments whose value does not change the best configuration:
            a call differing only in them reuses the tuning.
        early_stop, early_stop_factor: see `AutoTuner.run`.

    The returned kernel has `.config` (dict), `.latency` and `.ref_latency` (milliseconds; None
    without a reference). A call that gives any tuned argument is not tuned, as in public TileLang
    (the tuned arguments it leaves out take the factory's defaults); `.compile(...)` returns the
    kernel instead of running an eager one. `_bench(profiler, func, inputs, baseline) -> ms`,
    `_workers` (0: compile in this process) and `_device` are for tests without a GPU.
    """
    if configs is None:
        raise UserError(
            "tilelang.autotune needs configs=[{...}, ...] (or a function returning them): the values to try"
        )

    def wrap(jit):
        return AutoTuneImpl(
            jit,
            configs,
            ProfileArgs(
                warmup=warmup,
                rep=rep,
                timeout=timeout,
                supply_type=TensorSupplyType(supply_type),
                ref_prog=ref_prog,
                supply_prog=supply_prog,
                rtol=rtol,
                atol=atol,
                max_mismatched_ratio=max_mismatched_ratio,
                skip_check=skip_check,
                manual_check_prog=manual_check_prog,
                cache_input_tensors=cache_input_tensors,
            ),
            do_not_specialize=do_not_specialize,
            early_stop=early_stop,
            early_stop_factor=early_stop_factor,
            compile_timeout=compile_timeout,
            hooks=(_bench, _workers, _device),
        )

    return wrap(func) if func is not None else wrap


class AutoTuneImpl:
    """What `@tilelang.autotune` returns: call it like the factory to get the best kernel."""

    def __init__(
        self,
        jit,
        configs,
        profile_args: ProfileArgs,
        do_not_specialize=None,
        early_stop=False,
        early_stop_factor=2.0,
        compile_timeout=None,
        hooks=(None, None, "cuda"),
    ):
        if not _is_jit(jit):
            raise UserError(f"@tilelang.autotune goes above @tilelang.jit (it tunes a jit kernel factory), got {jit!r}")
        if jit.factory is None:
            raise UserError(
                f"@tilelang.autotune above {jit!r}: a @T.prim_func has no arguments to tune; decorate a function "
                "that takes the tuned values as arguments instead"
            )
        if early_stop and early_stop_factor < 1.0:
            raise UserError(f"autotune: early_stop_factor must be at least 1.0, got {early_stop_factor}")
        self.jit = jit
        self.configs = configs
        self.profile_args = profile_args
        self.do_not_specialize = tuple(do_not_specialize or ())
        self.early_stop = early_stop
        self.early_stop_factor = early_stop_factor
        self.compile_timeout = compile_timeout
        self._hooks = hooks
        self._tuned = {}  # the call (as a key) -> (its AutoTuner, AutotuneResult)
        self.__wrapped__ = jit.factory
        for name in ("__module__", "__name__", "__qualname__", "__doc__"):
            if hasattr(jit.factory, name):
                setattr(self, name, getattr(jit.factory, name))

    @property
    def name(self) -> str:
        return self.jit.factory.__name__

    def __call__(self, *args, **kwargs):
        mode = jit_mode(self.jit, args, kwargs)
        tuned = self._tuned_for(args, kwargs, mode)
        if tuned is None:  # the caller fixed the tuned arguments
            return self.jit(*args, **kwargs)
        tuner, result = tuned
        jit, config_kwargs = tuner._jit_for(result.config)
        out = jit(*args, **kwargs, **config_kwargs)  # eager: runs the best kernel on the call's tensors
        return out if mode == "eager" else _with_result(out, result)

    def compile(self, *args, **kwargs):
        """The best kernel for these arguments (for an eager kernel: its compile-time values)."""
        mode = jit_mode(self.jit, args, kwargs)
        tuned = self._tuned_for(args, kwargs, mode)
        if tuned is None:
            return build_kernel(self.jit, mode, args, kwargs)
        tuner, result = tuned
        jit, config_kwargs = tuner._jit_for(result.config)
        return _with_result(build_kernel(jit, mode, args, {**kwargs, **config_kwargs}), result)

    def _tuned_for(self, args, kwargs, mode):
        """(tuner, result) for this call, tuning it the first time; None when the call gives
        tuned arguments itself."""
        key_args, key_kwargs = self._key_call(args, kwargs)
        key = (key_args, tuple(sorted(key_kwargs.items())))
        hit = self._tuned.get(key)
        if hit is not None:
            return hit
        tuner = AutoTuner(self.jit, self.configs)
        tuner.profile_args = self.profile_args
        tuner._call, tuner._mode, tuner._key_call = (args, kwargs), mode, (key_args, key_kwargs)
        tuner._inputs = get_autotune_inputs()
        tuner._compile_timeout = self.compile_timeout
        tuner._bench, tuner._workers, tuner._device = self._hooks
        tuned = set().union(*tuner._configs()) - {PASS_CONFIGS_KEY}
        given = tuned & named_arguments(self.jit.factory, args, kwargs)
        if given:
            # As in public TileLang, any tuned argument given means no tuning.
            level = logging.INFO if given == tuned else logging.WARNING
            left = sorted(tuned - given) or "none"
            logger.log(
                level, "autotune %s: %s given, so no tuning (%s take their defaults)", self.name, sorted(given), left
            )
            return None
        _warn_unused_supply(self.profile_args, tuner._inputs)
        result = tuner.run(early_stop=self.early_stop, early_stop_factor=self.early_stop_factor)
        self._tuned[key] = (tuner, result)
        return tuner, result

    def _key_call(self, args, kwargs):
        """The call as the tuning caches see it: tensors by dtype, shape and strides; arguments named
        in `do_not_specialize` left out."""
        if not self.do_not_specialize:
            return describe_call(args, kwargs)
        params = _positional(self.jit.factory)
        named = dict(zip(params, args))
        named.update(kwargs)
        extra = args[len(params) :]
        kept = {k: v for k, v in named.items() if k not in self.do_not_specialize}
        return describe_call(extra, kept)


# ---- helpers -----------------------------------------------------------------------------------------


def _is_jit(obj) -> bool:
    return all(hasattr(obj, a) for a in ("factory", "out_idx", "target", "pass_configs"))


def jit_options(jit) -> dict:
    """The keyword arguments of `tilelang.jit` that made `jit`, read from its attributes of the
    same names (the ones it has and has set)."""
    from tilelang.jit import jit as make_jit

    names = [n for n, p in inspect.signature(make_jit).parameters.items() if p.kind is inspect.Parameter.KEYWORD_ONLY]
    return {n: getattr(jit, n) for n in names if getattr(jit, n, None) is not None}


def _make_jit(factory, options: dict):
    from tilelang.jit import jit as make_jit

    return make_jit(**options)(factory)


def jit_mode(jit, args, kwargs) -> str:
    """The jit's form, as it tells: "lazy" (the factory returns a prim_func; calling the jit gives a
    kernel) or "eager" (the function is the kernel body; calling the jit runs it)."""
    infer = getattr(jit, "initialize_jit_mode", None)
    mode = infer(*args, **kwargs) if callable(infer) else getattr(jit, "mode", "lazy")
    return mode if mode in ("lazy", "eager") else "lazy"


def build_kernel(jit, mode: str, args, kwargs):
    """The JITKernel of `jit` for these arguments, compiled or loaded, without running it."""
    return jit.compile(*args, **kwargs) if mode == "eager" else jit(*args, **kwargs)


def _positional(factory) -> list[str]:
    kinds = (inspect.Parameter.POSITIONAL_ONLY, inspect.Parameter.POSITIONAL_OR_KEYWORD)
    return [n for n, p in inspect.signature(factory).parameters.items() if p.kind in kinds]


def named_arguments(factory, args, kwargs) -> set:
    """The names of the factory's parameters a call gives (positionally or by keyword)."""
    return set(_positional(factory)[: len(args)]) | set(kwargs)


def describe_value(value):
    """A hashable, stable stand-in for a call argument: a tensor by dtype, shape, strides and
    device type (never its values); containers element by element; anything unhashable by repr."""
    import torch

    if isinstance(value, torch.Tensor):
        return ("tensor", str(value.dtype), tuple(value.shape), tuple(value.stride()), value.device.type)
    if isinstance(value, (list, tuple)):
        return tuple(describe_value(v) for v in value)
    if isinstance(value, dict):
        return tuple(sorted((str(k), describe_value(v)) for k, v in value.items()))
    try:
        hash(value)
    except TypeError:
        return repr(value)
    return value


def describe_call(args, kwargs) -> tuple[tuple, dict]:
    return tuple(describe_value(a) for a in args), {k: describe_value(v) for k, v in kwargs.items()}


def holds_tensor(value) -> bool:
    import torch

    if isinstance(value, torch.Tensor):
        return True
    if isinstance(value, (list, tuple)):
        return any(holds_tensor(v) for v in value)
    if isinstance(value, dict):
        return any(holds_tensor(v) for v in value.values())
    return False


def _warn_unused_supply(profile: ProfileArgs, inputs) -> None:
    if inputs is not None and profile.supply_prog is not None:
        logger.warning("autotune: supply_prog is not used inside `with set_autotune_inputs(...)`: its tensors are")
    elif profile.supply_prog is not None and TensorSupplyType(profile.supply_type) is not TensorSupplyType.Auto:
        logger.warning("autotune: supply_type is not used when supply_prog gives the inputs")


def _with_result(kernel, result: AutotuneResult):
    kernel.config, kernel.latency, kernel.ref_latency = dict(result.config), result.latency, result.ref_latency
    return kernel


def _result(kernel, config: dict, latency: float, ref_latency) -> AutotuneResult:
    result = AutotuneResult(
        latency=latency,
        config=dict(config),
        ref_latency=ref_latency,
        libcode=kernel.get_kernel_source(),
        func=getattr(kernel, "prim_func", None),
        kernel=kernel,
    )
    _with_result(kernel, result)
    return result


def _record(configs, best_index: int, measured: dict, errors: list, ref_latency) -> dict:
    """The tuning record for results.store: the winner, and every candidate's latency or failure."""
    candidates = [{"config": repr(c), "latency": measured.get(i), "skipped": errors[i]} for i, c in enumerate(configs)]
    return {
        "config_index": best_index,
        "config": repr(configs[best_index]),
        "latency": measured[best_index],
        "ref_latency": ref_latency,
        "candidates": candidates,
    }


def _headline(reason: str) -> str:
    """A failure in one line for the summary: its first line, and for a multi-line one (a compiler's
    output) the first later line that says "error"."""
    lines = [line.strip() for line in reason.splitlines() if line.strip()] or ["(no message)"]
    detail = next((x for x in lines[1:] if "error" in x.lower()), None)
    line = lines[0] if detail is None else f"{lines[0]} {detail}"
    return line if len(line) <= 240 else line[:237] + "..."

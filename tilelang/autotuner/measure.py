"""Checking and timing the compiled configurations of one tuning run, one after the other.

For each configuration: inputs from `set_autotune_inputs`, else `supply_prog(params)`, else random
draws per `supply_type`; the check against `ref_prog` (tolerances, or `manual_check_prog`) on them;
then `do_bench` with `warmup`/`rep` runs, on the same inputs or, with `cache_input_tensors`, on
inputs kept from the first configuration. With `early_stop`, a configuration whose first estimate
is already `early_stop_factor` times slower than the best so far is not timed further.

A configuration that takes longer than `timeout` seconds is stopped (SIGALRM, on the main thread):
it raises TimeoutError at the next Python statement. A kernel stuck on the GPU cannot be stopped
that way; nothing short of ending the process can.
"""

from __future__ import annotations

import contextlib
import logging
import math
import signal
import threading

from tilelang.profiler import Profiler

logger = logging.getLogger("tilelang")


class Measurement:
    """Checks and times configurations; remembers the best latency (for early stop) and the inputs
    kept for `cache_input_tensors`.

    Args:
        profile: the `ProfileArgs`.
        early_stop, early_stop_factor: see the module docstring.
        inputs: the tensors of `set_autotune_inputs`, or None.
        device: where inputs are drawn ("cuda"; tests use "cpu").
        bench: `bench(profiler, func, inputs, baseline) -> ms` replaces `Profiler.do_bench` (tests).
    """

    def __init__(self, profile, early_stop=False, early_stop_factor=2.0, inputs=None, device="cuda", bench=None):
        self.profile = profile
        self.early_stop = early_stop
        self.early_stop_factor = early_stop_factor
        self.device = device
        self.best = math.inf
        self._bench = bench or self._do_bench
        self._given = inputs
        self._given_here = None  # the given inputs, cloned onto the device once
        self._kept = None  # the inputs kept for cache_input_tensors

    def measure(self, kernel) -> float:
        """The latency of `kernel` in ms; raises (AssertionError, TimeoutError, ...) to reject it."""
        p = self.profile
        with deadline(p.timeout):
            profiler = Profiler(kernel, p.supply_type, device=self.device)
            fresh = self._supply(profiler)
            if p.ref_prog is not None and not p.skip_check:
                if p.manual_check_prog is not None:
                    profiler.manual_assert_close(p.ref_prog, input_tensors=fresh, manual_check_prog=p.manual_check_prog)
                else:
                    profiler.assert_allclose(
                        p.ref_prog,
                        input_tensors=fresh,
                        rtol=p.rtol,
                        atol=p.atol,
                        max_mismatched_ratio=p.max_mismatched_ratio,
                    )
            inputs = self._timing_inputs(profiler, fresh)
            baseline = self.best * self.early_stop_factor if self.early_stop and self.best < math.inf else None
            latency = float(self._bench(profiler, None, inputs, baseline))
        self.best = min(self.best, latency)
        return latency

    def ref_latency(self, kernel) -> float | None:
        """The reference program's time on the inputs of `kernel` (None without a reference)."""
        if self.profile.ref_prog is None:
            return None
        with deadline(self.profile.timeout):
            profiler = Profiler(kernel, self.profile.supply_type, device=self.device)
            inputs = self._timing_inputs(profiler, self._supply(profiler))
            return float(self._bench(profiler, self.profile.ref_prog, inputs, None))

    def _do_bench(self, profiler, func, inputs, baseline) -> float:
        p = self.profile
        return profiler.do_bench(
            func,
            n_warmup=p.warmup,
            n_repeat=p.rep,
            input_tensors=inputs,
            backend=p.backend,
            early_stop_baseline=baseline,
        )

    def _supply(self, profiler) -> list:
        if self._given is not None:
            if self._given_here is None:
                self._given_here = [_clone_to(x, self.device) for x in self._given]
            return self._given_here
        if self.profile.supply_prog is not None:
            return list(self.profile.supply_prog(_with_dtype_objects(profiler._get_params())))
        return profiler._get_inputs()

    def _timing_inputs(self, profiler, fresh: list) -> list:
        if not self.profile.cache_input_tensors:
            return fresh
        if self._kept is not None and not _fits(profiler._get_params(), self._kept):
            logger.warning(
                "autotune: the kept input tensors do not fit the parameters of %s (a configuration changes "
                "their shapes or dtypes); drawing new ones. Pass cache_input_tensors=False to draw per configuration.",
                getattr(profiler.kernel, "name", "the kernel"),
            )
            self._kept = None
        if self._kept is None:
            self._kept = fresh
        return self._kept


def _with_dtype_objects(params: list) -> list:
    """The parameters with `T.dtype` objects as dtypes, as public TileLang hands them to a supply_prog
    (which may call `param.dtype.as_torch()`); the objects equal their name strings."""
    import dataclasses

    from tilelang.dtypes import dtype

    out = []
    for p in params:
        try:
            out.append(dataclasses.replace(p, dtype=dtype(p.dtype)))
        except (TypeError, ValueError):  # not a dataclass, or a dtype without an object: as it is
            out.append(p)
    return out


def _clone_to(x, device):
    import torch

    if isinstance(x, torch.Tensor):
        return x.to(device=device).clone()
    return x


def _fits(params: list, tensors: list) -> bool:
    """Whether `tensors` can be passed for `params`: same count, and each tensor of the parameter's
    dtype and of its size in every fixed dimension."""
    import torch

    from tilelang.dtypes import canonical

    if len(params) != len(tensors):
        return False
    for param, t in zip(params, tensors):
        if not isinstance(t, torch.Tensor):
            continue
        if canonical(t.dtype) != canonical(param.dtype) or t.dim() != len(param.shape):
            return False
        if any(isinstance(d, int) and d != s for d, s in zip(param.shape, t.shape)):
            return False
    return True


@contextlib.contextmanager
def deadline(seconds: float | None):
    """Raise TimeoutError inside the body once it has run `seconds` (no limit for None or 0, or off
    the main thread, where Python cannot deliver the signal)."""
    usable = hasattr(signal, "setitimer") and threading.current_thread() is threading.main_thread()
    if not seconds or seconds <= 0 or not usable:
        yield
        return

    def expire(signum, frame):
        raise TimeoutError(f"checking and timing took longer than the timeout ({seconds} s)")

    previous = signal.signal(signal.SIGALRM, expire)
    signal.setitimer(signal.ITIMER_REAL, seconds)
    try:
        yield
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, previous if previous is not None else signal.SIG_DFL)

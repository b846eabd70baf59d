"""Logging: the `tilelang` logger (quiet by default; `TILELANG_LOG_LEVEL=INFO` or `DEBUG` to see
it) and the compile-phase timings each JITKernel keeps in `kernel.compile_times`.

Example: TILELANG_LOG_LEVEL=INFO python example_gemm.py
  tilelang INFO: compiled matmul in 1.92 s: parse 0.05, passes 0.09, codegen 0.04, nvcc 1.38, ...
"""

from __future__ import annotations

import contextlib
import logging
import time

from tilelang import env

logger = logging.getLogger("tilelang")


def set_level(level) -> None:
    """Set the `tilelang` logger's level ("DEBUG", "INFO", "WARNING", ... or a logging constant),
    giving it a handler that prints to stderr if it has none: `tilelang.set_log_level("INFO")`.

    Raises: UserError for a level name logging does not know."""
    if isinstance(level, str):
        if level.upper() not in logging.getLevelNamesMapping():
            from tilelang.errors import UserError

            raise UserError(f"set_log_level: unknown level {level!r}; use DEBUG, INFO, WARNING, ERROR or CRITICAL")
        level = level.upper()
    if not logger.handlers:
        handler = logging.StreamHandler()
        handler.setFormatter(logging.Formatter("tilelang %(levelname)s: %(message)s"))
        logger.addHandler(handler)
    logger.setLevel(level)


def _configure() -> None:
    level = env.log_level()
    if level and not logger.handlers:
        set_level(level)


_configure()


@contextlib.contextmanager
def timed(times: dict, phase: str):
    """Add the wall time of the `with` body to `times[phase]`."""
    start = time.perf_counter()
    try:
        yield
    finally:
        times[phase] = times.get(phase, 0.0) + time.perf_counter() - start


def report(name: str, times: dict) -> None:
    if logger.isEnabledFor(logging.INFO):
        # The compilers run side by side: the wall time is what the phases overlap to, not their sum.
        wall = times.get("wall", sum(v for k, v in times.items() if k != "wall"))
        phases = ", ".join(f"{k} {v:.2f}" for k, v in times.items() if k != "wall")
        logger.info("compiled %s in %.2f s: %s (seconds)", name, wall, phases)


_HINTS_LOGGED: set = set()


def hint_once(key: str, message: str) -> None:
    """Log `message` at INFO the first time `key` is seen in this process: for arguments that only
    tune (a cache hint, an instruction preference) that tilelang accepts but decides itself."""
    if key not in _HINTS_LOGGED:
        _HINTS_LOGGED.add(key)
        logger.info(message)

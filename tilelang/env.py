"""Where tilelang finds things: its device templates, CuTe headers, nvcc, and its cache folder.

Each can be overridden by an environment variable:
  TL_TEMPLATE_PATH   folder holding `tl_templates/` (default: the package's `src/`)
  TL_CUTLASS_PATH    CUTLASS/CuTe include folder (default: the `nvidia-cutlass` wheel if installed,
                     else the copy bundled with apache-tvm under tvm/3rdparty/cutlass/include)
  CUDA_HOME          CUDA toolkit (default: the folder of `nvcc` on the PATH)
  CXX                host C++ compiler for the launcher (default: g++, else c++)
  TILELANG_CACHE_DIR compiled kernels (default: ~/.tilelang/cache)

and these switches, read here and nowhere else:
  TILELANG_DISABLE_CACHE=1              no disk cache of compiled kernels
  TILELANG_DUMP_IR=<folder>             the IR after every pass (also pass config `tl.dump_ir`)
  TILELANG_CHECK_BARRIER_PROTOCOL=1     lower() checks every mbarrier kernel's barrier protocol
                                        (also pass config `tl.check_barrier_protocol`)
  TILELANG_LOG_LEVEL=INFO|DEBUG         the `tilelang` logger's level
  TILELANG_DEFAULT_TARGET=<target>      what target "auto" means (default: the current GPU)
  TILELANG_AUTO_TUNING_DISABLE_CACHE=1  autotuning results are not kept on disk
  TILELANG_AUTO_TUNING_CPU_COUNTS=<n>   compile processes the autotuner runs at once
  PYTEST_XDIST_WORKER                   set by pytest-xdist in its workers (tilelang.testing)
  TL_PERF_REGRESSION_FORMAT=json        tilelang.testing.regression() prints one JSON line
  TL_PERF_REGRESSION_ONLY=<names>       tilelang.testing.regression() runs only these cases

The public TileLang's users read some of these through `tilelang.env` as attributes
(`tilelang.env.TILELANG_CACHE_DIR`, `from tilelang.env import CUDA_HOME`, `tilelang.env.env`):
see `PUBLIC_NAMES` at the end.
"""

from __future__ import annotations

import functools
import os
import re
import shutil
import subprocess
import sys
import types

PACKAGE_DIR = os.path.dirname(os.path.abspath(__file__))


@functools.cache
def template_path() -> str:
    override = os.environ.get("TL_TEMPLATE_PATH")
    if override:
        return override
    for candidate in (os.path.join(PACKAGE_DIR, "src"), os.path.join(os.path.dirname(PACKAGE_DIR), "src")):
        if os.path.isdir(os.path.join(candidate, "tl_templates")):
            return candidate
    raise RuntimeError("tilelang: device templates (tl_templates/) not found; set TL_TEMPLATE_PATH")


@functools.cache
def cutlass_include() -> str:
    override = os.environ.get("TL_CUTLASS_PATH")
    if override:
        return override
    try:
        import cutlass_library  # the nvidia-cutlass wheel: complete headers

        path = os.path.join(os.path.dirname(cutlass_library.__file__), "source", "include")
        if os.path.isdir(path):
            return path
    except ImportError:
        pass
    import tvm

    return os.path.join(os.path.dirname(tvm.__file__), "3rdparty", "cutlass", "include")


@functools.cache
def nvcc_path() -> str:
    home = os.environ.get("CUDA_HOME") or os.environ.get("CUDA_PATH")
    if home and os.path.exists(os.path.join(home, "bin", "nvcc")):
        return os.path.join(home, "bin", "nvcc")
    found = shutil.which("nvcc")
    if not found:
        for guess in ("/usr/local/cuda/bin/nvcc",):
            if os.path.exists(guess):
                return guess
        raise RuntimeError("tilelang: nvcc not found; put it on the PATH or set CUDA_HOME")
    return found


@functools.cache
def _nvcc_dryrun() -> str:
    return subprocess.run(
        [nvcc_path(), "--dryrun", "-c", "-x", "cu", os.devnull, "-o", os.devnull], capture_output=True, text=True
    ).stderr


@functools.cache
def cuda_paths() -> tuple[str, str]:
    """The CUDA toolkit's include and library folders, as nvcc itself finds them (it may be a
    wrapper script, so its location alone does not tell)."""
    out = _nvcc_dryrun()
    top = re.search(r"^#\$ TOP=(.*)$", out, re.M)
    target_dir = re.findall(r"^#\$ _TARGET_DIR_=(.+)$", out, re.M)
    if not top:
        raise RuntimeError(f"tilelang: cannot locate the CUDA toolkit from `{nvcc_path()} --dryrun`")
    root = os.path.normpath(os.path.join(top.group(1).strip(), target_dir[-1].strip() if target_dir else ""))
    return os.path.join(root, "include"), os.path.join(root, "lib")


@functools.cache
def tvm_ffi_dir() -> str:
    """The installed tvm_ffi package's folder (its C++ headers and library), found without importing it."""
    import importlib.util

    return os.path.dirname(importlib.util.find_spec("tvm_ffi").origin)


@functools.cache
def host_compiler() -> str:
    found = os.environ.get("CXX") or shutil.which("g++") or shutil.which("c++")
    if not found:
        raise RuntimeError("tilelang: no host C++ compiler (g++ or c++) on the PATH; set CXX")
    return found


def cache_dir() -> str:
    return os.environ.get("TILELANG_CACHE_DIR") or os.path.join(os.path.expanduser("~"), ".tilelang", "cache")


def _flag(name: str) -> bool:
    return os.environ.get(name, "0") in ("1", "true", "True", "ON", "on")


def cache_disabled() -> bool:
    return _flag("TILELANG_DISABLE_CACHE")


def dump_ir_dir() -> str | None:
    return os.environ.get("TILELANG_DUMP_IR") or None


def check_barrier_protocol() -> bool:
    return _flag("TILELANG_CHECK_BARRIER_PROTOCOL")


def log_level() -> str | None:
    return os.environ.get("TILELANG_LOG_LEVEL") or None


# Targets set by `tilelang.use_target` (innermost last); they win over the environment.
_target_stack: list = []


def default_target() -> str:
    if _target_stack:
        return _target_stack[-1]
    return os.environ.get("TILELANG_DEFAULT_TARGET", "auto")


def autotune_cache_disabled() -> bool:
    return _flag("TILELANG_AUTO_TUNING_DISABLE_CACHE")


def autotune_cpu_count() -> int | None:
    """The number of compile processes the user asked for, or None."""
    value = int(os.environ.get("TILELANG_AUTO_TUNING_CPU_COUNTS", "-1"))
    return value if value > 0 else None


def in_xdist_worker() -> bool:
    return bool(os.environ.get("PYTEST_XDIST_WORKER"))


def perf_regression_format() -> str:
    return os.environ.get("TL_PERF_REGRESSION_FORMAT", "text").strip().lower()


def perf_regression_only() -> str:
    return os.environ.get("TL_PERF_REGRESSION_ONLY", "").strip()


def cuda_home() -> str:
    """The CUDA toolkit's root: $CUDA_HOME, else the one nvcc reports (it may be a wrapper script
    elsewhere)."""
    if os.environ.get("CUDA_HOME"):
        return os.environ["CUDA_HOME"]
    top = re.search(r"^#\$ TOP=(.*)$", _nvcc_dryrun(), re.M)
    return os.path.normpath(top.group(1).strip()) if top else os.path.dirname(os.path.dirname(nvcc_path()))


# The public TileLang's `tilelang.env` is an object whose attributes read the environment when
# read (`tilelang.env.TILELANG_CACHE_DIR`); users also import them (`from tilelang.env import
# CUDA_HOME`) and assign some (`tilelang.env.TILELANG_CACHE_DIR = path`). Here they are module
# attributes computed on access; an assignment sets the environment variable, which is what the
# functions above read. Names whose reader caches its answer cannot be assigned.
PUBLIC_NAMES = {
    # attribute: (environment variable or None, reader)
    "TILELANG_CACHE_DIR": ("TILELANG_CACHE_DIR", cache_dir),
    "TILELANG_DEFAULT_TARGET": ("TILELANG_DEFAULT_TARGET", default_target),
    "TILELANG_DISABLE_CACHE": ("TILELANG_DISABLE_CACHE", lambda: os.environ.get("TILELANG_DISABLE_CACHE", "0")),
    "TILELANG_AUTO_TUNING_DISABLE_CACHE": (
        "TILELANG_AUTO_TUNING_DISABLE_CACHE",
        lambda: os.environ.get("TILELANG_AUTO_TUNING_DISABLE_CACHE", "0"),
    ),
    "TILELANG_TEMPLATE_PATH": (None, template_path),
    "CUTLASS_INCLUDE_DIR": (None, cutlass_include),
    "CUDA_HOME": (None, cuda_home),
}


def __getattr__(name: str):
    if name in PUBLIC_NAMES:
        return PUBLIC_NAMES[name][1]()
    if name == "env":  # `from tilelang.env import env`: the public TileLang's object is this module here
        return sys.modules[__name__]
    raise AttributeError(f"module 'tilelang.env' has no attribute '{name}'")


def get_default_target() -> str:
    """The public TileLang's name for `default_target()`."""
    return default_target()


# The kernel cache's on/off switch (tilelang.cache.enable/disable, tilelang.disable_cache()),
# starting from TILELANG_DISABLE_CACHE. It lives here, as the public TileLang keeps it in its env,
# so `tilelang.env.disable_cache()` works and this module imports nothing of tilelang.
_cache_switch = {"on": not cache_disabled()}


def enable_cache() -> None:
    _cache_switch["on"] = True


def disable_cache() -> None:
    _cache_switch["on"] = False


def is_cache_enabled() -> bool:
    """The switch alone: `tilelang.is_cache_enabled()` is also False while a CUDA source hook is set."""
    return _cache_switch["on"]


class _EnvModule(types.ModuleType):
    def __setattr__(self, name: str, value) -> None:
        if name in PUBLIC_NAMES:
            variable = PUBLIC_NAMES[name][0]
            if variable is None:
                raise AttributeError(
                    f"tilelang.env.{name} is found once per process and cannot be assigned; "
                    "set its environment variable (see tilelang/env.py) before importing tilelang"
                )
            os.environ[variable] = str(value)
            return
        super().__setattr__(name, value)


sys.modules[__name__].__class__ = _EnvModule

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
"""

from __future__ import annotations

import functools
import os
import re
import shutil
import subprocess

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
def cuda_paths() -> tuple[str, str]:
    """The CUDA toolkit's include and library folders, as nvcc itself finds them (it may be a
    wrapper script, so its location alone does not tell)."""
    out = subprocess.run(
        [nvcc_path(), "--dryrun", "-c", "-x", "cu", os.devnull, "-o", os.devnull], capture_output=True, text=True
    ).stderr
    top = re.search(r"^#\$ TOP=(.*)$", out, re.M)
    target_dir = re.findall(r"^#\$ _TARGET_DIR_=(.+)$", out, re.M)
    if not top:
        raise RuntimeError(f"tilelang: cannot locate the CUDA toolkit from `{nvcc_path()} --dryrun`")
    root = os.path.normpath(os.path.join(top.group(1).strip(), target_dir[-1].strip() if target_dir else ""))
    return os.path.join(root, "include"), os.path.join(root, "lib")


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


def default_target() -> str:
    return os.environ.get("TILELANG_DEFAULT_TARGET", "auto")


def autotune_cache_disabled() -> bool:
    return _flag("TILELANG_AUTO_TUNING_DISABLE_CACHE")


def autotune_cpu_count() -> int | None:
    """The number of compile processes the user asked for, or None."""
    value = int(os.environ.get("TILELANG_AUTO_TUNING_CPU_COUNTS", "-1"))
    return value if value > 0 else None


def in_xdist_worker() -> bool:
    return bool(os.environ.get("PYTEST_XDIST_WORKER"))

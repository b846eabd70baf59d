"""A precompiled header for the host unit of a kernel library (`cuda.py`), built once per toolchain.

The host unit is TVM's launcher, a few hundred lines, after the headers it includes: the CUDA
runtime and tvm-ffi's C++ API (`tvm/ffi/function.h` and what it pulls in, ~100k lines of
templates). Parsing those headers was most of the host compile (1.3 s of CPU of 1.4 s, more than
nvcc needs for a GEMM, with which it runs in parallel). GCC can load them precompiled: the
compile gets `-include <folder>/prelude.h`, and GCC reads `prelude.h.gch` beside it instead when
that was built with the same compiler and flags. The generated source does not change; its own
`#include` lines then find the headers already included (include guards).

    flags = host_pch.include_flags(compiler, host_flags)   # [] until the header is built
    subprocess.run([compiler, *host_flags, *flags, "-c", ...])

The first compile without it starts building it in the background (~1.5 s of CPU, ~90 MB in
`<cache>/pch/<key>/`; one process builds it, others wait on a lock there); compiles after that
use it. The key covers what GCC does not check
itself: the headers' text (launch.h, the tvm-ffi and CUDA versions and folders) and the
compiler. A compiler other than GCC, a folder that cannot be written, or a failed build only
mean no precompiled header: the compile reads the headers as before.
"""

from __future__ import annotations

import fcntl
import functools
import hashlib
import importlib.metadata
import logging
import os
import subprocess
import tempfile
import threading

from tilelang import env

logger = logging.getLogger("tilelang")

# What TVM's cuda_host codegen includes (in its order), after the project's launch.h.
PRELUDE = """// The host unit's headers, precompiled (tilelang/codegen/host_pch.py).
#include "tl_templates/host/launch.h"
#include <tvm/ffi/c_api.h>
#include <tvm/ffi/extra/c_env_api.h>
#include <tvm/ffi/extra/cuda/device_guard.h>
#include <tvm/ffi/function.h>
#include <cuda.h>
#include <cuda_runtime.h>
#include <math.h>
"""

_building: dict[str, threading.Thread] = {}
_early: set[str] = set()  # the preludes whose build `start_early` began (in `_building` too)
_lock = threading.Lock()
# How long a host compile waits for the build begun at import (a compile with the header takes ~0.8 s
# less than one without it).
EARLY_WAIT_S = 1.0


@functools.cache
def _is_gcc(compiler: str) -> bool:
    try:
        out = subprocess.run([compiler, "--version"], capture_output=True, text=True, check=True).stdout
    except (OSError, subprocess.CalledProcessError):
        return False
    return "Free Software Foundation" in out and "clang" not in out.lower()


@functools.cache
def _ffi_version() -> str:
    try:
        return importlib.metadata.version("apache-tvm-ffi")
    except importlib.metadata.PackageNotFoundError:
        return ""


@functools.cache
def _compiler_version(compiler: str) -> str:
    return subprocess.run([compiler, "--version"], capture_output=True, text=True).stdout


def host_flags() -> list[str]:
    """Flags for the host unit (the host C++ compiler); known without importing TVM or tvm_ffi, so
    that the header can be built while they are imported (`start_early`)."""
    inc, _ = env.cuda_paths()
    return [
        "-std=c++17",
        "-O2",
        "-fPIC",
        "-fvisibility=hidden",
        "-w",
        f"-I{env.template_path()}",
        f"-I{inc}",
        f"-I{os.path.join(env.tvm_ffi_dir(), 'include')}",
    ]


def folder(compiler: str, flags: list[str]) -> str:
    """`<cache>/pch/<key>`: the key hashes everything the precompiled header's content depends on
    that GCC does not check (the headers themselves: launch.h's text, the others' size and time)."""
    with open(os.path.join(env.template_path(), "tl_templates", "host", "launch.h")) as f:
        parts = [compiler, _compiler_version(compiler), " ".join(flags), PRELUDE, f.read(), _ffi_version()]
    ffi = os.path.join(env.tvm_ffi_dir(), "include", "tvm", "ffi")
    cuda_include = env.cuda_paths()[0]
    for header in (os.path.join(ffi, "function.h"), os.path.join(ffi, "c_api.h"), os.path.join(cuda_include, "cuda.h")):
        st = os.stat(header) if os.path.exists(header) else None
        parts.append(f"{header} {st.st_size if st else -1} {st.st_mtime_ns if st else -1}")
    key = hashlib.sha256("\n".join(parts).encode()).hexdigest()[:24]
    return os.path.join(env.cache_dir(), "pch", key)


def build(compiler: str, flags: list[str]) -> str | None:
    """Build the precompiled header for `flags` (waits); returns its prelude's path, None if it
    cannot be built here. Writes through temporary files renamed into place, so a concurrent
    compile sees the whole header or none."""
    if not _is_gcc(compiler):
        return None
    where = folder(compiler, flags)
    prelude = os.path.join(where, "prelude.h")
    if os.path.exists(prelude + ".gch"):
        return prelude
    try:
        os.makedirs(where, exist_ok=True)
        # One process builds it (the tuner's compile workers all start without it); the others wait.
        with open(os.path.join(where, "build.lock"), "w") as lock:
            fcntl.flock(lock, fcntl.LOCK_EX)
            if not os.path.exists(prelude + ".gch"):
                _build_locked(compiler, flags, where, prelude)
    except OSError as err:
        logger.debug("tilelang: no precompiled host header in %s: %s", where, err)
        return None
    return prelude if os.path.exists(prelude + ".gch") else None


def _build_locked(compiler: str, flags: list[str], where: str, prelude: str) -> None:
    fd, tmp = tempfile.mkstemp(dir=where, suffix=".h")
    with os.fdopen(fd, "w") as f:
        f.write(PRELUDE)
    os.chmod(tmp, 0o644)
    os.replace(tmp, prelude)
    fd, tmp = tempfile.mkstemp(dir=where, suffix=".gch")
    os.close(fd)
    try:
        proc = subprocess.run([compiler, *flags, "-x", "c++-header", "-o", tmp, prelude], capture_output=True)
        if proc.returncode != 0:
            logger.debug("tilelang: no precompiled host header: %s", proc.stderr.decode(errors="replace")[-2000:])
            return
        os.chmod(tmp, 0o644)
        os.replace(tmp, prelude + ".gch")
    finally:
        if os.path.exists(tmp):
            os.remove(tmp)


def include_flags(compiler: str, flags: list[str]) -> list[str]:
    """`-include <prelude>` when the precompiled header for `flags` is built; otherwise starts its
    build in a background thread (once per process; the interpreter waits for it at exit) and
    returns []."""
    if not _is_gcc(compiler):
        return []
    prelude = os.path.join(folder(compiler, flags), "prelude.h")
    if prelude in _early:
        _building[prelude].join(timeout=EARLY_WAIT_S)
    if os.path.exists(prelude + ".gch"):
        return ["-include", prelude]
    with _lock:
        if prelude not in _building:
            _building[prelude] = threading.Thread(target=build, args=(compiler, list(flags)), name="tilelang-pch")
            _building[prelude].start()
    return []


def wait() -> None:
    """Wait for the background builds this process started (benchmarks that time the next compile)."""
    with _lock:
        threads = list(_building.values())
    for thread in threads:
        thread.join()


def start_early() -> None:
    """At `import tilelang`: build the header in a background thread if it is missing, while TVM is
    imported (seconds), so that the first kernel's host compile finds it (without it that compile
    reads the headers itself: ~1 s more, on the first kernel of a fresh cache). Skipped with
    TILELANG_EARLY_HOST_PCH=0; does nothing without nvcc or GCC. Imports neither TVM nor tvm_ffi."""
    if os.environ.get("TILELANG_EARLY_HOST_PCH", "1") == "0":
        return
    threading.Thread(target=_build_early, name="tilelang-pch-early").start()


def _build_early() -> None:
    try:
        compiler = env.host_compiler()
        env.nvcc_path()  # (raises without nvcc: no CUDA kernels to build here)
        if not _is_gcc(compiler):
            return
        flags = host_flags()
        prelude = os.path.join(folder(compiler, flags), "prelude.h")
        if os.path.exists(prelude + ".gch"):
            return
        with _lock:
            if prelude in _building:
                return
            _building[prelude] = threading.current_thread()
            _early.add(prelude)
        build(compiler, flags)
    except Exception as err:  # noqa: BLE001 - a missing toolchain or folder: the compiles go without it
        logger.debug("tilelang: no early precompiled host header: %s", err)

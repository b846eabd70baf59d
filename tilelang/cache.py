"""The on-disk kernel cache: a second process that builds the same kernel loads it instead.

An entry is keyed by everything that decides the generated code: the source of the module that
defines the kernel factory, the factory's name and closure values, its compile-time arguments,
`out_idx`, the target, the pass configs, and the versions of tilelang, TVM and nvcc. A hit
neither traces the kernel nor runs nvcc.

The cache never gives a wrong kernel and never fails a compile; at worst it rebuilds:
- an entry is written to a temporary folder and renamed into place (atomic), so processes that
  compile the same kernel at once leave one whole entry, and a process killed mid-write leaves
  only a `.tmp-*` folder that no lookup reads (removed once it is an hour old);
- `meta.json` records the sha256 of every file of the entry and a checksum of itself, so an
  entry with a flipped byte or a cut file is logged, removed and rebuilt;
- a cache folder that cannot be written (read-only, full disk) is logged once per process and
  the kernel is compiled in a temporary folder instead, uncached.

    import tilelang.cache
    tilelang.cache.clear()          # remove every entry   (also tilelang.clear_cache())
    tilelang.cache.disable()        # or TILELANG_DISABLE_CACHE=1, or tilelang.disable_cache()

While a CUDA post-processing hook is registered (tilelang.engine.callback) the cache is off: an
entry holds the source some hook produced, and what a hook does cannot be part of the key.
"""

from __future__ import annotations

import functools
import hashlib
import inspect
import json
import logging
import os
import shutil
import tempfile
import time
from typing import NamedTuple

from tilelang import env
from tilelang.codegen import libraries

logger = logging.getLogger("tilelang")

# The switch is env's (so that `tilelang.env.disable_cache()` reaches it too).
enable = env.enable_cache
disable = env.disable_cache


def is_enabled() -> bool:
    """Whether compiles read and write the disk cache: enabled, and no CUDA post-processing hook set."""
    from tilelang.codegen.cuda import postproc_hook

    return env.is_cache_enabled() and postproc_hook() is None


def folder() -> str:
    return os.path.join(env.cache_dir(), "kernels")


def clear() -> None:
    """Remove every cached kernel, and the compiled libraries the code generator keeps by source
    hash (its `libs/` folder), so the next compile of any kernel runs nvcc again. Kernels already
    loaded in this process keep working."""
    shutil.rmtree(folder(), ignore_errors=True)
    shutil.rmtree(os.path.join(env.cache_dir(), "libs"), ignore_errors=True)


@functools.cache
def compiler_fingerprint() -> str:
    """A hash of the compiler's own sources (its Python files and device templates), so a changed
    compiler never reuses kernels another version built, even at the same version number."""
    digest = hashlib.sha256()
    roots = [env.PACKAGE_DIR, os.path.join(env.template_path(), "tl_templates")]
    for root in roots:
        for dirpath, dirnames, filenames in os.walk(root):
            dirnames.sort()
            for name in sorted(filenames):
                if name.endswith((".py", ".h")):
                    with open(os.path.join(dirpath, name), "rb") as f:
                        digest.update(name.encode() + f.read())
    return digest.hexdigest()


def _module_source(fn) -> str:
    try:
        path = inspect.getsourcefile(fn)
        with open(path, encoding="utf-8") as f:
            return f.read()
    except (OSError, TypeError):
        return inspect.getsource(fn)


def _closure(fn) -> list:
    cells = fn.__closure__ or ()
    return [f"{name}={cell.cell_contents!r}" for name, cell in zip(fn.__code__.co_freevars, cells)]


def key_for(factory, args, kwargs, out_idx, target, pass_configs, compile_flags=()) -> str:
    """The cache key of one compiled kernel (hex sha256); `compile_flags` are the extra nvcc flags."""
    import tvm

    from tilelang.codegen.cuda import nvcc_version
    from tilelang.version import __version__

    parts = {
        "module": hashlib.sha256(_module_source(factory).encode()).hexdigest(),
        "factory": factory.__qualname__,
        "closure": _closure(factory),
        "args": repr(args),
        "kwargs": repr(sorted(kwargs.items())),
        "out_idx": repr(out_idx),
        "target": str(target),
        "pass_configs": repr(sorted((pass_configs or {}).items())),
        "compile_flags": list(compile_flags),
        "versions": [__version__, compiler_fingerprint(), tvm.__version__, nvcc_version()],
    }
    return hashlib.sha256(json.dumps(parts, sort_keys=True).encode()).hexdigest()


def _digest(path: str) -> str:
    with open(path, "rb") as f:
        return hashlib.sha256(f.read()).hexdigest()


def _checksum(body: dict) -> str:
    return hashlib.sha256(json.dumps(body, sort_keys=True).encode()).hexdigest()


_FILES = ("kernel.so", "device.cu", "host.cc")
_STALE_SECONDS = 3600  # a `.tmp-*` folder this old belongs to a writer that died


def store(key: str, kernel) -> None:
    """Write `kernel` (already built) as entry `key`, atomically; an existing entry wins. A cache
    that cannot be written is logged (`libraries.warn_unwritable`), never an error."""
    final = os.path.join(folder(), key)
    if os.path.isdir(final):
        return
    tmp = None
    try:
        os.makedirs(folder(), exist_ok=True)
        tmp = tempfile.mkdtemp(prefix=".tmp-", dir=folder())
        shutil.copyfile(kernel._lib_path, os.path.join(tmp, "kernel.so"))
        for name, text in (("device.cu", kernel.kernel_source), ("host.cc", kernel.host_source)):
            with open(os.path.join(tmp, name), "w", encoding="utf-8") as f:
                f.write(text)
        body = {"kernel": kernel.describe(), "files": {n: _digest(os.path.join(tmp, n)) for n in _FILES}}
        with open(os.path.join(tmp, "meta.json"), "w", encoding="utf-8") as f:
            json.dump({**body, "checksum": _checksum(body)}, f)
        try:
            os.rename(tmp, final)  # atomic; fails if another process got there first
        except OSError:
            if not os.path.isdir(final):
                raise
            shutil.rmtree(tmp, ignore_errors=True)
        tmp = None
        _remove_stale_temporaries()
    except OSError as err:
        libraries.warn_unwritable(folder(), err)
    finally:
        if tmp is not None:
            shutil.rmtree(tmp, ignore_errors=True)


def _remove_stale_temporaries() -> None:
    """Remove the `.tmp-*` folders of writers killed mid-write (live writers finish in seconds)."""
    now = time.time()
    for name in os.listdir(folder()):
        path = os.path.join(folder(), name)
        try:
            if name.startswith(".tmp-") and now - os.path.getmtime(path) > _STALE_SECONDS:
                shutil.rmtree(path, ignore_errors=True)
        except OSError:  # removed by another process meanwhile
            pass


class Entry(NamedTuple):
    """What a cache entry holds to rebuild a kernel without compiling (`JITKernel.from_cache`)."""

    meta: dict
    kernel_source: str
    host_source: str
    lib_path: str


def load(key: str) -> Entry | None:
    """The entry `key`, or None on a miss. An entry whose files or metadata do not match their
    checksums (a cut or corrupted file) is logged, removed and reported as a miss."""
    final = os.path.join(folder(), key)
    if not os.path.isdir(final):
        return None
    try:
        with open(os.path.join(final, "meta.json"), encoding="utf-8") as f:
            meta = json.load(f)
        body = {"kernel": meta["kernel"], "files": meta["files"]}
        if _checksum(body) != meta["checksum"]:
            raise ValueError("its metadata does not match its checksum")
        for name in _FILES:
            if _digest(os.path.join(final, name)) != body["files"][name]:
                raise ValueError(f"{name} does not match its checksum")
        sources = []
        for name in ("device.cu", "host.cc"):
            with open(os.path.join(final, name), encoding="utf-8") as f:
                sources.append(f.read())
        return Entry(body["kernel"], sources[0], sources[1], os.path.join(final, "kernel.so"))
    except (OSError, ValueError, KeyError, TypeError) as err:  # (JSON and UTF-8 errors are ValueErrors)
        logger.warning("tilelang: corrupt cache entry %s (%s); rebuilding it", final, err)
        shutil.rmtree(final, ignore_errors=True)
        return None

"""The folder of compiled libraries `cuda.build_library` reuses, keyed by the hash of their sources
and flags (`<cache>/libs/<key>.so`).

A library is built in a temporary folder and published under a lock (`fcntl.flock` on
`<key>.so.lock`): first the library by `os.replace`, then `<key>.so.sha256`, its checksum. A
library is reused only when it matches its checksum, so a process killed before publishing
the checksum, or a cut or corrupted file, means a rebuild, never a library that fails to load.
Processes building the same library at once wait on the lock; the second finds it built.

A folder that cannot be written (read-only, full disk) is not an error: the library is built in
a folder of this process (`private_folder`), removed when the process exits.
"""

from __future__ import annotations

import atexit
import contextlib
import errno
import fcntl
import functools
import hashlib
import logging
import os
import shutil
import tempfile

from tilelang import env

logger = logging.getLogger("tilelang")

# The errors that mean "this folder cannot hold the library" (the build goes elsewhere); any other
# OSError (nvcc missing, ...) is raised.
UNWRITABLE = {errno.EACCES, errno.EPERM, errno.EROFS, errno.ENOSPC, errno.EDQUOT}
_warned: set[str] = set()


def folder() -> str:
    return os.path.join(env.cache_dir(), "libs")


def _digest(path: str) -> str:
    with open(path, "rb") as f:
        return hashlib.sha256(f.read()).hexdigest()


def intact(lib: str) -> bool:
    """Whether `lib` exists and matches its published checksum."""
    try:
        with open(lib + ".sha256", encoding="ascii") as f:
            want = f.read().strip()
        return _digest(lib) == want
    except (OSError, ValueError):
        return False


@contextlib.contextmanager
def locked(lib: str):
    """Hold the lock of `lib` (creating its folder); another process holding it is waited for."""
    os.makedirs(os.path.dirname(lib), exist_ok=True)
    with open(lib + ".lock", "a") as f:
        fcntl.flock(f, fcntl.LOCK_EX)  # released when the file is closed, or the process dies
        yield


def publish(built: str, lib: str) -> None:
    """Move the library `built` to `lib`, then write its checksum (call under `locked(lib)`)."""
    digest = _digest(built)
    os.replace(built, lib)
    tmp = f"{lib}.sha256.{os.getpid()}"
    try:
        with open(tmp, "w", encoding="ascii") as f:
            f.write(digest)
        os.replace(tmp, lib + ".sha256")
    finally:
        if os.path.exists(tmp):
            os.remove(tmp)


@functools.cache
def private_folder() -> str:
    """A folder of this process for libraries the cache cannot hold; removed at exit."""
    path = tempfile.mkdtemp(prefix="tilelang-libs-")
    atexit.register(shutil.rmtree, path, True)
    return path


def warn_unwritable(path: str, err: OSError) -> None:
    """Log, once per process and cache folder, that the cache at `path` cannot be written."""
    root = env.cache_dir()
    if root in _warned:
        return
    _warned.add(root)
    logger.warning(
        "tilelang: cannot write the kernel cache at %s (%s); kernels are compiled in a temporary "
        "folder and not cached (set TILELANG_CACHE_DIR to a writable folder)",
        path,
        err.strerror or err,
    )


def reuse_or_build(key: str, build, out_dir: str | None = None) -> str:
    """The library `<out_dir>/<key>.so`: reused when it matches its checksum, else built by
    `build(folder, publish)` (which compiles in `folder` and calls `publish(path)` with the built
    file) under the library's lock. Where the folder cannot be written, the library is built in
    this process's private folder, with a warning."""
    out_dir = out_dir or folder()
    lib = os.path.join(out_dir, f"{key}.so")
    if intact(lib):
        return lib
    try:
        with locked(lib):
            if not intact(lib):  # (a process holding the lock before may have built it)
                if os.path.exists(lib):
                    logger.warning("tilelang: %s does not match its checksum; rebuilding it", lib)
                build(out_dir, lambda built: publish(built, lib))
        return lib
    except OSError as err:
        if err.errno not in UNWRITABLE:
            raise
        warn_unwritable(out_dir, err)
    lib = os.path.join(private_folder(), f"{key}.so")
    if not os.path.exists(lib):
        build(private_folder(), lambda built: os.replace(built, lib))
    return lib

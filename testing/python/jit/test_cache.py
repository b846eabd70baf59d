"""The disk cache: keys, hits skip tracing, and what must never give a wrong kernel or fail a compile:
concurrent writers, a writer killed mid-write, corrupted entries, a read-only cache folder, a full disk."""

import builtins
import errno
import json
import logging
import os
import shutil
import stat
import subprocess
import sys
import tempfile
import textwrap

import pytest

import tilelang
import tilelang.language as T
from tilelang import cache
from tilelang.utils.target import determine_target

TRACED = []


def scaled_copy(N, factor=2.0):
    TRACED.append(N)

    @T.prim_func
    def main(A: T.Tensor((N,), "float32"), B: T.Tensor((N,), "float32")):
        with T.Kernel(T.ceildiv(N, 128), threads=128) as bx:
            for i in T.Parallel(128):
                B[bx * 128 + i] = A[bx * 128 + i] * factor

    return main


@pytest.fixture
def cache_dir(tmp_path, monkeypatch):
    monkeypatch.setenv("TILELANG_CACHE_DIR", str(tmp_path))
    cache.enable()
    return tmp_path


def _key(*args, target="sm_80", configs=None, **kwargs):
    return cache.key_for(scaled_copy, args, kwargs, [-1], determine_target(target), configs)


def test_key_changes_with_what_changes_the_code():
    base = _key(1024)
    assert base == _key(1024)
    assert base != _key(2048)
    assert base != _key(1024, factor=3.0)
    assert base != _key(1024, target="sm_90a")
    assert base != _key(1024, configs={"tl.enable_fast_math": True})


def test_key_is_the_same_in_another_process():
    code = textwrap.dedent(f"""
        import sys; sys.path.insert(0, {os.path.dirname(__file__)!r}); sys.path.insert(0, {os.getcwd()!r})
        import test_cache
        print(test_cache._key(1024))
    """)
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout.strip()
    assert out.splitlines()[-1] == _key(1024)


def test_hit_skips_tracing_and_nvcc(cache_dir):
    first = tilelang.jit(out_idx=[-1], target="sm_80")(scaled_copy)(4096)
    first._ensure_built()  # nvcc once; the entry is stored now
    assert len(os.listdir(cache_dir / "kernels")) == 1
    TRACED.clear()
    again = tilelang.jit(out_idx=[-1], target="sm_80")(scaled_copy)(4096)  # a fresh factory: no in-memory hit
    assert TRACED == [] and again.prim_func is None
    assert again.get_kernel_source() == first.get_kernel_source() and again.out_idx == [1]
    assert [p.shape for p in again.params] == [(4096,), (4096,)]


def _flip_byte(path, at=None):
    data = bytearray(path.read_bytes())
    data[len(data) // 2 if at is None else at] ^= 0x01
    path.write_bytes(bytes(data))


def _grow_a_shape(path):
    """Change the first parameter's shape in meta.json, keeping valid JSON (a wrong kernel if trusted)."""
    meta = json.loads(path.read_text())
    meta["kernel"]["params"][0]["shape"][0] += 1
    path.write_text(json.dumps(meta))


CORRUPTIONS = {
    "library cut": lambda entry: (entry / "kernel.so").write_bytes((entry / "kernel.so").read_bytes()[:4096]),
    "library byte flipped": lambda entry: _flip_byte(entry / "kernel.so"),
    "library missing": lambda entry: (entry / "kernel.so").unlink(),
    "device source byte flipped": lambda entry: _flip_byte(entry / "device.cu"),
    "host source byte flipped": lambda entry: _flip_byte(entry / "host.cc"),
    "metadata cut": lambda entry: (entry / "meta.json").write_text((entry / "meta.json").read_text()[:40]),
    "metadata changed, still JSON": lambda entry: _grow_a_shape(entry / "meta.json"),
    "metadata checksum flipped": lambda entry: _flip_byte(entry / "meta.json", at=-3),
}


@pytest.mark.parametrize("corrupt", list(CORRUPTIONS))
def test_corrupt_entry_is_logged_and_rebuilt(cache_dir, caplog, corrupt):
    kernel = tilelang.jit(out_idx=[-1], target="sm_80")(scaled_copy)(2048)
    kernel._ensure_built()
    (entry,) = (cache_dir / "kernels").iterdir()
    CORRUPTIONS[corrupt](entry)
    TRACED.clear()
    with caplog.at_level("WARNING", logger="tilelang"):
        again = tilelang.jit(out_idx=[-1], target="sm_80")(scaled_copy)(2048)
    assert "corrupt cache entry" in caplog.text and TRACED == [2048]
    assert again.get_kernel_source() == kernel.get_kernel_source()
    assert [p.shape for p in again.params] == [(2048,), (2048,)]
    # Traced again, the kernel came from this process's in-memory cache, already built: the entry is
    # written again at once, whole, from its library.
    assert cache.load(entry.name).meta["params"] == [p.to_json() for p in kernel.params]


def _python(code, cache_dir, prefix=()):
    """Start `code` in a fresh interpreter that can import this module, on cache folder `cache_dir`."""
    head = f"import sys; sys.path.insert(0, {os.path.dirname(__file__)!r}); sys.path.insert(0, {os.getcwd()!r})\n"
    env = dict(os.environ, TILELANG_CACHE_DIR=str(cache_dir))
    command = [*prefix, sys.executable, "-c", head + textwrap.dedent(code)]
    return subprocess.Popen(command, env=env, text=True, stdout=subprocess.PIPE, stderr=subprocess.PIPE)


def test_concurrent_processes_leave_one_whole_entry(cache_dir):
    # Each process waits until all are ready, then they compile the same kernel at the same time.
    code = f"""
        import os, time, test_cache, tilelang
        open(os.path.join({str(cache_dir)!r}, f"ready-{{os.getpid()}}"), "w").close()
        while sum(n.startswith("ready-") for n in os.listdir({str(cache_dir)!r})) < 3:
            time.sleep(0.01)
        kernel = tilelang.jit(out_idx=[-1], target="sm_80")(test_cache.scaled_copy)(8192)
        kernel._ensure_built()  # loads the library: a partly written one would fail here
    """
    procs = [_python(code, cache_dir) for _ in range(3)]
    outs = [p.communicate() for p in procs]
    assert [p.returncode for p in procs] == [0, 0, 0], [err[-3000:] for _, err in outs]
    assert not any("corrupt" in err or "does not match" in err for _, err in outs)
    entries = os.listdir(cache_dir / "kernels")
    assert len(entries) == 1 and not entries[0].startswith(".tmp")
    assert cache.load(entries[0]) is not None
    libs = sorted(os.listdir(cache_dir / "libs"))
    assert [n.split(".", 1)[1] for n in libs] == ["so", "so.lock", "so.sha256"]  # one library, whole


def test_a_writer_killed_mid_write_leaves_no_entry(cache_dir):
    # The process dies (SIGKILL) after writing the entry's files, before renaming its folder in place.
    code = """
        import os, signal, test_cache, tilelang
        from tilelang import cache
        cache._checksum = lambda body: os.kill(os.getpid(), signal.SIGKILL)
        tilelang.jit(out_idx=[-1], target="sm_80")(test_cache.scaled_copy)(4096)._ensure_built()
    """
    proc = _python(code, cache_dir)
    proc.communicate()
    assert proc.returncode == -9
    (left,) = os.listdir(cache_dir / "kernels")
    assert left.startswith(".tmp-") and os.listdir(cache_dir / "kernels" / left)  # a partial entry
    TRACED.clear()
    kernel = tilelang.jit(out_idx=[-1], target="sm_80")(scaled_copy)(4096)
    assert TRACED == [4096]  # the partial entry was not read: the kernel is built
    kernel._ensure_built()
    entries = [n for n in os.listdir(cache_dir / "kernels") if not n.startswith(".tmp-")]
    assert len(entries) == 1 and cache.load(entries[0]) is not None
    # An hour later the dead writer's folder is removed by the next store.
    os.utime(cache_dir / "kernels" / left, (0, 0))
    tilelang.jit(out_idx=[-1], target="sm_80")(scaled_copy)(1024)._ensure_built()
    assert not (cache_dir / "kernels" / left).exists()


def _without_write_permission():
    """The command prefix that runs a process which file permissions bind (root's bypass them)."""
    if os.geteuid() != 0:
        return []
    if shutil.which("setpriv") is None:
        pytest.skip("running as root without setpriv: no process here is refused a write by permissions")
    return ["setpriv", "--bounding-set=-dac_override,-dac_read_search", "--"]


def _set_writable(root, writable):
    for path in [root, *root.rglob("*")]:
        mode = path.stat().st_mode
        path.chmod(mode | stat.S_IWUSR if writable else mode & ~(stat.S_IWUSR | stat.S_IWGRP | stat.S_IWOTH))


def _kernels_and_libraries(cache_dir):
    """(folder, path, size) of everything under the cache's kernels/ and libs/ folders."""
    return sorted((f, p, p.stat().st_size) for f in ("kernels", "libs") for p in (cache_dir / f).rglob("*"))


def test_read_only_cache_compiles_warns_once_and_writes_nothing(cache_dir):
    tilelang.jit(out_idx=[-1], target="sm_80")(scaled_copy)(2048)._ensure_built()  # one entry before
    prefix = _without_write_permission()
    before = _kernels_and_libraries(cache_dir)
    code = """
        import test_cache, tilelang
        hit = tilelang.jit(out_idx=[-1], target="sm_80")(test_cache.scaled_copy)(2048)
        assert test_cache.TRACED == [] and hit.prim_func is None  # a read-only cache still serves hits
        hit._ensure_built()
        for n in (4096, 8192):  # two kernels built: one warning
            kernel = tilelang.jit(out_idx=[-1], target="sm_80")(test_cache.scaled_copy)(n)
            kernel._ensure_built()
        assert test_cache.TRACED == [4096, 8192]
        print(kernel._lib_path)
    """
    _set_writable(cache_dir, False)
    try:
        proc = _python(code, cache_dir, prefix)
        out, err = proc.communicate()
    finally:
        _set_writable(cache_dir, True)
    assert proc.returncode == 0, err[-3000:]
    assert err.count("cannot write the kernel cache") == 1 and "Permission denied" in err, err[-3000:]
    assert "corrupt" not in err
    assert not out.strip().startswith(str(cache_dir))  # built in a temporary folder
    assert _kernels_and_libraries(cache_dir) == before


def test_full_disk_compiles_and_warns(cache_dir, caplog, monkeypatch):
    real_open = builtins.open

    def open_on_a_full_disk(file, mode="r", *args, **kwargs):
        if str(file).startswith(str(cache_dir)) and any(c in mode for c in "wax+"):
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC), str(file))
        return real_open(file, mode, *args, **kwargs)

    monkeypatch.setattr(builtins, "open", open_on_a_full_disk)
    with caplog.at_level("WARNING", logger="tilelang"):
        for n in (1024, 3072):
            kernel = tilelang.jit(out_idx=[-1], target="sm_80")(scaled_copy)(n)
            kernel._ensure_built()
            assert kernel._lib_path.startswith(tempfile.gettempdir()) and not kernel._lib_path.startswith(
                str(cache_dir)
            )
            assert kernel.params[0].shape == (n,)
    warnings = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
    assert len(warnings) == 1 and "No space left on device" in warnings[0]
    assert [p for _, p, _ in _kernels_and_libraries(cache_dir) if p.is_file()] == []  # no partial file left


def test_clear_and_disable(cache_dir):
    tilelang.jit(out_idx=[-1], target="sm_80")(scaled_copy)(1024)._ensure_built()
    cache.clear()
    assert not (cache_dir / "kernels").exists()
    cache.disable()
    try:
        tilelang.jit(out_idx=[-1], target="sm_80")(scaled_copy)(1024)._ensure_built()
        assert not (cache_dir / "kernels").exists()
    finally:
        cache.enable()


def test_tilelang_exposes_the_cache():
    assert tilelang.cache is cache

"""The disk cache: keys, atomic entries under concurrent writers, corrupt-entry recovery, hits skip tracing."""

import os
import subprocess
import sys
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


def test_corrupt_entry_is_logged_and_rebuilt(cache_dir, caplog):
    kernel = tilelang.jit(out_idx=[-1], target="sm_80")(scaled_copy)(2048)
    kernel._ensure_built()
    (entry,) = (cache_dir / "kernels").iterdir()
    (entry / "kernel.so").write_bytes(b"truncated")
    TRACED.clear()
    with caplog.at_level("WARNING", logger="tilelang"):
        tilelang.jit(out_idx=[-1], target="sm_80")(scaled_copy)(2048)
    assert "corrupt cache entry" in caplog.text and TRACED == [2048]
    # Traced again, the kernel came from this process's in-memory cache, already built: the entry is
    # written again at once, whole, from its library.
    assert cache.load(entry.name) is not None


def test_concurrent_processes_leave_one_whole_entry(cache_dir):
    code = textwrap.dedent(f"""
        import sys; sys.path.insert(0, {os.path.dirname(__file__)!r}); sys.path.insert(0, {os.getcwd()!r})
        import test_cache
        import tilelang
        tilelang.jit(out_idx=[-1], target="sm_80")(test_cache.scaled_copy)(8192)._ensure_built()
    """)
    env = dict(os.environ, TILELANG_CACHE_DIR=str(cache_dir))
    procs = [subprocess.Popen([sys.executable, "-c", code], env=env) for _ in range(2)]
    assert [p.wait() for p in procs] == [0, 0]
    entries = os.listdir(cache_dir / "kernels")
    assert len(entries) == 1 and not entries[0].startswith(".tmp")
    assert cache.load(entries[0]) is not None


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

"""The compiled-library folder `cuda.build_library` reuses: a library that does not match its checksum
(cut, a byte flipped, or published by a process killed before its checksum) is rebuilt, never loaded."""

import logging
import os

import pytest
import tvm_ffi

import tilelang
import tilelang.language as T
from tilelang.codegen import cuda, libraries


def _kernel():
    @T.prim_func
    def main(A: T.Tensor((1024,), "float32"), B: T.Tensor((1024,), "float32")):
        with T.Kernel(8, threads=128) as bx:
            for i in T.Parallel(128):
                B[bx * 128 + i] = A[bx * 128 + i] + 1.0

    return tilelang.compile(main, target="sm_80")


def _cut(lib):
    with open(lib, "r+b") as f:
        f.truncate(4096)


def _flip(lib):
    with open(lib, "r+b") as f:
        f.seek(2048)
        byte = f.read(1)[0]
        f.seek(2048)
        f.write(bytes([byte ^ 0x01]))


def _published_without_checksum(lib):  # killed between publishing the library and its checksum
    os.remove(lib + ".sha256")
    _cut(lib)


@pytest.mark.parametrize("damage", [_cut, _flip, _published_without_checksum], ids=lambda f: f.__name__)
def test_a_damaged_library_is_rebuilt(tmp_path, caplog, damage):
    k = _kernel()

    def build():
        return cuda.build_library(k.get_kernel_source(), k.get_host_source(), k.target, out_dir=str(tmp_path))

    lib = build()
    assert libraries.intact(lib)
    damage(lib)
    assert not libraries.intact(lib)
    with caplog.at_level(logging.WARNING, logger="tilelang"):
        assert build() == lib
    assert "does not match its checksum; rebuilding it" in caplog.text
    assert libraries.intact(lib)
    assert tvm_ffi.load_module(lib)["main"] is not None  # (first load of this path in the process)


def test_an_intact_library_is_reused_without_a_lock(tmp_path, monkeypatch):
    k = _kernel()
    lib = cuda.build_library(k.get_kernel_source(), k.get_host_source(), k.target, out_dir=str(tmp_path))
    monkeypatch.setattr(libraries, "locked", None)  # a read-only folder could not take it
    assert cuda.build_library(k.get_kernel_source(), k.get_host_source(), k.target, out_dir=str(tmp_path)) == lib

"""The host unit's headers precompiled once (codegen/host_pch.py): GCC uses the header, the object
code is the one compiled without it, and where it cannot be built the compile goes on without."""

import os
import re
import shutil
import subprocess
import sys
import threading
import time

import pytest

import tilelang
import tilelang.language as T
from tilelang import env
from tilelang.codegen import cuda, host_pch

needs_toolchain = pytest.mark.skipif(
    shutil.which("nvcc") is None or not host_pch._is_gcc(env.host_compiler()), reason="nvcc and g++ needed"
)


def _host_source() -> str:
    @T.prim_func
    def main(A: T.Tensor((1024,), "float32"), B: T.Tensor((1024,), "float32")):
        with T.Kernel(8, threads=128) as bx:
            for i in T.Parallel(128):
                B[bx * 128 + i] = A[bx * 128 + i] * 2.0

    return tilelang.compile(main, target="sm_90a").get_host_source()


def _compile(tmp_path, flags, extra, name):
    """Compile the host unit (one path for every compile: its name is in the object's strings)."""
    cc, obj = tmp_path / "host.cc", tmp_path / f"{name}.o"
    cc.write_text(_host_source())
    out = subprocess.run(
        [env.host_compiler(), *flags, *extra, "-H", "-c", "-o", str(obj), str(cc)], capture_output=True, text=True
    )
    assert out.returncode == 0, out.stderr[-3000:]
    disasm = subprocess.run(["objdump", "-d", "--no-show-raw-insn", str(obj)], capture_output=True, text=True)
    # Instructions at their addresses, without the line naming the object file and without objdump's
    # `<symbol+offset>` notes (it may describe one address from another nearby symbol).
    return out.stderr, re.sub(r"<[^>]*>", "", disasm.stdout.split("\n", 3)[-1])


@needs_toolchain
def test_the_precompiled_header_is_used_and_changes_no_code(tmp_path, monkeypatch):
    monkeypatch.setenv("TILELANG_CACHE_DIR", str(tmp_path / "cache"))
    compiler, flags = env.host_compiler(), cuda.host_flags()
    prelude = host_pch.build(compiler, flags)
    assert prelude == os.path.join(host_pch.folder(compiler, flags), "prelude.h")
    assert os.path.exists(prelude + ".gch")
    assert host_pch.include_flags(compiler, flags) == ["-include", prelude]
    with_pch, code = _compile(tmp_path, flags, ["-include", prelude], "with")
    assert f"! {prelude}.gch" in with_pch  # `-H`: `!` marks a precompiled header GCC loaded
    without, plain_code = _compile(tmp_path, flags, [], "without")
    assert ".gch" not in without and code == plain_code


@needs_toolchain
def test_other_flags_have_their_own_header(tmp_path, monkeypatch):
    monkeypatch.setenv("TILELANG_CACHE_DIR", str(tmp_path / "cache"))
    compiler, flags = env.host_compiler(), cuda.host_flags()
    assert host_pch.folder(compiler, flags) != host_pch.folder(compiler, [*flags, "-DX=1"])


@needs_toolchain
def test_no_header_where_the_cache_cannot_be_written(tmp_path, monkeypatch):
    (tmp_path / "file").write_text("")
    monkeypatch.setenv("TILELANG_CACHE_DIR", str(tmp_path / "file" / "cache"))  # under a file: not a folder
    compiler, flags = env.host_compiler(), cuda.host_flags()
    assert host_pch.build(compiler, flags) is None
    assert host_pch.include_flags(compiler, flags) == []
    _compile(tmp_path, flags, host_pch.include_flags(compiler, flags), "plain")


def test_no_header_for_a_compiler_other_than_gcc(monkeypatch):
    monkeypatch.setattr(host_pch, "_is_gcc", lambda compiler: False)
    assert host_pch.include_flags("clang++", ["-O2"]) == [] and host_pch.build("clang++", ["-O2"]) is None


@needs_toolchain
def test_import_builds_the_header_in_the_background(tmp_path):
    # The build begun at `import tilelang` (while TVM is imported) leaves the header in the cache;
    # the interpreter waits for it at exit. TILELANG_EARLY_HOST_PCH=0 turns it off.
    run = {**os.environ, "TILELANG_CACHE_DIR": str(tmp_path / "on")}
    subprocess.run([sys.executable, "-c", "import tilelang"], env=run, check=True, capture_output=True)
    assert len(list((tmp_path / "on" / "pch").glob("*/prelude.h.gch"))) == 1
    off = {**run, "TILELANG_CACHE_DIR": str(tmp_path / "off"), "TILELANG_EARLY_HOST_PCH": "0"}
    subprocess.run([sys.executable, "-c", "import tilelang"], env=off, check=True, capture_output=True)
    assert not (tmp_path / "off" / "pch").exists()


def test_a_host_compile_waits_for_the_build_begun_at_import(tmp_path, monkeypatch):
    monkeypatch.setattr(host_pch, "_is_gcc", lambda compiler: True)
    monkeypatch.setattr(host_pch, "folder", lambda compiler, flags: str(tmp_path))
    prelude = str(tmp_path / "prelude.h")

    def late_build():
        time.sleep(0.2)
        (tmp_path / "prelude.h.gch").write_text("")

    early = threading.Thread(target=late_build)
    monkeypatch.setitem(host_pch._building, prelude, early)
    monkeypatch.setattr(host_pch, "_early", {prelude})
    early.start()
    assert host_pch.include_flags("g++", ["-O2"]) == ["-include", prelude]

"""The options of `@tilelang.jit` and `tilelang.compile` beyond out_idx/target/pass_configs: each does
what TileLang documents or is refused naming itself (compile_flags, execution_backend, target_host,
debug_root_path, verbose)."""

import logging
import os

import pytest
from tvm.target import Target

import tilelang
import tilelang.language as T
from tilelang import cache
from tilelang.codegen.cuda import CompileError
from tilelang.errors import UserError
from tilelang.jit.options import normalize_compile_flags
from tilelang.utils.target import determine_target


def _make(factor):
    @T.prim_func
    def scaled(A: T.Tensor((256,), "float32"), B: T.Tensor((256,), "float32")):
        with T.Kernel(2, threads=128) as bx:
            for i in T.Parallel(128):
                B[bx * 128 + i] = A[bx * 128 + i] * factor

    return scaled


# ---- compile_flags --------------------------------------------------------------------------------


def test_compile_flags_are_split_like_a_command_line():
    assert normalize_compile_flags(None, "x") == ()
    assert normalize_compile_flags("-O3 -DNDEBUG", "x") == ("-O3", "-DNDEBUG")
    assert normalize_compile_flags(["-DX='a b'", "--ptxas-options=-v"], "x") == ("-DX=a b", "--ptxas-options=-v")
    # raised at the call: the traceback shows the user's line
    with pytest.raises(UserError, match="compile_flags takes a string or a list of strings, got 3"):
        normalize_compile_flags(3, "tilelang.compile")


def test_compile_flags_reach_nvcc():
    kernel = tilelang.compile(_make(1.25), out_idx=-1, target="sm_80", compile_flags=["--no-such-nvcc-flag"])
    assert kernel.compile_flags == ("--no-such-nvcc-flag",)
    with pytest.raises(CompileError, match="no-such-nvcc-flag"):
        kernel._ensure_built()


def test_the_flags_public_examples_pass_build():
    # The list TileLang's MLA decode example passes (nvcc accepts each next to ours).
    flags = [
        "-O3",
        "-Wno-deprecated-declarations",
        "-U__CUDA_NO_HALF_OPERATORS__",
        "-U__CUDA_NO_HALF_CONVERSIONS__",
        "-U__CUDA_NO_HALF2_OPERATORS__",
        "-U__CUDA_NO_BFLOAT16_CONVERSIONS__",
        "--expt-relaxed-constexpr",
        "--expt-extended-lambda",
        "--ptxas-options=-v,--register-usage-level=10",
        "-DNDEBUG",
    ]
    plain = tilelang.compile(_make(1.5), out_idx=-1, target="sm_90a")
    flagged = tilelang.compile(_make(1.5), out_idx=-1, target="sm_90a", compile_flags=flags)
    assert flagged is not plain and flagged.compile_flags == tuple(flags)
    flagged._ensure_built()


def test_compile_flags_are_part_of_the_cache_keys():
    target = determine_target("sm_80")
    base = cache.key_for(_make, (1.0,), {}, -1, target, None)
    assert cache.key_for(_make, (1.0,), {}, -1, target, None, ("-DNDEBUG",)) != base

    @tilelang.jit(out_idx=-1, target="sm_80", compile_flags="-DNDEBUG")
    def flagged(factor):
        return _make(factor)

    assert flagged.compile_flags == ("-DNDEBUG",)
    assert flagged(2.0).compile_flags == ("-DNDEBUG",)
    assert flagged(2.0) is not tilelang.jit(out_idx=-1, target="sm_80")(_make)(2.0)


# ---- execution_backend, target_host ---------------------------------------------------------------


@pytest.mark.parametrize("backend", [None, "auto", "tvm_ffi", "cython"])
def test_backends_meaning_our_launcher_are_accepted(backend):
    kernel = tilelang.compile(_make(2.0), out_idx=-1, target="sm_80", execution_backend=backend)
    assert "TVMFFIEnvTensorAlloc" in kernel.get_host_source()
    tilelang.jit(execution_backend=backend, target="sm_80")(_make)


@pytest.mark.parametrize("backend", ["nvrtc", "cutedsl", "torch", "ctypes", "dlpack"])
def test_other_backends_are_refused_naming_what_there_is(backend):
    with pytest.raises(  # raised at the call: the traceback shows the user's line
        UserError, match=rf"execution_backend='{backend}' is not available.*'auto', 'tvm_ffi', 'cython'"
    ):
        tilelang.jit(execution_backend=backend)(_make)
    # raised at the call: the traceback shows the user's line
    with pytest.raises(UserError, match=rf"tilelang.compile: execution_backend='{backend}'"):
        tilelang.compile(_make(2.0), execution_backend=backend, target="sm_80")


def test_unknown_backend():
    # raised at the call: the traceback shows the user's line
    with pytest.raises(UserError, match="unknown execution_backend 'cuda_graph'"):
        tilelang.jit(execution_backend="cuda_graph")


@pytest.mark.parametrize("host", [None, "c", "llvm", {"kind": "llvm"}, "tvm:llvm", "tvm:c"])
def test_host_targets_meaning_this_machine_are_accepted(host):
    if isinstance(host, str) and host.startswith("tvm:"):
        host = Target(host[4:])
    tilelang.compile(_make(2.0), target="sm_80", target_host=host)


@pytest.mark.parametrize(
    "host", ["llvm -mtriple=aarch64-linux-gnu", "cuda", {"kind": "llvm", "mtriple": "x"}, "tvm:aarch64"]
)
def test_cross_compiling_the_host_is_refused(host):
    if host == "tvm:aarch64":
        host = Target({"kind": "llvm", "mtriple": "aarch64-linux-gnu"})
    # raised at the call: the traceback shows the user's line
    with pytest.raises(UserError, match=r"target_host=.* is not supported; the host launcher is always C\+\+"):
        tilelang.jit(target_host=host)(_make)


# ---- debug_root_path, verbose ---------------------------------------------------------------------


def test_debug_root_path_writes_the_sources(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)

    @tilelang.jit(out_idx=-1, target="sm_80", debug_root_path="dump")
    def debugged(factor):
        return _make(factor)

    kernel = debugged(3.0)
    folder = tmp_path / "dump"
    assert sorted(os.listdir(folder)) == [
        "tilelang_jit_host_debugged.cc",
        "tilelang_jit_kernel_debugged.c",
        "tilelang_jit_program_debugged.py",
    ]
    assert (folder / "tilelang_jit_kernel_debugged.c").read_text() == kernel.get_kernel_source()
    assert "T.prim_func" in (folder / "tilelang_jit_program_debugged.py").read_text()
    # raised at the call: the traceback shows the user's line
    with pytest.raises(UserError, match="debug_root_path takes a folder name"):
        tilelang.jit(debug_root_path=3)


def test_verbose_logs_the_compile_even_when_the_logger_is_quiet(capfd):
    logger = logging.getLogger("tilelang")
    level = logger.level
    logger.setLevel(logging.WARNING)
    try:
        tilelang.compile(_make(4.0), out_idx=-1, target="sm_80", verbose=True)
        err = capfd.readouterr().err
        assert "tilelang INFO: compiling scaled for sm_80 (out_idx=-1" in err
        tilelang.compile(_make(4.0), out_idx=-1, target="sm_80", verbose=True)
        assert "scaled: compiled before in this process; reusing that kernel" in capfd.readouterr().err
        tilelang.compile(_make(4.5), out_idx=-1, target="sm_80")
        assert capfd.readouterr().err == ""
    finally:
        logger.setLevel(level)


def test_jit_kernel_takes_the_same_options():
    kernel = tilelang.JITKernel(
        _make(5.0), out_idx=-1, execution_backend="tvm_ffi", target="sm_80", compile_flags="-DX"
    )
    assert kernel.compile_flags == ("-DX",) and kernel.out_idx == [1]
    # raised at the call: the traceback shows the user's line
    with pytest.raises(UserError, match="JITKernel: execution_backend='nvrtc'"):
        tilelang.JITKernel(_make(5.0), execution_backend="nvrtc", target="sm_80")


def test_compile_wants_a_prim_func():
    # raised at the call: the traceback shows the user's line
    with pytest.raises(UserError, match="tilelang.compile expects a @T.prim_func, got function"):
        tilelang.compile(_make)

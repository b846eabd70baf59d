"""CUDA source for a lowered kernel, and its build into a loadable library.

The source is one translation unit: the project's device header, the `__global__` kernels from TVM's
CUDA codegen, and the C++ host launcher from TVM's `cuda_host` codegen (argument checks, launch on
the stream torch is using, dynamic shared-memory limit raised past 48 KB). nvcc builds it into a
shared library that `tvm_ffi.load_module` loads; calling it with torch tensors costs ~1 us of FFI.
"""

from __future__ import annotations

import contextlib
import functools
import hashlib
import importlib
import os
import subprocess
import tempfile

import tvm_ffi
from tvm.backend.cuda import export_cuda_host

from tilelang import env
from tilelang.utils.target import arch_of

_build_utils = importlib.import_module("tvm.tirx.build")  # the module, not the function tvm.tirx.build

# Device headers and the function names that need them; common.h always comes first. Only the
# headers a kernel uses are included, since the CuTe-based ones cost seconds of nvcc time.
_HEADERS = [
    ("tl::shfl_xor", "reduce.h"),
    ("tl::atomic_add", "atomic.h"),
    ("tl::gemm_", "gemm_mma.h"),
    ("tl::cp_async", "copy_async.h"),
]


def _with_headers(code: str) -> str:
    lines = ['#include "tl_templates/cuda/common.h"']
    lines += [f'#include "tl_templates/cuda/{h}"' for name, h in _HEADERS if name in code]
    return "\n".join(lines) + "\n" + code


@contextlib.contextmanager
def _source_only():
    """TVM's CUDA codegen compiles what it generates through the global `tvm_callback_cuda_compile`
    (NVRTC, without our headers) whenever the CUDA runtime is present. We compile with nvcc
    ourselves, so while our codegen runs that callback only hands the source back."""
    name = "tvm_callback_cuda_compile"
    original = tvm_ffi.get_global_func(name, allow_missing=True)
    tvm_ffi.register_global_func(name, lambda code, *_: code.encode(), override=True)
    try:
        yield
    finally:
        if original is not None:
            tvm_ffi.register_global_func(name, original, override=True)


def _device_module(lowered):
    with _source_only():
        return _build_utils.codegen_build(lowered.device_mod, lowered.target)


def device_source(lowered) -> str:
    """The device part only (what `kernel.get_kernel_source()` shows)."""
    return _with_headers(_device_module(lowered).inspect_source("cuda"))


def full_source(lowered) -> str:
    """Kernels and host launcher in one translation unit."""
    dev = _device_module(lowered)
    host = _build_utils.codegen_build(lowered.host_mod, lowered.target.host)
    host.import_module(dev)
    return _with_headers(export_cuda_host(host))


@functools.cache
def nvcc_version() -> str:
    out = subprocess.run([env.nvcc_path(), "--version"], capture_output=True, text=True, check=True).stdout
    return out.strip().splitlines()[-1]


def gencode(arch: str) -> str:
    """`-gencode` for an arch; sm_90a needs the compute_90a form so wgmma/setmaxnreg assemble."""
    num = arch.removeprefix("sm_")
    return f"-gencode=arch=compute_{num},code=sm_{num}"


def nvcc_flags(target, fast_math: bool = False, extra=()) -> list[str]:
    import tvm_ffi

    ffi_dir = os.path.dirname(tvm_ffi.__file__)
    flags = [
        "-std=c++17",
        "-O3",
        gencode(arch_of(target)),
        "-shared",
        "-Xcompiler",
        "-fPIC",
        "--expt-relaxed-constexpr",
        "-w",
        f"-I{env.template_path()}",
        f"-I{env.cutlass_include()}",
        f"-I{os.path.join(ffi_dir, 'include')}",
        f"-L{os.path.join(ffi_dir, 'lib')}",
        "-ltvm_ffi",
    ]
    if fast_math:
        flags.append("--use_fast_math")
    return flags + list(extra)


class CompileError(RuntimeError):
    """nvcc rejected the generated source (a compiler bug, or a template precondition)."""


def build_library(source: str, target, fast_math: bool = False, extra_flags=(), out_dir: str | None = None) -> str:
    """nvcc `source` into a shared library; returns its path. Reuses a library built from the same
    source and flags (keyed by their hash and the nvcc version)."""
    flags = nvcc_flags(target, fast_math, extra_flags)
    key = hashlib.sha256("\n".join([source, " ".join(flags), nvcc_version()]).encode()).hexdigest()[:32]
    out_dir = out_dir or os.path.join(env.cache_dir(), "libs")
    os.makedirs(out_dir, exist_ok=True)
    lib = os.path.join(out_dir, f"{key}.so")
    if os.path.exists(lib):
        return lib
    with tempfile.TemporaryDirectory(dir=out_dir) as tmp:
        cu = os.path.join(tmp, "kernel.cu")
        with open(cu, "w") as f:
            f.write(source)
        tmp_lib = os.path.join(tmp, "kernel.so")
        proc = subprocess.run([env.nvcc_path(), *flags, "-o", tmp_lib, cu], capture_output=True, text=True)
        if proc.returncode != 0:
            kept = os.path.join(out_dir, f"failed_{key}.cu")
            os.replace(cu, kept)
            raise CompileError(f"nvcc failed ({arch_of(target)}):\n{proc.stderr[-6000:]}\nsource kept at {kept}")
        os.replace(tmp_lib, lib)  # atomic: a concurrent reader sees the whole file or none
    return lib


def compile_object(source: str, target, fast_math: bool = False) -> None:
    """Compile `source` to device code only (no host link); for tests on machines without a GPU."""
    flags = [
        f
        for f in nvcc_flags(target, fast_math)
        if f not in ("-shared",) and not f.startswith("-l") and not f.startswith("-L")
    ]
    with tempfile.TemporaryDirectory() as tmp:
        cu = os.path.join(tmp, "kernel.cu")
        with open(cu, "w") as f:
            f.write(source)
        proc = subprocess.run(
            [env.nvcc_path(), *flags, "-c", "-o", os.path.join(tmp, "k.o"), cu], capture_output=True, text=True
        )
        if proc.returncode != 0:
            raise CompileError(f"nvcc failed ({arch_of(target)}):\n{proc.stderr[-6000:]}")

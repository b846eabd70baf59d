"""CPU kernels: the lowered loops compiled by apache-tvm's LLVM backend into a shared library.

The pass pipeline's CPU branch (`engine/pipeline.py`) leaves one PrimFunc of plain loops: the blocks
of each `T.Kernel` a parallel loop, which TVM's code generator turns into a call to its runtime's
thread pool (`TVMBackendParallelLaunch`, one task per core). `tvm.compile` runs TVM's own lowering
(buffers flattened, loops vectorized, the packed-function entry that checks each tensor argument)
and LLVM for this machine's processor; the object is linked by the system's C++ compiler, with
`src/tl_templates/cpu/atomic.cc` when the kernel uses atomics.

The source a user reads (`kernel.get_kernel_source()`) is the lowered program as TVMScript: the
loops as they go to LLVM. The library is keyed by that text and the target, in the same folder and
with the same checksums and locks as the CUDA libraries (`libraries.py`).
"""

from __future__ import annotations

import ctypes
import functools
import hashlib
import importlib.util
import os
import tempfile

from tilelang import env
from tilelang.codegen import libraries
from tilelang.log import timed


def source(lowered) -> str:
    """The lowered program, as TVMScript."""
    return lowered.host_mod.script()


def build_library(lowered, times: dict | None = None, out_dir: str | None = None) -> str:
    """Compile `lowered` (the CPU branch's result) into a shared library; returns its path."""
    import tvm

    from tilelang.transform.lower_tile_ops_for_cpu import CPU_ATOMIC

    times = times if times is not None else {}
    text = source(lowered)
    parts = [text, str(lowered.target), tvm.__version__]
    key = "cpu-" + hashlib.sha256("\n".join(parts).encode()).hexdigest()[:32]

    def build(folder, publish):
        with timed(times, "llvm"):
            executable = tvm.compile(lowered.host_mod, target=lowered.target)
        with timed(times, "link"), tempfile.TemporaryDirectory(dir=folder) as tmp:
            path = os.path.join(tmp, "kernel.so")
            # Kernels with atomics get atomic.cc, compiled by the linker's C++ compiler with them.
            atomics = os.path.join(env.template_path(), "tl_templates", "cpu", "atomic.cc")
            addons = [atomics] if CPU_ATOMIC in text else []
            executable.export_library(path, addons=addons)
            publish(path)

    return libraries.reuse_or_build(key, build, out_dir)


@functools.cache
def _load_runtime() -> None:
    """TVM's runtime (its thread pool, workspace allocator), which a CPU library calls into: loaded
    once, globally, without importing the compiler (a kernel from the disk cache needs only this;
    `jit/exported.py` has the same loader for libraries loaded without the package)."""
    import tvm_ffi  # noqa: F401  (libtvm_runtime links against libtvm_ffi: loaded first)

    spec = importlib.util.find_spec("tvm")
    path = os.path.join(os.path.dirname(spec.origin), "lib", "libtvm_runtime.so")
    ctypes.CDLL(path, mode=ctypes.RTLD_GLOBAL)


def load(path: str):
    """The tvm-ffi module of a CPU library."""
    import tvm_ffi

    _load_runtime()
    return tvm_ffi.load_module(path)

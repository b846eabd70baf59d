"""tilelang: a tile-level language and compiler for GPU kernels.

import tilelang
import tilelang.language as T

@tilelang.jit(out_idx=[-1])
def add(N, block=1024):
    @T.prim_func
    def main(A: T.Tensor((N,), "float32"), B: T.Tensor((N,), "float32"), C: T.Tensor((N,), "float32")):
        with T.Kernel(T.ceildiv(N, block), threads=256) as bx:
            for i in T.Parallel(block):
                C[bx * block + i] = A[bx * block + i] + B[bx * block + i]
    return main
"""

# The host unit's precompiled header, built in the background while TVM is imported (once per
# toolchain and cache folder; `codegen/host_pch.py`).
from tilelang.codegen import host_pch as _host_pch  # noqa: E402

_host_pch.start_early()

# isort: split
# The T.* language (it imports the tile ops, which the compiler imports in turn).
from tilelang import language  # noqa: E402,F401
from tilelang.dtypes import dtype as DataType  # noqa: E402,F401  (tilelang.DataType: T.dtype)
from tilelang.version import __version__  # noqa: E402,F401

# isort: split
from tilelang import cache  # noqa: E402,F401
from tilelang.jit import JITKernel, compile, jit  # noqa: E402,F401,A004
from tilelang.options import PassConfigKey  # noqa: E402,F401

# isort: split
# Tuning, profiling and exported kernels, on top of the jit.
from tilelang.autotuner import autotune  # noqa: E402,F401
from tilelang.jit.exported import load_library  # noqa: E402,F401
from tilelang.profiler import Profiler, TensorSupplyType  # noqa: E402,F401

# isort: split
# The public TileLang's package-level helpers (see README, "Compatibility with the public TileLang").
from tilelang import tvm  # noqa: E402,F401  (TVM as the public TileLang's fork shows it: tvm.tir, tvm.tirx)
from tilelang.cache import clear as clear_cache  # noqa: E402,F401
from tilelang.cache import disable as disable_cache  # noqa: E402,F401
from tilelang.cache import enable as enable_cache  # noqa: E402,F401
from tilelang.cache import is_enabled as is_cache_enabled  # noqa: E402,F401
from tilelang.engine.callback import register_cuda_postproc  # noqa: E402,F401
from tilelang.log import set_level as set_log_level  # noqa: E402,F401
from tilelang.math import cdiv, next_power_of_2  # noqa: E402,F401
from tilelang.utils.target import use_target  # noqa: E402,F401

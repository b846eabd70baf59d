"""Toolchain helpers, as the public TileLang's `tilelang.contrib` has them: `nvcc` (compute
capabilities, nvcc itself). Its HIP, NVRTC and CuTeDSL helpers have no counterpart here (CUDA
through nvcc only).
"""

from tilelang.contrib import nvcc  # noqa: F401
from tilelang.contrib.nvcc import compile_cuda  # noqa: F401

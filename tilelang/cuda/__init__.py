"""CUDA-specific names of the public TileLang a kernel author imports directly: `tilelang.cuda.intrinsics`
(the per-warp tensor-core emitter, mma layouts and swizzles, 2:4 sparse metadata facts).

The compiler itself does not import this package; it sits on top of `tilelang.language`.
"""

from tilelang.cuda import intrinsics  # noqa: F401

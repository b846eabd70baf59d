"""Emitters of per-warp tensor-core statements for hand-written kernels (the public TileLang's
`tilelang.cuda.intrinsics.macro`)."""

from tilelang.cuda.intrinsics.macro.mma_macro_generator import TensorCoreIntrinEmitter  # noqa: F401

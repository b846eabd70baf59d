"""Tensor-core building blocks for hand-written CUDA kernels (the public TileLang's
`tilelang.cuda.intrinsics`): `TensorCoreIntrinEmitter` emits a warp's ldmatrix / mma.sync /
accumulator stores; `get_swizzle_layout` and `make_mma_swizzle_layout` lay out the shared tiles it
reads; `mma_store_index_map`, `get_ldmatrix_offset` and `get_mma_micro_size` give the register
layouts' facts. `sparse_layout` holds the 2:4 sparse metadata facts.
"""

from tilelang.cuda.intrinsics.layout.swizzle import get_swizzle_layout, make_mma_swizzle_layout  # noqa: F401
from tilelang.cuda.intrinsics.layout.utils import (  # noqa: F401
    get_ldmatrix_offset,
    get_mma_micro_size,
    mma_store_index_map,
)
from tilelang.cuda.intrinsics.macro.mma_macro_generator import TensorCoreIntrinEmitter  # noqa: F401

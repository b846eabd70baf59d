"""mma.sync register layouts, the ldmatrix rows and the shared-memory swizzle, for hand-written
tensor-core kernels (the public TileLang's `tilelang.cuda.intrinsics.layout`)."""

from tilelang.cuda.intrinsics.layout.swizzle import get_swizzle_layout, make_mma_swizzle_layout  # noqa: F401
from tilelang.cuda.intrinsics.layout.utils import (  # noqa: F401
    get_ldmatrix_offset,
    get_mma_micro_size,
    mma_store_index_map,
)

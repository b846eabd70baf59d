"""Device descriptions and schedule hints, as the public TileLang's `tilelang.carver` offers them:
`arch` (the CUDA device: SMs, shared memory), `template` (MatmulTemplate, whose recommend_hints
ranks tensor-core GEMM tiles for a device) and `roller` (the Hint record and launch orders).

The public TileLang's other templates (GEMV, elementwise, reduction, flash attention, convolution)
and its loop-nest analysis are not part of this tilelang: autotune those over explicit
configurations (`tilelang.autotune(configs=...)`).
"""

from tilelang.carver.arch import CDNA, CUDA, RDNA  # noqa: F401
from tilelang.carver.roller import (  # noqa: F401
    Hint,
    NoRasterization,
    Rasterization2DColumn,
    Rasterization2DRow,
)
from tilelang.carver.template import BaseTemplate, MatmulTemplate  # noqa: F401

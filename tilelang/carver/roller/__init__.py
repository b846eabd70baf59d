"""Schedule hints for the carver's templates (`tilelang.carver.template`): the `Hint` record, the
launch orders it carries (`rasterization`), and the tensor-core GEMM tile ranking (`matmul_tiles`).

The public TileLang's roller derives hints by walking a TIR function's loop nests; this one ranks a
fixed set of tensor-core tiles for the GEMM template, with the same `Hint` fields.
"""

from tilelang.carver.roller.hint import Hint  # noqa: F401
from tilelang.carver.roller.matmul_tiles import matmul_hints  # noqa: F401
from tilelang.carver.roller.rasterization import (  # noqa: F401
    NoRasterization,
    Rasterization,
    Rasterization2DColumn,
    Rasterization2DRow,
)

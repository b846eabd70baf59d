"""Device descriptions for analysis tools (`tilelang.carver.arch`), as the public TileLang has them.

Its roller-based hint generator (`tilelang.carver.template`, `tilelang.carver.roller`) is not part of
this tilelang: autotune over explicit configurations instead (`tilelang.autotune(configs=...)`).
"""

from tilelang.carver.arch import CDNA, CUDA, RDNA  # noqa: F401

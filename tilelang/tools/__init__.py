"""Tools around kernels, as the public TileLang's `tilelang.tools` has them: `plot_layout` (draw a
Fragment or Layout) and `Analyzer` (a roofline estimate from a kernel's tile ops). Its other tools
(lower trace, pass visualizer, the IKET profiler) are not part of this tilelang.
"""

from tilelang.tools.analyzer import AnalysisResult, Analyzer  # noqa: F401
from tilelang.tools.plot_layout import plot_layout  # noqa: F401

"""Choosing a kernel's tile sizes and other compile-time parameters by measuring them.

`@tilelang.autotune(configs=[...])` above `@tilelang.jit(...)`; see tuner.py. The compiles run in
parallel processes (parallel.py) and the winner is remembered on disk (results.py).
"""

from tilelang.autotuner.tuner import AutoTuneImpl, TuneSettings, autotune

__all__ = ["AutoTuneImpl", "TuneSettings", "autotune"]

"""Choosing a kernel's tile sizes and other compile-time parameters by measuring them.

`@tilelang.autotune(configs=[...])` above `@tilelang.jit(...)`, or `AutoTuner.from_kernel(...)`;
see tuner.py. The compiles run in parallel processes (parallel.py), each configuration is checked
and timed in turn (measure.py), and the winner is remembered on disk (results.py).
`set_autotune_inputs` gives the tensors to tune on (capture.py).
"""

from tilelang.autotuner.capture import get_autotune_inputs, set_autotune_inputs
from tilelang.autotuner.param import AutotuneResult, CompileArgs, ProfileArgs
from tilelang.autotuner.tuner import AutoTuneImpl, AutoTuner, autotune

__all__ = [
    "AutoTuneImpl",
    "AutoTuner",
    "AutotuneResult",
    "CompileArgs",
    "ProfileArgs",
    "autotune",
    "get_autotune_inputs",
    "set_autotune_inputs",
]

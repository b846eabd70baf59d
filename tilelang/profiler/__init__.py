"""Checking and timing kernels on the GPU: `Profiler`, `TensorSupplyType` and `do_bench`.

    profiler = kernel.get_profiler(tilelang.TensorSupplyType.Randn)
    profiler.assert_allclose(ref_program, rtol=1e-2, atol=1e-2)   # fresh random inputs
    latency_ms = profiler.do_bench()

Used by users and by the autotuner; never by the compiler. Importing it does not import torch.
"""

from tilelang.profiler.bench import do_bench, do_bench_in_turn
from tilelang.profiler.profiler import Profiler, check_close
from tilelang.profiler.tensor_supply import TensorSupplyType, supply_tensor

__all__ = ["Profiler", "TensorSupplyType", "check_close", "do_bench", "do_bench_in_turn", "supply_tensor"]

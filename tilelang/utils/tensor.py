"""Torch-side helpers users of the public TileLang import from `tilelang.utils.tensor`: dtype names to
torch dtypes, the profiler's input supply, and a closeness check that tolerates a few mismatches.

    from tilelang.utils.tensor import map_torch_type, get_tensor_supply, TensorSupplyType, torch_assert_close

    map_torch_type("float8_e4m3")                       # torch.float8_e4m3fn
    supply = get_tensor_supply(TensorSupplyType.Randn)
    x = supply(param)                                   # a tensor for a kernel parameter (name, shape, dtype)
    torch_assert_close(out, ref, rtol=1e-2, atol=1e-2, max_mismatched_ratio=0.001)

`TensorSupplyType` is the profiler's class (one class: `tilelang.TensorSupplyType` is the same), and
`torch_assert_close` tilelang.testing's.
Nothing here is used by the compiler; torch is imported when a function runs.
"""

from __future__ import annotations

from tilelang.profiler.tensor_supply import TensorSupplyType, supply_tensor
from tilelang.testing.compare import torch_assert_close

__all__ = ["TensorSupplyType", "get_tensor_supply", "map_torch_type", "torch_assert_close"]


def map_torch_type(name) -> object:
    """The torch dtype of a TileLang dtype name ("float16", "float8_e4m3", "float", a T.* dtype...).

    Raises: UserError for a name torch has no dtype for."""
    from tilelang.dtypes import to_torch

    return to_torch(name)


def _current_device():
    import torch

    return torch.device("cuda", torch.cuda.current_device()) if torch.cuda.is_available() else torch.device("cpu")


def get_tensor_supply(supply_type: TensorSupplyType = TensorSupplyType.Integer):
    """A function `param -> tensor` drawing inputs as `supply_type` says (see
    tilelang/profiler/tensor_supply.py for the draws per dtype), on the current CUDA device (the
    CPU without a GPU). `param` is anything with `name`, `shape` (ints) and `dtype`, such as the
    entries of `kernel.params`.

    Raises (when called): ValueError for a parameter whose shape is not fixed."""
    kind = TensorSupplyType(supply_type)

    def supply(param):
        return supply_tensor(param, kind, device=_current_device())

    return supply

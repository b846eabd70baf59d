"""What a compiled kernel knows about its parameters, and the checks of a call's arguments.

The host launcher already checks every tensor (dtype, rank, shape, strides, device) at no Python
cost. When it rejects a call, `diagnose` re-checks the arguments in Python to say, in the user's
terms, which parameter is wrong, what was expected and what came.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Param:
    """One kernel parameter: a tensor of fixed shape and dtype."""

    name: str
    shape: tuple  # ints
    dtype: str

    def describe(self) -> str:
        return f"a CUDA tensor of shape {list(self.shape)} and dtype {self.dtype}"


def params_of(func) -> list[Param]:
    from tilelang.language.dtypes import canonical

    out = []
    for p in func.params:
        shape = tuple(int(s) for s in p.shape)
        out.append(Param(p.name, shape, canonical(str(p.dtype))))
    return out


def _describe_arg(arg) -> str:
    try:
        import torch

        if isinstance(arg, torch.Tensor):
            dtype = str(arg.dtype).removeprefix("torch.")
            layout = "" if arg.is_contiguous() else ", non-contiguous"
            return f"a {arg.device.type} tensor of shape {list(arg.shape)} and dtype {dtype}{layout}"
    except ImportError:
        pass
    return f"{type(arg).__name__} {arg!r}"[:200]


def check_argument(param: Param, arg, position: int, kernel_name: str) -> None:
    """Raise ValueError if `arg` cannot be passed as `param`."""
    import torch

    from tilelang.language.dtypes import canonical

    where = f"{kernel_name}: parameter '{param.name}' (argument #{position})"
    if not isinstance(arg, torch.Tensor):
        raise ValueError(f"{where} expects {param.describe()}, got {_describe_arg(arg)}")
    problems = []
    got_dtype = canonical(arg.dtype)
    if got_dtype != param.dtype:
        problems.append(f"dtype {got_dtype} instead of {param.dtype}")
    if arg.dim() != len(param.shape):
        problems.append(f"{arg.dim()} dimensions instead of {len(param.shape)}")
    elif tuple(arg.shape) != param.shape:
        problems.append(f"shape {list(arg.shape)} instead of {list(param.shape)}")
    if arg.device.type != "cuda":
        problems.append(f"device {arg.device} instead of a CUDA device")
    if not arg.is_contiguous():
        problems.append("a non-contiguous layout (call .contiguous() first)")
    if problems:
        raise ValueError(f"{where} expects {param.describe()}, got {_describe_arg(arg)}: " + "; ".join(problems))


def diagnose(params: list[Param], args, kernel_name: str) -> None:
    """Raise the first user-facing ValueError about `args`; return if all of them look right."""
    if len(args) != len(params):
        names = ", ".join(p.name for p in params)
        raise ValueError(f"{kernel_name} takes {len(params)} tensors ({names}), got {len(args)}")
    devices = set()
    for k, (param, arg) in enumerate(zip(params, args)):
        check_argument(param, arg, k, kernel_name)
        devices.add(arg.device)
    if len(devices) > 1:
        raise ValueError(f"{kernel_name}: all tensors must be on one device, got {sorted(map(str, devices))}")

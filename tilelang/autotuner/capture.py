"""`set_autotune_inputs`: the tensors the autotuner checks and times candidates on.

By default the tuner draws random inputs from the kernel's parameters. Some kernels need real data
(sequence offsets of a varlen batch, indices into a table) or take scalars, which cannot be drawn:

    with tilelang.autotuner.set_autotune_inputs(q, k, v, cu_seqlens_q, cu_seqlens_k, max_seqlen_q):
        kernel = flashattn(batch, UQ, UKV, heads, dim, causal)   # tunes on these inputs

The inputs are the kernel's inputs in call order (its outputs left out). The tuner clones them once
(a candidate that writes into its inputs cannot change what the next one sees) and uses them for
every candidate; they replace `supply_prog` and `supply_type`. The context is per thread and nests.
"""

from __future__ import annotations

import threading

_local = threading.local()


def _stack() -> list:
    if not hasattr(_local, "stack"):
        _local.stack = []
    return _local.stack


class AutotuneInputs:
    """The context manager `set_autotune_inputs` returns; `tensors` is the list of inputs."""

    __slots__ = ("tensors",)

    def __init__(self, tensors: list):
        self.tensors = tensors

    def __enter__(self) -> AutotuneInputs:
        _stack().append(self)
        return self

    def __exit__(self, *exc) -> None:
        _stack().pop()


def set_autotune_inputs(*args) -> AutotuneInputs:
    """`with set_autotune_inputs(a, b, c):` or `with set_autotune_inputs([a, b, c]):` (tensors and
    scalars, the kernel's inputs in order)."""
    tensors = list(args[0]) if len(args) == 1 and isinstance(args[0], (list, tuple)) else list(args)
    return AutotuneInputs(tensors)


def get_autotune_inputs() -> list | None:
    """The inputs of the innermost `set_autotune_inputs` of this thread, or None outside one."""
    stack = _stack()
    return stack[-1].tensors if stack else None

"""Allocations: shared tiles, register fragments, per-thread locals and scalar variables.

Scopes in the IR: `shared.dyn` (merged into one dynamic shared-memory block per kernel),
`local.fragment` (a block-level register tile spread over the threads by layout inference),
`local` (a private per-thread array, full size in every thread).
"""

from __future__ import annotations

from tvm import tirx
from tvm.script import tirx as _script
from tvm.script.ir_builder import tirx as _tb

from tilelang.dtypes import canonical
from tilelang.errors import UserError

SHARED = "shared.dyn"
FRAGMENT = "local.fragment"
LOCAL = "local"


def _shape(shape, what):
    dims = tuple(shape) if isinstance(shape, (tuple, list)) else (shape,)
    for d in dims:
        if isinstance(d, int) and d <= 0:
            raise UserError(f"{what}: every dimension must be positive, got shape {dims}")
    return dims


def _tile_shape(shape, what):
    """A tile's shape: positive compile-time constants (tiles live in shared memory or registers,
    whose size is fixed when the kernel is compiled)."""
    dims = _shape(shape, what)
    for d in dims:
        if not isinstance(d, int) and not isinstance(d, tirx.IntImm):
            raise UserError(
                f"{what}: a tile's shape must be known at compile time, but dimension {d} of "
                f"{_fmt(dims)} is not a constant; tile a dynamic dimension with a fixed block size "
                f"(e.g. T.alloc_shared((block_M, block_K), ...) with T.Kernel(T.ceildiv(M, block_M), ...))"
            )
        if isinstance(d, tirx.IntImm) and d.value <= 0:
            raise UserError(f"{what}: every dimension must be positive, got shape {_fmt(dims)}")
    return dims


def _fmt(dims) -> str:
    return "(" + ", ".join(str(d) for d in dims) + ("," if len(dims) == 1 else "") + ")"


def alloc_shared(shape, dtype, scope=SHARED):
    """A tile in shared memory, visible to every thread of the block.

    Example: A_shared = T.alloc_shared((128, 32), "float16")
    """
    return _tb.alloc_buffer(_tile_shape(shape, "T.alloc_shared"), canonical(dtype), scope=scope)


def alloc_fragment(shape, dtype):
    """A register tile of the whole block; which thread holds which element is inferred.

    Example: C_local = T.alloc_fragment((128, 128), "float32")
    """
    return _tb.alloc_buffer(_tile_shape(shape, "T.alloc_fragment"), canonical(dtype), scope=FRAGMENT)


def alloc_local(shape, dtype):
    """A private array that every thread holds in full.

    Example: acc = T.alloc_local((8,), "float32")
    """
    return _tb.alloc_buffer(_tile_shape(shape, "T.alloc_local"), canonical(dtype), scope=LOCAL)


def alloc_var(dtype, init=None):
    """A per-thread scalar variable; read it by name, assign it with `x = value`.

    Example:
        acc = T.alloc_var("float32", init=0)
        for k in T.serial(16):
            acc = acc + A[k]
    """
    wrapper = _tb.local_scalar(canonical(dtype))  # a 1-element local buffer, read as `x[0]`
    if init is not None:
        _tb.buffer_store(wrapper.scalar.source, init, [0])
    return wrapper


def Tensor(shape, dtype="float32"):
    """The annotation of a kernel parameter: a global tensor of `shape` and `dtype`.

    Example: def main(A: T.Tensor((M, K), "float16"), ...)
    """
    return _script.Buffer(tuple(_shape(shape, "T.Tensor")), canonical(dtype))


Buffer = Tensor


def SharedBuffer(shape, dtype="float32"):
    """The annotation of a `T.macro` parameter that is a shared tile (documentation only: a macro
    is expanded where it is called, with the caller's buffers)."""
    return Tensor(shape, dtype)


FragmentBuffer = SharedBuffer  # likewise, for a fragment parameter
LocalBuffer = SharedBuffer  # likewise, for a local buffer parameter

"""`T.Kernel`: opens a kernel launch (grid of blocks, threads per block) and yields the block indices.

Each `with T.Kernel(...)` becomes one `__global__` function; several in one prim_func launch in order.
In the IR a kernel is a nest of `thread_extent` attributes (blockIdx.x/y/z, then threadIdx.x/y/z).
"""

from __future__ import annotations

import builtins
import contextlib
import numbers

from tvm import tirx
from tvm.script.ir_builder import IRBuilder
from tvm.script.ir_builder import tirx as _tb

from tilelang.errors import UserError

_BLOCK_TAGS = ("blockIdx.x", "blockIdx.y", "blockIdx.z")
_THREAD_TAGS = ("threadIdx.x", "threadIdx.y", "threadIdx.z")

# The innermost open kernel's (block vars, thread vars, thread extents), for T.get_thread_binding & co.
_open_kernels: list[tuple[list, list, list]] = []


def _as_extent(value, what):
    if isinstance(value, builtins.bool) or isinstance(value, float):
        raise UserError(f"T.Kernel: {what} must be an integer or an expression, got {value!r}")
    if isinstance(value, builtins.int) and value <= 0:
        raise UserError(f"T.Kernel: {what} must be positive, got {value}")
    return value


@contextlib.contextmanager
def Kernel(*grid, threads=128, prelude=None):
    """Open a kernel launch of `grid` blocks with `threads` threads each; yields the block indices.

    Args:
        *grid: one to three block counts (x, y, z), ints or expressions such as `T.ceildiv(N, 128)`.
        threads: threads per block, an int or a tuple of up to three ints (x, y, z).
        prelude: accepted for compatibility with TileLang; must be None.

    Errors:
        UserError if the grid is empty or has more than three dimensions, or an extent is not positive.

    Example:
        with T.Kernel(T.ceildiv(N, 128), threads=128) as bx:
            for i in T.Parallel(128):
                B[bx * 128 + i] = A[bx * 128 + i]
    """
    if prelude is not None:
        raise UserError("T.Kernel: `prelude` is not supported")
    if not 1 <= len(grid) <= 3:
        raise UserError(f"T.Kernel takes one to three grid extents, got {len(grid)}")
    thread_dims = tuple(threads) if isinstance(threads, (tuple, list)) else (threads,)
    if not 1 <= len(thread_dims) <= 3:
        raise UserError(f"T.Kernel: `threads` takes one to three extents, got {threads!r}")
    with contextlib.ExitStack() as stack:
        block_vars = []
        for tag, extent in zip(_BLOCK_TAGS, grid):
            block_vars.append(stack.enter_context(_tb.launch_thread(tag, _as_extent(extent, "a grid extent"))))
        thread_vars = []
        for tag, extent, name in zip(_THREAD_TAGS, thread_dims, ("tx", "ty", "tz")):
            if not isinstance(extent, (numbers.Integral, tirx.IntImm)):
                # Layouts spread tiles over the block's threads when the kernel is compiled.
                raise UserError(f"T.Kernel: `threads` must be constant integers, got {threads!r}")
            var = stack.enter_context(_tb.launch_thread(tag, _as_extent(extent, "`threads`")))
            IRBuilder.name(name, var)
            thread_vars.append(var)
        _open_kernels.append((block_vars, thread_vars, list(thread_dims)))
        try:
            yield block_vars[0] if len(block_vars) == 1 else tuple(block_vars)
        finally:
            _open_kernels.pop()


def _current(name):
    if not _open_kernels:
        raise UserError(f"T.{name} is only valid inside `with T.Kernel(...)`")
    return _open_kernels[-1]


def get_thread_binding(dim: int = 0):
    """The thread index along `dim` (0 = x) of the enclosing kernel."""
    return _current("get_thread_binding")[1][dim]


def get_thread_bindings():
    """All thread indices of the enclosing kernel."""
    return list(_current("get_thread_bindings")[1])


def get_block_binding(dim: int = 0):
    """The block index along `dim` (0 = x) of the enclosing kernel."""
    return _current("get_block_binding")[0][dim]


def get_block_bindings():
    """All block indices of the enclosing kernel."""
    return list(_current("get_block_bindings")[0])


def get_thread_extent(dim: int = 0):
    """Threads per block along `dim` of the enclosing kernel."""
    return _current("get_thread_extent")[2][dim]

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


def thread_binding(start, stop=None, thread: str | None = None, annotations=None):
    """The kernel's thread index `thread` ("threadIdx.x/y/z"), as TileLang's
    `tx = T.thread_binding(0, n, thread="threadIdx.x")` binds it: inside `T.Kernel`, a thread
    binding over the kernel's own extent is that thread index.

    Errors:
        UserError outside `T.Kernel`, for another tag, for a range other than [0, threads of that
        dimension), and in a `for` loop (use the returned index directly).

    Example: tx = T.thread_binding(0, 128, thread="threadIdx.x")
    """
    del annotations  # a thread index carries none
    if stop is None:
        start, stop = 0, start
    if thread is None:
        raise UserError("T.thread_binding needs thread=, e.g. thread='threadIdx.x'")
    if _called_as_for_iterator():
        raise UserError(
            "T.thread_binding as a for loop is not supported: inside T.Kernel the thread index already "
            f"exists; write `tx = T.thread_binding(0, n, thread='{thread}')` or `tx = T.get_thread_binding()`"
        )
    if thread not in _THREAD_TAGS:
        raise UserError(f"T.thread_binding: thread must be one of {list(_THREAD_TAGS)}, got {thread!r}")
    _, thread_vars, extents = _current("thread_binding")
    dim = _THREAD_TAGS.index(thread)
    if dim >= len(thread_vars):
        raise UserError(f"T.thread_binding: the kernel has no {thread} (threads={tuple(extents)})")
    extent = int(extents[dim])
    if not (_is_int(start, 0) and _is_int(stop, extent)):
        raise UserError(
            f"T.thread_binding({start}, {stop}, thread='{thread}'): the kernel runs {extent} threads along "
            f"{thread}; bind the whole range (0, {extent})"
        )
    return thread_vars[dim]


def _is_int(value, want: int) -> bool:
    value = value.value if isinstance(value, tirx.IntImm) else value
    return isinstance(value, numbers.Integral) and int(value) == want


def _called_as_for_iterator() -> bool:
    """Whether the parser is evaluating the iterator of a `for` statement (its visit_for is on the
    stack): the `for` form would need a thread-bound loop, which T.Kernel already is."""
    import sys

    frame = sys._getframe(2)
    for _ in range(12):
        if frame is None:
            return False
        if frame.f_code.co_name == "visit_for" and "tirx" in frame.f_code.co_filename:
            return True
        frame = frame.f_back
    return False


_WARPGROUP = 128  # threads of a warpgroup (4 warps), the unit T.ws selects


@contextlib.contextmanager
def ws(*warpgroups: int):
    """Run the body on the given warpgroups only (threads 128*k .. 128*k+127 of the block, its
    threads counted x fastest): `with T.ws(0):` is `if tx < 128:`, `with T.ws(1):` is
    `if 128 <= tx < 256:`, `with T.ws(0, 1):` either.

    Example:
        with T.ws(0):      # producer
            T.tma_copy(A[by * 128, k * 64], A_shared, barrier=full)
        with T.ws(1):      # consumer
            T.barrier_wait(full, k % 2)
            T.gemm(A_shared, B_shared, C_local)
    """
    if not warpgroups:
        raise UserError("T.ws needs at least one warpgroup index, e.g. T.ws(0)")
    _, thread_vars, extents = _current("ws")
    tid, scale = thread_vars[0], 1
    for var, extent in zip(thread_vars[1:], extents[:-1]):
        scale *= int(extent)
        tid = tid + var * scale
    total = 1
    for extent in extents:
        total *= int(extent)
    cond = None
    for g in warpgroups:
        if not isinstance(g, numbers.Integral) or not 0 <= g < total // _WARPGROUP:
            raise UserError(
                f"T.ws: the block's {total} threads have warpgroups 0..{total // _WARPGROUP - 1}, got {g!r}"
            )
        lo, hi = g * _WARPGROUP, (g + 1) * _WARPGROUP
        part = tid < hi if lo == 0 else tirx.And(lo <= tid, tid < hi)
        cond = part if cond is None else tirx.Or(cond, part)
    with _tb.If(cond):
        with _tb.Then():
            yield

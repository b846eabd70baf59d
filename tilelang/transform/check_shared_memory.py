"""Check `check_shared_memory`: each kernel's dynamic shared memory fits the target's per-block limit.

Runs right after the shared tiles of a kernel are merged into one block (so tiles whose lifetimes
do not overlap count once). Over the limit, the error lists the kernel's shared tiles with their
shapes, sizes and the lines that allocate them, so the user sees which tile to shrink (fewer
stages, smaller blocks).

Requires: `merge_shared_tiles`. Guarantees: IR unchanged; a UserError when a kernel does not fit.
"""

from __future__ import annotations

import tvm
import tvm_ffi
from tvm import tirx

from tilelang.errors import UserError, describe_span
from tilelang.utils.target import arch_of, compute_capability

# Largest dynamic shared memory a block may opt in to, by compute capability (CUDA programming
# guide, "Technical Specifications per Compute Capability").
_LIMITS = {80: 163 * 1024, 86: 99 * 1024, 87: 163 * 1024, 89: 99 * 1024, 90: 227 * 1024}


def shared_memory_limit(target) -> int:
    cc = compute_capability(target)
    return _LIMITS.get(cc, 48 * 1024 if cc < 80 else 99 * 1024)


def tile_bytes(buffer) -> int:
    """Bytes of a buffer of constant shape."""
    n = 1
    for s in buffer.shape:
        n *= int(s)
    dt = tvm.DataType(str(buffer.dtype))
    return n * dt.bits * dt.lanes // 8  # vectorized buffers (float32x4) hold `lanes` values each


def user_shared_tiles(func) -> list[tuple[str, tuple, str, int, str]]:
    """(name, shape, dtype, bytes, where) of every shared tile the user allocated, before lowering;
    `where` is the allocation's 'file:line' and source line ('' when the IR has no span)."""
    tiles = []

    def on_alloc(stmt):
        b = stmt.buffer
        if b.scope().startswith("shared"):
            where = describe_span(stmt.span)
            tiles.append((b.name, tuple(int(s) for s in b.shape), str(b.dtype), tile_bytes(b), where))

    tvm_ffi.structural_walk(func.body, [(tirx.AllocBuffer, on_alloc)])
    return tiles


class SharedMemoryOverLimit(UserError):
    """A kernel needs more shared memory than its target has."""

    warp_specialized = False  # set by the pipeline when the kernel had a producer/consumer split


def check_shared_memory(mod, target, tiles) -> None:
    """Raise a UserError if a kernel of `mod` (after the merge) needs more than the target allows."""
    limit = shared_memory_limit(target)
    for gv, func in mod.functions.items():
        used = []

        def on_alloc(stmt, used=used):
            if stmt.buffer.scope() == "shared.dyn":
                used.append(tile_bytes(stmt.buffer))

        tvm_ffi.structural_walk(func.body, [(tirx.AllocBuffer, on_alloc)])
        total = sum(used)
        if total > limit:
            listing = "\n".join(
                f"    {name}: {list(shape)} {dtype} = {size / 1024:.1f} KiB"
                + (f", allocated at\n{where}" if where else "")
                for name, shape, dtype, size, where in tiles
            )
            raise SharedMemoryOverLimit(
                f"kernel '{gv.name_hint}' needs {total / 1024:.1f} KiB of shared memory, but {arch_of(target)} allows "
                f"{limit / 1024:.0f} KiB per block. Its shared tiles:\n{listing}\n"
                f"Use smaller tiles or fewer pipeline stages."
            )

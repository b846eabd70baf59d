"""Pass `align_shared_tiles`: on sm_90a, every dynamic shared-memory tile takes a whole number of
1024-byte blocks.

`merge_shared_tiles` places a tile whose size is a multiple of 1024 bytes on a 1024-byte boundary of
its kernel's block. With every size such a multiple, every tile starts 1024-byte aligned: a TMA
load's destination must be 128-byte aligned, and the 128-byte swizzle repeats every 1024 bytes,
which the shared layouts (and wgmma's descriptors) assume a tile starts at.

Before:  r = T.alloc_shared((16,), "float32")          # 64 bytes
After:   r = T.alloc_shared((256,), "float32")         # 1024 bytes; r[0:16] used

Requires: a target with TMA (`has_tma`: the pass list runs it only there); flat buffers
(`flatten_buffer`), before `merge_shared_tiles`. Guarantees: every `shared.dyn` allocation is a
multiple of 1024 bytes.
"""

from __future__ import annotations

from tvm import tirx

from tilelang.dtypes import bits_with_lanes
from tilelang.layout.fragment import substitute
from tilelang.utils.ir import collect

BLOCK = 1024  # bytes


def _padded(buf):
    """`buf` grown to a whole number of blocks, or None when it already is one (or not a flat
    dynamic shared tile of a known size)."""
    if buf.scope() != "shared.dyn" or len(buf.shape) != 1 or not isinstance(buf.shape[0], tirx.IntImm):
        return None
    elem = max(bits_with_lanes(str(buf.dtype)) // 8, 1)  # (a tile the vectorizer made bfloat16x8: 16 bytes)
    size = int(buf.shape[0]) * elem
    if size % BLOCK == 0:
        return None
    count = (size + BLOCK - 1) // BLOCK * BLOCK // elem
    return tirx.decl_buffer((count,), str(buf.dtype), buf.name, scope="shared.dyn")


def align_shared_tiles(func: tirx.PrimFunc) -> tirx.PrimFunc:
    grown = {}
    for alloc in collect(func.body, tirx.AllocBuffer):
        new = _padded(alloc.buffer)
        if new is not None:
            grown[alloc.buffer] = new
    # A buffer is a variable: its allocation, loads, stores and pointers all name it.
    return func.with_body(substitute(func.body, grown)) if grown else func

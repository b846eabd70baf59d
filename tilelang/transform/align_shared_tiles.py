"""Pass `align_shared_tiles`: on sm_90a, every dynamic shared-memory tile takes a whole number of
1024-byte blocks.

`merge_shared_memory` packs a kernel's tiles one after another into its 1024-byte aligned block, at
offsets that are sums of the sizes before them. With every size a multiple of 1024 bytes, every tile
starts 1024-byte aligned: a TMA load's destination must be 128-byte aligned, and the 128-byte
swizzle repeats every 1024 bytes, which the shared layouts (and wgmma's descriptors) assume a tile
starts at.

Before:  r = T.alloc_shared((16,), "float32")          # 64 bytes
After:   r = T.alloc_shared((256,), "float32")         # 1024 bytes; r[0:16] used

Requires: flat buffers (`flatten_buffer`), before `merge_shared_memory`. Guarantees: every
`shared.dyn` allocation is a multiple of 1024 bytes; other targets are left unchanged.
"""

from __future__ import annotations

import tvm_ffi
from tvm import ir, tirx

from tilelang.language.dtypes import bits as dtype_bits
from tilelang.utils.target import arch_of

BLOCK = 1024  # bytes


def _padded(buf):
    """`buf` grown to a whole number of blocks, or None when it already is one (or not a flat
    dynamic shared tile of a known size)."""
    if buf.scope() != "shared.dyn" or len(buf.shape) != 1 or not isinstance(buf.shape[0], tirx.IntImm):
        return None
    elem = max(dtype_bits(str(buf.dtype)) // 8, 1)
    size = int(buf.shape[0]) * elem
    if size % BLOCK == 0:
        return None
    count = (size + BLOCK - 1) // BLOCK * BLOCK // elem
    return tirx.decl_buffer((count,), str(buf.dtype), buf.name, scope="shared.dyn")


def align_shared_tiles(func: tirx.PrimFunc) -> tirx.PrimFunc:
    target = func.attrs.get("target") if func.attrs is not None else None
    if target is None or arch_of(target) != "sm_90a":
        return func
    grown = {}

    def on_alloc(alloc):
        new = _padded(alloc.buffer)
        if new is None:
            return alloc
        grown[alloc.buffer] = new
        return tirx.AllocBuffer(new)

    body = tvm_ffi.structural_map(func.body, [(tirx.AllocBuffer, on_alloc)])
    if not grown:
        return func.with_body(body)

    def on_load(ld):
        return tirx.BufferLoad(grown[ld.source], list(ld.indices)) if ld.source in grown else ld

    def on_store(st):
        if st.buffer in grown:
            return tirx.BufferStore(grown[st.buffer], st.value, list(st.indices), span=st.span)
        return st

    body = tvm_ffi.structural_map(body, [(ir.TensorLoad, on_load), (tirx.BufferStore, on_store)], order="post")
    # What is left are the tiles named as pointers (views of their bytes, operand addresses).
    return func.with_body(tvm_ffi.structural_map(body, [(ir.Var, lambda v: grown[v] if v in grown else v)]))

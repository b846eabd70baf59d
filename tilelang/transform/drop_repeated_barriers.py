"""Pass `drop_repeated_barriers`: a block barrier right after another block barrier goes.

TVM's barrier insertion runs once per shared scope (`shared`, then `shared.dyn`), and each puts the
barrier its scope needs: where both need one at the same point (a pipelined loop reading tiles of
both scopes), two barriers stand side by side, and a dynamic-shape GEMM ran both in every iteration.
With nothing between them the second orders nothing the first does not.

Before:  tl::cp_async_wait<1>();         After:  tl::cp_async_wait<1>();
         __syncthreads();                        __syncthreads();
         __syncthreads();                        if (...) { ... }
         if (...) { ... }

Only block barriers (`tvm_storage_sync` of shared memory, `__syncthreads()`) directly adjacent in
one statement sequence count; named barriers and barriers with any statement between stay.

Requires: barriers inserted (`thread_sync`, `merge_shared_tiles`). Guarantees: the same orderings.
"""

from __future__ import annotations

import tvm_ffi
from tvm import tirx

from tilelang.utils.ir import is_block_barrier, seq


def drop_repeated_barriers(func: tirx.PrimFunc) -> tirx.PrimFunc:
    changed = []

    def on_seq(node):
        kept = []
        for st in node.seq:
            if kept and is_block_barrier(st) and is_block_barrier(kept[-1]):
                changed.append(st)
                continue
            kept.append(st)
        return seq(kept) if len(kept) < len(node.seq) else node

    body = tvm_ffi.structural_map(func.body, [(tirx.SeqStmt, on_seq)], order="post")
    return func.with_body(body) if changed else func

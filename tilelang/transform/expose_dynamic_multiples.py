"""Pass `expose_dynamic_multiples`: inside a branch that runs only when a dynamic size is a multiple
of V (`op/parallel.lower` guards a vector of V lanes that way), the size is written `(n // V) * V`,
so that the code generator, which emits a 128-bit load only from an address it can prove aligned
(it knows nothing of the branch's condition), sees that `row * n` is a multiple of V.

The lowering marks each such branch `AttrStmt(n, "tl.multiple_of", V)` (`op/vectorize`'s
`mark_multiple_of`). This pass runs after the last simplification, which would fold `(n // V) * V`
back to `n` inside the branch.

Before:  if n % 8 == 0: attr(n, "tl.multiple_of", 8): C[i * n + v*8 : +8] = A[i * n + ...]
After:   if n % 8 == 0: C[i * (n // 8 * 8) + ...] = A[i * (n // 8 * 8) + ...]

Requires per-thread TIR after `StmtSimplify`; guarantees no `tl.multiple_of` attribute is left.
"""

from __future__ import annotations

import tvm_ffi
from tvm import tirx

from tilelang.layout.fragment import substitute
from tilelang.op.vectorize import MULTIPLE_OF


def expose_dynamic_multiples(func: tirx.PrimFunc) -> tirx.PrimFunc:
    def on_attr(node):
        if node.attr_key != MULTIPLE_OF:
            return node
        d, vec = node.node, tirx.const(int(node.value), str(node.node.ty.dtype))
        return substitute(node.body, {d: tirx.floordiv(d, vec) * vec})

    body = tvm_ffi.structural_map(func.body, [(tirx.AttrStmt, on_attr)], order="post")
    return func if body.same_as(func.body) else func.with_body(body)

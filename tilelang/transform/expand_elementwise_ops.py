"""Pass `expand_elementwise_ops`: element-wise tile ops (those whose `expands` is set: `T.copy`,
`T.fill`, tile `T.atomic_add`) become `T.Parallel` loops.

Before:  tl_copy(A[by * 128:by * 128 + 128, 0:64], A_s[0:128, 0:64], 0)
After:   for i0, i1 in T.Parallel(128, 64): A_s[i0, i1] = A[by * 128 + i0, i1]

Requires: tile ops as parsed. Guarantees: no element-wise tile-op calls remain; their loops carry
the op's span, so later errors point at the user's `T.copy` line. Runs before layout inference,
which then spreads these loops over the threads like any element-wise loop.
"""

from __future__ import annotations

from tvm import tirx

from tilelang.op import base
from tilelang.transform.common import Scope, mutate_with_scope


def expand_elementwise_ops(func: tirx.PrimFunc) -> tirx.PrimFunc:
    scope = Scope()  # the bindings in scope settle copy extents parsing could not compare

    def on_eval(stmt, recurse):
        op = base.parse(stmt)
        if op is not None and op.expands:
            return op.expand(scope.analyzer)
        return stmt

    return func.with_body(mutate_with_scope(func.body, scope, {tirx.Evaluate: on_eval}))

"""Check `check_hopper_primitives`: the hand-written warp-specialization primitives
(language/barriers.py: T.alloc_barrier, T.barrier_arrive/wait, T.tma_copy, T.set_max_nreg,
T.fence_proxy_async) call PTX that only sm_90a has (mbarrier transactions, TMA, setmaxnreg, proxy
fences). On another target they are an error at the user's line, before any other pass: layout
inference for mma.sync would otherwise fail first on the same kernel, with a message about layouts
instead of the target.

Requires: the PrimFunc as parsed, with its target bound. Guarantees: nothing changed.
"""

from __future__ import annotations

from tvm import tirx

from tilelang import intrinsics
from tilelang.errors import at_span
from tilelang.op import base, tma
from tilelang.transform.common import walk
from tilelang.utils.ir import extern_name
from tilelang.utils.target import arch_of, has_tma

# What the primitives call; a TMA copy before `lower_tma_copies` is the user's T.tma_copy.
_HOPPER_ONLY = ("tl::mbarrier_", "tl::fence_barrier_init")


# PTX instructions (TVM's `tirx.ptx.*` ops, as T.fence_proxy_async makes them) that need sm_90.
_HOPPER_ONLY_PTX = ("tirx.ptx.fence_proxy",)


def _is_hopper_only(stmt) -> bool:
    if base.is_tile_op(stmt.value, tma.NAME) or intrinsics.lookup(stmt) in intrinsics.SETMAXNREGS:
        return True
    value = stmt.value
    if isinstance(value, tirx.Call) and getattr(value.op, "name", "").startswith(_HOPPER_ONLY_PTX):
        return True
    return (extern_name(stmt) or "").startswith(_HOPPER_ONLY)


def check_hopper_primitives(func: tirx.PrimFunc) -> tirx.PrimFunc:
    target = func.attrs.get("target") if func.attrs is not None else None
    if has_tma(target):
        return func
    arch = arch_of(target) if target is not None else None

    def on_eval(stmt):
        if _is_hopper_only(stmt):
            raise at_span(
                "T.alloc_barrier, T.barrier_arrive/wait, T.tma_copy, T.set_max_nreg and T.fence_proxy_async "
                f"need Hopper (sm_90a); this kernel compiles for {arch or 'no target'}",
                stmt.span,
            )

    walk(func.body, [(tirx.Evaluate, on_eval)])
    return func

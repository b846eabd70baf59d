"""Pass `lower_tile_ops_for_cpu`: the tile ops left after `expand_elementwise_ops` (gemm, reductions,
cumsum, reducers, views) become loops over whole tiles, each op's `lower_cpu`.

Before:  T.tl_gemm(A_s[0:64, 0:32], B_s[0:32, 0:64], C_l[0:64, 0:64], 0, 0, 0, 1)
After:   for m, k, n in T.grid(64, 32, 64): C_l[m, n] = C_l[m, n] + A_s[m, k] * B_s[k, n]   (after a clear)

On the CPU a block runs on one core: an op's loops cover its whole tile in one thread, with no
layout (every tile is row-major). Requires: `check_cpu_constructs` passed (every op left has a CPU
form). Element atomics (`T.atomic_add(C[i, j], v)`, and those tile atomics expanded to) become calls
of `src/tl_templates/cpu/atomic.cc`, which `codegen/cpu.py` links in: blocks run on several cores
at once. Guarantees: no tile-op call remains.
"""

from __future__ import annotations

import tvm_ffi
from tvm import ir, tirx

from tilelang import intrinsics
from tilelang.op import atomic, base
from tilelang.transform.common import Scope, mutate_with_scope

# Calls that only say how to launch blocks on a GPU (T.use_swizzle's panels): nothing to do on the CPU.
LAUNCH_HINTS = ("use_swizzle",)
CPU_ATOMIC = "tl_cpu_atomic_"  # the functions of atomic.cc: tl_cpu_atomic_<add|max|min>_<dtype>[_ret]
_FLOAT16 = ("float16", "bfloat16")  # values passed and returned as float32 (one calling convention)


def _cpu_atomic(call):
    """An element atomic as a call of atomic.cc (sequentially consistent: every order holds)."""
    load, value = atomic.element_target(call)
    dtype = str(load.source.dtype)
    name = "atomic_add" if getattr(call.op, "name", "") == "tirx.call_extern" else intrinsics.lookup(call).name
    returns = name.endswith("_ret")
    kind = name.removeprefix("atomic_").removesuffix("_ret")
    function = f"{CPU_ATOMIC}{kind}_{dtype}{'_ret' if returns else ''}"
    if dtype in _FLOAT16:
        value = tirx.Cast("float32", value)
        result = tirx.call_extern("float32" if returns else "void", function, tirx.address_of(load), value)
        return tirx.Cast(dtype, result) if returns else result
    return tirx.call_extern(dtype if returns else "void", function, tirx.address_of(load), value)


def lower_tile_ops_for_cpu(func: tirx.PrimFunc) -> tirx.PrimFunc:
    scope = Scope()

    def on_eval(stmt, recurse):
        if any(base.is_tile_op(stmt.value, hint) for hint in LAUNCH_HINTS):
            return tirx.Evaluate(0)
        op = base.parse(stmt)
        return op.lower_cpu(scope.analyzer) if op is not None else stmt

    body = mutate_with_scope(func.body, scope, {tirx.Evaluate: on_eval})

    def on_call(call):
        return _cpu_atomic(call) if atomic.is_element_atomic(call) else call

    return func.with_body(tvm_ffi.structural_map(body, [(ir.Call, on_call)], order="post"))

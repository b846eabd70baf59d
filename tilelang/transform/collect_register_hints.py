"""Pass `collect_register_hints`: the kernel's register hints (T.annotate_producer_reg_dealloc,
T.annotate_consumer_reg_alloc, T.no_set_max_nreg / T.disable_warp_group_reg_alloc) leave the body
and become one function attribute, which `set_register_budgets` applies to the warp
specialization tilelang builds.

Before:  T.Kernel { ...; tl.register_hint(producer, 24); ... }
After:   T.Kernel { ...; ... }       attrs["tl.register_hints"] = {"producer": [24, " --> file:line:col ..."]}

A hint is for the whole kernel wherever it is written (in the public TileLang too), so it is taken
out first, before any pass moves code around it; the attribute keeps each role's count and the
hint's source location, for `set_register_budgets` to point at the user's line.

Requires: the kernel as traced. Guarantees: no `tl.register_hint` call remains; the attribute is
set when the kernel had a hint. Errors: a UserError where one role gets two different counts.
"""

from __future__ import annotations

import tvm_ffi
from tvm import ir, tirx

from tilelang.errors import at_span, describe_span
from tilelang.language.barriers import HINT_CONSUMER, HINT_NONE, HINT_PRODUCER, REGISTER_HINT
from tilelang.utils.ir import const_int, seq

REGISTER_HINTS = "tl.register_hints"  # {"producer" | "consumer" | "none": [registers, location]}
ROLES = {HINT_PRODUCER: "producer", HINT_CONSUMER: "consumer", HINT_NONE: "none"}


def hint_of(stmt) -> tuple[str, int] | None:
    """(role, registers) of a register-hint statement, or None."""
    call = stmt.value if isinstance(stmt, tirx.Evaluate) else None
    if not (isinstance(call, ir.Call) and isinstance(call.op, ir.Op) and call.op.name == REGISTER_HINT):
        return None
    return ROLES[const_int(call.args[0])], const_int(call.args[1])


def collect_register_hints(func: tirx.PrimFunc) -> tirx.PrimFunc:
    found: dict = {}

    def note(stmt):
        role, registers = hint_of(stmt)
        earlier = found.get(role)
        if earlier is not None and hint_of(earlier)[1] != registers:
            raise at_span(
                f"the {role} warpgroup's registers are hinted twice, as {hint_of(earlier)[1]} and {registers}: "
                "a register hint is for the whole kernel; keep one",
                earlier.span,
                stmt.span,
            )
        found[role] = stmt

    def on_seq(node):
        kept = [s for s in node.seq if hint_of(s) is None]
        for s in node.seq:
            if hint_of(s) is not None:
                note(s)
        if len(kept) == len(node.seq):
            return node
        return seq(kept) if kept else tirx.Evaluate(tirx.const(0, "int32"))

    def on_eval(stmt):  # a hint alone in a body (the only statement of a branch)
        if hint_of(stmt) is None:
            return stmt
        note(stmt)
        return tirx.Evaluate(tirx.const(0, "int32"))

    body = tvm_ffi.structural_map(func.body, [(tirx.SeqStmt, on_seq)], order="post")
    body = tvm_ffi.structural_map(body, [(tirx.Evaluate, on_eval)])
    if not found:
        return func
    hints = {role: [hint_of(stmt)[1], describe_span(stmt.span)] for role, stmt in found.items()}
    return func.with_body(body).with_attr(REGISTER_HINTS, tvm_ffi.convert(hints))

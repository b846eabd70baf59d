"""Pass `specialize_uniform_masks`: a masked fill of a fragment gets fast paths for whole-tile cases.

Attention kernels start each block of scores with a mask: `s[i, j] = if_then_else(cond, -inf, 0)`
where `cond` compares the query and key positions. For most blocks the condition has the same value
at every (i, j) of the tile; only blocks on the diagonal (or past the sequence's end) are mixed.
When `cond` is linear in the loop's indices, its extremes over the tile are known, which gives two
conditions on the block's own indices: "true everywhere" and "false everywhere". Each becomes a
uniform branch taking a plain fill, which `fold_accumulator_clear` may then fold into the gemm.

Before:  for i, j in T.Parallel(128, 128):
             s[i, j] = if_then_else(bx * 128 + i < k * 128 + j, -inf, 0)
After:   if k < bx:                      # bx * 128 + i >= k * 128 + j for every i, j
             T.fill(s, 0)
         elif bx < k: T.fill(s, -inf)   # (the analyzer drops it when it cannot happen)
         else: <the loop above>

Names bound in the loop body before the store (`q_idx = bx * 128 + i`, as the public tutorials
write the mask) are read through: the condition is the same with their values in place.

It names `T.fill`, the op it writes.

Requires: tile ops as parsed or pipelined (runs before `expand_elementwise_ops`). Guarantees: the
same values are stored; loops whose condition is not linear in the loop indices, that store a part
of a fragment, or store anything else, are left as they are.
"""

from __future__ import annotations

from tvm import ir, sym, tirx

from tilelang.op import fill
from tilelang.op.loops import is_parallel
from tilelang.transform.common import Scope, inline_bindings, mutate_with_scope
from tilelang.utils.ir import collect, const_int, is_if_then_else

_FALSE = tirx.const(False, "bool")
# A comparison as `sign * (a - b) < 0`, or `<= 0` when inclusive: kind -> (sign, inclusive).
_AS_DIFFERENCE = {tirx.LT: (1, 0), tirx.LE: (1, 1), tirx.GT: (-1, 0), tirx.GE: (-1, 1)}


def _uses(expr, variables) -> bool:
    return any(v.same_as(u) for v in collect(expr, ir.Var) for u in variables)


def _range(diff, domain):
    """(lowest, highest) of `diff` over the loop indices (each in [0, extent)), when `diff` is
    linear in them with constant coefficients; None otherwise."""
    variables = list(domain)
    coeffs = sym.detect_linear_equation(diff, variables)
    if not coeffs or any(const_int(c) is None for c in coeffs[:-1]):
        return None
    low = high = coeffs[-1]
    for c, v in zip(coeffs[:-1], variables):
        span = const_int(c) * (domain[v] - 1)
        low, high = (low + span, high) if span < 0 else (low, high + span)
    return low, high


def truth(cond, domain) -> tuple:
    """(holds everywhere, holds nowhere): conditions without the loop indices, each implying what
    it says about `cond` over the whole domain {index var: extent}; `False` where nothing is known."""
    if not _uses(cond, domain):
        return cond, tirx.Not(cond)
    if isinstance(cond, (tirx.And, tirx.BitwiseAnd)):
        (ta, fa), (tb, fb) = truth(cond.a, domain), truth(cond.b, domain)
        return tirx.And(ta, tb), tirx.Or(fa, fb)
    if isinstance(cond, (tirx.Or, tirx.BitwiseOr)):
        (ta, fa), (tb, fb) = truth(cond.a, domain), truth(cond.b, domain)
        return tirx.Or(ta, tb), tirx.And(fa, fb)
    if isinstance(cond, (tirx.Not, tirx.BitwiseNot)):
        t, f = truth(cond.a, domain)
        return f, t
    for kind, (sign, inclusive) in _AS_DIFFERENCE.items():
        if isinstance(cond, kind) and str(cond.a.ty.dtype).startswith("int"):
            bounds = _range((cond.a - cond.b) * sign, domain)  # cond: sign * (a - b) < 0 (or <= 0)
            if bounds is None:
                break
            low, high = bounds
            if inclusive:
                return high <= 0, low > 0
            return high < 0, low >= 0
    return _FALSE, _FALSE


def _impossible(cond, scope) -> bool:
    """Whether a comparison provably never holds in `scope` (`k > bx` where k runs to bx), beyond
    what the simplifier's constant bounds see."""
    for kind, (sign, inclusive) in _AS_DIFFERENCE.items():
        if isinstance(cond, kind):
            return scope.provably(inclusive, (cond.a - cond.b) * sign, None)  # never a - b < 0 (<= 0)
    return False


def _masked_fill(loop):
    """(fragment, cond, value where true, value where false) when `loop` is a T.Parallel nest that
    stores `if_then_else(cond, a, b)` into a whole fragment, indexed by its own loop indices."""
    domain, node = {}, loop
    while is_parallel(node):
        if const_int(node.min) != 0 or const_int(node.extent) is None:
            return None
        domain[node.loop_var] = const_int(node.extent)
        node = node.body
    node = _inline_bindings(node)
    if not isinstance(node, tirx.BufferStore) or not is_if_then_else(node.value):
        return None
    buf = node.buffer
    if buf.scope() != "local.fragment" or [const_int(n) for n in buf.shape] != list(domain.values()):
        return None
    if not all(isinstance(x, ir.Var) and x.same_as(v) for x, v in zip(node.indices, domain)):
        return None
    cond, a, b = node.value.args
    if _uses(a, domain) or _uses(b, domain) or collect(a, ir.TensorLoad) or collect(b, ir.TensorLoad):
        return None
    if any(ld.source.scope() not in ("global", "local") for ld in collect(cond, ir.TensorLoad)):
        return None  # the uniform branch's condition runs outside the loop: no fragment or shared reads
    return buf, cond, a, b, domain


def _inline_bindings(body):
    """The store of a loop body `q_idx = ...; k_idx = ...; s[i, j] = f(q_idx, k_idx)` with the
    bindings' values put in place of their names (each value may use the ones bound before it);
    `body` itself when it is not bindings followed by one store."""
    if not isinstance(body, tirx.SeqStmt):
        return body
    stmts = inline_bindings(body.seq)
    return stmts[0] if len(stmts) == 1 and isinstance(stmts[0], tirx.BufferStore) else body


def _fill(buf, value, span):
    return tirx.Evaluate(fill.fill(buf, value), span=span)


def specialize_uniform_masks(func: tirx.PrimFunc) -> tirx.PrimFunc:
    scope = Scope()

    def on_for(loop, recurse):
        match = _masked_fill(loop) if is_parallel(loop) else None
        if match is None:
            return recurse(loop)
        buf, cond, a, b, domain = match
        everywhere, nowhere = (scope.analyzer.simplify(c) for c in truth(cond, domain))
        everywhere, nowhere = (_FALSE if _impossible(c, scope) else c for c in (everywhere, nowhere))
        if const_int(everywhere) == 0 and const_int(nowhere) == 0:
            return loop
        if const_int(nowhere) == 1:
            return _fill(buf, b, loop.span)
        if const_int(everywhere) == 1:
            return _fill(buf, a, loop.span)
        out = loop
        if const_int(everywhere) != 0:
            out = tirx.IfThenElse(everywhere, _fill(buf, a, loop.span), out)
        if const_int(nowhere) != 0:
            out = tirx.IfThenElse(nowhere, _fill(buf, b, loop.span), out)
        return out

    return func.with_body(mutate_with_scope(func.body, scope, {tirx.For: on_for}))

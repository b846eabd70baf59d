"""The consumer stages of a `T.Pipelined` loop the user gave no `order`/`stage` for, when the loop is
an attention loop: FlashAttention-3's split, inferred from the body's data flow.

An attention body is two gemms, the second accumulating across iterations (O += P·V) from an A
operand the loop derives from the first gemm's result through other work (S = Q·Kᵀ, softmax, P):

    program order:  [mask], S = Q·Kᵀ, softmax(S) -> P, O *= rescale, O += P·V
    inferred:       stage 0: [mask], S = Q·Kᵀ      (iteration i)
                    stage 1: O *= rescale, O += P·V (iteration i - 1)
                    stage 0: softmax(S) -> P        (iteration i)

so that P·V of block i - 1 runs on the tensor cores beside the softmax of block i: what a user writes
with `order=[...], stage=[...], group=[...]` in the annotated examples. Stage 1 is the second gemm and
the statements between the gemms that write its accumulator. The split is taken only when it keeps
every result: the statements it moves ahead of stage 1 (those before the first gemm, and those after
a stage-1 statement in program order) neither write what stage 1 touches nor touch what it writes.
The copies from global memory stay producers (stage -1), placed by the pipeline.

The stages are used only by a warp-specialized loop (`plan_pipelines`); other forms run the
consumers in program order.
"""

from __future__ import annotations

from tilelang.transform.pipelining.checks import load_of
from tilelang.transform.pipelining.wgmma_waits import buffers_of, mma_of


def _has(buffers, b) -> bool:
    return any(x.same_as(b) for x in buffers)


def _conflict(a, b) -> bool:
    """Whether statements `a` and `b` may not swap places: one writes what the other touches."""
    (ta, wa), (tb, wb) = buffers_of(a), buffers_of(b)
    return any(_has(tb, w) for w in wa) or any(_has(ta, w) for w in wb)


def attention_stages(stmts) -> tuple[list, list] | None:
    """(order, stage) per statement of the loop body `stmts` (bindings inlined), in the form of
    T.Pipelined's own lists (stage -1: the producers), or None when the body is not an attention
    loop or the split would change a result."""
    mmas = [mma_of(s) for s in stmts]
    at = [j for j, m in enumerate(mmas) if m is not None]
    if len(at) != 2:
        return None
    g1, g2 = at
    first, second = mmas[g1], mmas[g2]
    if not (first.asynchronous and second.asynchronous) or second.clear is not False:
        return None
    if second.register_operand is None:
        return None
    acc = second.accumulator.buffer
    # P derives from S through the statements between the gemms.
    derived = [first.accumulator.buffer]
    later = []  # statements between the gemms writing O (the rescale)
    for j in range(g1 + 1, g2):
        if load_of(stmts[j]) is not None:
            continue
        touched, written = buffers_of(stmts[j])
        if any(_has(touched, d) for d in derived):
            derived += written
        if _has(written, acc):
            later.append(j)
    if not _has(derived, second.register_operand):
        return None
    stage1 = later + [g2]
    consumers = [j for j in range(len(stmts)) if load_of(stmts[j]) is None]
    if any(_has(buffers_of(stmts[j])[1], acc) for j in consumers if j not in stage1 and j > g1):
        return None  # O written after P·V by stage-0 work: it would see O one block early
    prefix = [j for j in consumers if j <= g1]
    rest = [j for j in consumers if j > g1 and j not in stage1]
    # Statements that run before a stage-1 statement they followed in program order.
    ahead = prefix + [r for r in rest if any(r > s for s in stage1)]
    if any(_conflict(stmts[a], stmts[s]) for a in ahead for s in stage1):
        return None
    order, stage = [-1] * len(stmts), [-1] * len(stmts)
    for position, j in enumerate(prefix + stage1 + rest):
        order[j], stage[j] = position, 1 if j in stage1 else 0
    return order, stage

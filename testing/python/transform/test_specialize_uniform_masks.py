"""specialize_uniform_masks: a masked fragment fill gets uniform fast paths where the mask is the
same over the whole tile; what it cannot reason about is left as written."""

import itertools

import numpy as np
import pytest
import tvm
from ir_testing import assert_ir_equal
from tvm import tirx

import tilelang.language as T
from tilelang.layout.evaluate import evaluate
from tilelang.transform.specialize_uniform_masks import specialize_uniform_masks, truth

i, j, bx, k = (tirx.Var(n, "int32") for n in ("i", "j", "bx", "k"))
CONDITIONS = [
    bx * 8 + i < k * 4 + j,  # causal, block_M 8, block_N 4
    (bx * 8 + i < k * 4 + j) | (k * 4 + j >= 13),  # ... or past a sequence of 13 keys
    (k * 4 + j <= bx * 8 + i + 2) & (i - j > bx - 3),
    tirx.Not(i * 2 - j * 3 >= k * 4 - 6),
    i * j < k,  # not linear: nothing is known
    k > bx,  # no loop index: the condition itself
]


@pytest.mark.parametrize("cond", CONDITIONS, ids=range(len(CONDITIONS)))
def test_truth_implies_the_condition_over_the_whole_tile(cond):
    domain = {i: 8, j: 4}
    everywhere, nowhere = truth(cond, domain)
    ii, jj = np.indices((8, 4))
    decided = 0
    for b, kk in itertools.product(range(4), range(8)):
        outer = {bx: np.full((8, 4), b), k: np.full((8, 4), kk)}
        values = np.asarray(evaluate(cond, {i: ii, j: jj, **outer}), dtype=bool)
        if np.all(np.asarray(evaluate(everywhere, outer), dtype=bool)):
            assert values.all(), (b, kk)
            decided += 1
        if np.all(np.asarray(evaluate(nowhere, outer), dtype=bool)):
            assert not values.any(), (b, kk)
            decided += 1
    if "i * j" not in str(cond):
        assert decided > 0  # linear conditions are decided for some blocks


def _causal(seq_len):
    @T.prim_func
    def main(A: T.Tensor((64, 64), "float32")):
        with T.Kernel(4, threads=128) as bx:
            s = T.alloc_fragment((16, 16), "float32")
            for k in T.serial(bx + 1):
                for a, b in T.Parallel(16, 16):
                    s[a, b] = T.if_then_else(
                        (bx * 16 + a < k * 16 + b) | (k * 16 + b >= seq_len), -T.infinity("float32"), 0
                    )
                A[bx, k] = s[0, 0]

    return main


def test_causal_mask_gets_a_fill_off_the_diagonal():
    before = _causal(64)
    got = specialize_uniform_masks(before)
    # One uniform branch: zero off the diagonal (k < bx), the mask on it; "everywhere masked" (k > bx)
    # cannot happen in this loop and is dropped.
    (branch,) = _collect(got.body, tirx.IfThenElse)
    assert "tl_fill(s[0:16, 0:16], T.float32(0.0))" in branch.then_case.script()
    bxs, ks = np.indices((4, 4))
    cond = np.asarray(evaluate(branch.condition, {_var(got, "bx"): bxs, _var(got, "k"): ks}), dtype=bool)
    assert (cond == (ks < bxs)).all()
    (mask,) = [n for n in _collect(before.body, tirx.For) if n.kind == tirx.ForKind.PARALLEL and n.loop_var.name == "a"]
    tvm.ir.assert_structural_equal(branch.else_case, mask, map_free_vars=True)


def test_a_sequence_end_inside_the_tile_keeps_the_mask_on_its_block():
    got = specialize_uniform_masks(_causal(50))
    (branch,) = _collect(got.body, tirx.IfThenElse)
    bxs, ks = np.indices((4, 4))
    cond = np.asarray(evaluate(branch.condition, {_var(got, "bx"): bxs, _var(got, "k"): ks}), dtype=bool)
    assert (cond == ((ks < bxs) & (ks * 16 + 15 < 50))).all()


def test_names_bound_in_the_loop_are_read_through():
    # The public tutorials' causal mask: positions bound to names, then compared.
    @T.prim_func
    def main(A: T.Tensor((64, 64), "float32")):
        with T.Kernel(4, threads=128) as bx:
            s = T.alloc_fragment((16, 16), "float32")
            for k in T.serial(4):
                for a, b in T.Parallel(16, 16):
                    q_idx = bx * 16 + a
                    k_idx = k * 16 + b
                    s[a, b] = T.if_then_else(q_idx >= k_idx, 0, -T.infinity("float32"))
                A[bx, k] = s[0, 0]

    got = specialize_uniform_masks(main)
    outer, inner = _collect(got.body, tirx.IfThenElse)
    assert 'tl_fill(s[0:16, 0:16], T.float32("-inf"))' in outer.then_case.script()
    assert "tl_fill(s[0:16, 0:16], T.float32(0.0))" in inner.then_case.script()
    bxs, ks = np.indices((4, 4))
    where = {_var(got, "bx"): bxs, _var(got, "k"): ks}
    assert (np.asarray(evaluate(outer.condition, where), dtype=bool) == (ks > bxs)).all()
    assert (np.asarray(evaluate(inner.condition, where), dtype=bool) == (ks < bxs)).all()
    # On the diagonal, the loop as written, bindings included.
    (mask,) = [n for n in _collect(main.body, tirx.For) if n.kind == tirx.ForKind.PARALLEL and n.loop_var.name == "a"]
    tvm.ir.assert_structural_equal(inner.else_case, mask, map_free_vars=True)


@pytest.mark.parametrize(
    "what",
    ["not linear", "value from a buffer", "part of the fragment", "fragment in the condition"],
)
def test_left_as_written(what):
    @T.prim_func
    def nonlinear(A: T.Tensor((64, 64), "float32")):
        with T.Kernel(4, threads=128) as bx:
            s = T.alloc_fragment((16, 16), "float32")
            for a, b in T.Parallel(16, 16):
                s[a, b] = T.if_then_else(a * b < bx, 1.0, 0.0)
            A[bx, 0] = s[0, 0]

    @T.prim_func
    def loaded(A: T.Tensor((64, 64), "float32")):
        with T.Kernel(4, threads=128) as bx:
            s = T.alloc_fragment((16, 16), "float32")
            for a, b in T.Parallel(16, 16):
                s[a, b] = T.if_then_else(a < bx, A[a, b], 0.0)
            A[bx, 0] = s[0, 0]

    @T.prim_func
    def partial(A: T.Tensor((64, 64), "float32")):
        with T.Kernel(4, threads=128) as bx:
            s = T.alloc_fragment((16, 32), "float32")
            for a, b in T.Parallel(16, 16):
                s[a, b] = T.if_then_else(a < bx, 1.0, 0.0)
            A[bx, 0] = s[0, 0]

    @T.prim_func
    def fragment_in_condition(A: T.Tensor((64, 64), "float32")):
        with T.Kernel(4, threads=128) as bx:
            s = T.alloc_fragment((16, 16), "float32")
            n = T.alloc_fragment((16,), "int32")
            for a in T.Parallel(16):
                n[a] = a
            for a, b in T.Parallel(16, 16):
                s[a, b] = T.if_then_else(a < n[0] + bx, 1.0, 0.0)
            A[bx, 0] = s[0, 0]

    func = {
        "not linear": nonlinear,
        "value from a buffer": loaded,
        "part of the fragment": partial,
        "fragment in the condition": fragment_in_condition,
    }[what]
    assert_ir_equal(specialize_uniform_masks(func), func)


def _collect(node, kind):
    from tilelang.utils.ir import collect

    return collect(node, kind)


def _var(func, name):
    from tvm import ir

    return next(v for v in _collect(func.body, ir.Var) if v.name == name)

"""Layout algebra of Fragment: forward map, local size, inverse, equivalence, IR round trip."""

import pytest
from tvm import sym, tirx

from tilelang.layout import fragment as fl


def _eval(expr, env):
    ana = sym.Analyzer()
    return int(ana.simplify(fl.substitute(expr, {k: tirx.const(v, "int32") for k, v in env.items()})))


@pytest.mark.parametrize("shape,threads,vec", [((128, 64), 128, 8), ((64,), 32, 2), ((16, 8, 4), 64, 4)])
def test_partition_is_a_bijection(shape, threads, vec):
    frag = fl.partition(shape, threads, vec)
    size = 1
    for n in shape:
        size *= n
    assert frag.local_size == size // threads
    seen = set()
    for flat in range(size):
        idx, rem = [], flat
        for n in reversed(shape):
            idx.append(rem % n)
            rem //= n
        idx.reverse()
        env = dict(zip(frag.vars, idx))
        t, r = _eval(frag.base, env), _eval(frag.index, env)
        assert 0 <= t < threads and 0 <= r < frag.local_size
        seen.add((t, r))
    assert len(seen) == size


def test_partition_of_rows_that_are_not_a_power_of_two_inverts():
    # 128 x 176 (flash attention's block_N 176) over 256 threads, 8 per vector: 2816 vectors, 11 rounds.
    frag = fl.partition((128, 176), 256, 8)
    apply = frag.inverse()
    t, r = tirx.Var("t", "int32"), tirx.Var("r", "int32")
    (i, j), _ = apply(t, r)
    for thread, reg in ((0, 0), (255, 87), (17, 42)):
        env = {t: thread, r: reg}
        row, col = _eval(i, env), _eval(j, env)
        assert (
            _eval(frag.base, {frag.vars[0]: row, frag.vars[1]: col}),
            _eval(frag.index, {frag.vars[0]: row, frag.vars[1]: col}),
        ) == (thread, reg)


def test_partition_vectors_are_contiguous_per_thread():
    frag = fl.partition((4, 32), 8, 4)
    env = {frag.vars[0]: 1, frag.vars[1]: 4}
    t0, r0 = _eval(frag.base, env), _eval(frag.index, env)
    for k in range(4):
        env = {frag.vars[0]: 1, frag.vars[1]: 4 + k}
        assert (_eval(frag.base, env), _eval(frag.index, env)) == (t0, r0 + k)


def test_inverse_round_trip_and_padding():
    frag = fl.partition((100, 64), 128, 4)  # 6400 elements, 52 registers: the last round is partial
    assert frag.local_size == 52
    t, r = tirx.Var("t", "int32"), tirx.Var("r", "int32")
    inv = frag.inverse()
    (i_expr, j_expr), valid = inv(t, r)
    count = 0
    for tv in range(128):
        for rv in range(52):
            env = {t: tv, r: rv}
            if not _eval(valid, env):
                continue
            count += 1
            i, j = _eval(i_expr, env), _eval(j_expr, env)
            back = {frag.vars[0]: i, frag.vars[1]: j}
            assert (_eval(frag.base, back), _eval(frag.index, back)) == (tv, rv)
    assert count == 6400


def test_equivalence_and_ir_round_trip():
    a = fl.partition((32, 32), 64, 4)
    assert a.is_equivalent(fl.partition((32, 32), 64, 4))
    assert not a.is_equivalent(fl.partition((32, 32), 64, 2))
    assert not a.is_equivalent(fl.partition((32, 32), 32, 4))
    b = fl.from_ir(fl.to_ir(a))
    assert b.is_equivalent(a) and b.vector_size == 4 and b.num_threads == 64


def test_map_gives_thread_and_register():
    frag = fl.partition((16, 16), 32, 2)
    thread, index = frag.map([tirx.const(3, "int32"), tirx.const(5, "int32")])
    flat = 3 * 16 + 5
    assert int(sym.Analyzer().simplify(thread)) == (flat // 2) % 32
    assert int(sym.Analyzer().simplify(index)) == (flat // 64) * 2 + flat % 2


@pytest.mark.parametrize(
    "shape,threads,vec,groups,slots",
    [
        ((1, 4096), 256, 8, [(1, 256)], 1),  # one row over every thread
        ((8, 4096), 256, 8, [(1, 256)], 8),  # several rows, each over every thread
        ((128, 64), 128, 4, [(1, 16)], 16),  # 16 threads per row, 8 rows per round
        ((64, 32), 64, 2, [(1, 16)], 16),
    ],
)
def test_reduced_layout_of_a_partition(shape, threads, vec, groups, slots):
    src = fl.partition(shape, threads, vec)
    dst = fl.reduced(src, 1)
    assert dst.groups == groups and dst.local_size == slots and dst.shape == (shape[0],)
    # every thread holding part of row i holds the result of row i
    from tilelang.layout.evaluate import evaluate, grid

    i, j = grid(shape)
    holders = evaluate(src.base, {src.vars[0]: i, src.vars[1]: j})
    assert dst.holds(holders, [i]).all()


def test_reduced_layout_rejects_irregular_holders():
    # rows of 12 elements over 16 threads: row 0 is on threads 0-11, row 1 on 12-15 and 0-7
    src = fl.partition((4, 12), 16, 1)
    with pytest.raises(fl.IrregularLayout):
        fl.reduced(src, 1)

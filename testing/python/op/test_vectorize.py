"""op/vectorize.py: the widest vector of a T.Parallel nest's innermost loop (CPU, on IR built here)."""

from tvm import ir, sym, tirx

from tilelang.op.vectorize import plan_vector_size


def _nest(n=128):
    i, j = tirx.Var("i", "int32"), tirx.Var("j", "int32")
    ana = sym.Analyzer()
    ana.bind(i, ir.Range(0, 64))
    ana.bind(j, ir.Range(0, n))
    return i, j, ana


def _plan(body, i, j, ana, n=128):
    return plan_vector_size([i, j], [tirx.const(64, "int32"), tirx.const(n, "int32")], body, ana)


def test_a_packed_register_read_limits_the_vector_to_the_lanes_of_one_element():
    # B[i, j // 2]: lanes 2v and 2v + 1 read one byte (a broadcast); wider, the lanes gather bytes.
    i, j, ana = _nest()
    packed = tirx.decl_buffer((64, 64), "uint8", "B", scope="local.fragment")
    out = tirx.decl_buffer((64, 128), "uint8", "C", scope="local.fragment")
    body = tirx.BufferStore(out, tirx.BufferLoad(packed, [i, tirx.floordiv(j, 2)]), [i, j])
    assert _plan(body, i, j, ana) == 2


def test_a_register_read_at_a_constant_stride_keeps_the_vector():
    # (the guard) B[i, j] and a transposed read move by a constant per lane: only the type limits them.
    i, j, ana = _nest()
    src = tirx.decl_buffer((64, 128), "uint8", "B", scope="local.fragment")
    out = tirx.decl_buffer((64, 128), "uint8", "C", scope="local.fragment")
    assert _plan(tirx.BufferStore(out, tirx.BufferLoad(src, [i, j]), [i, j]), i, j, ana) == 16


def test_a_value_computed_from_the_loop_variable_counts_its_int32_lanes():
    # (j % 2 * 4).astype(uint8) computes in int32 lanes: at most 8 of them (256 bits) have a CUDA type.
    i, j, ana = _nest()
    out = tirx.decl_buffer((64, 128), "uint8", "C", scope="local.fragment")
    body = tirx.BufferStore(out, tirx.Cast("uint8", tirx.floormod(j, 2) * 4), [i, j])
    assert _plan(body, i, j, ana) == 8


def test_a_cast_inside_an_index_does_not_count():
    i, j, ana = _nest()
    src = tirx.decl_buffer((64, 128), "uint8", "B", scope="shared")
    out = tirx.decl_buffer((64, 128), "uint8", "C", scope="local.fragment")
    index = tirx.Cast("int32", tirx.Cast("int64", j))
    assert _plan(tirx.BufferStore(out, tirx.BufferLoad(src, [i, index]), [i, j]), i, j, ana) == 16

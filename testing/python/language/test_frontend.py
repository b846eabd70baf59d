"""The T.* frontend builds the TIR each construct stands for."""

import pytest
import tvm_ffi
from tvm import ir, tirx

import tilelang.language as T
from tilelang.errors import UserError
from tilelang.op import base
from tilelang.testing import assert_points_at


def _collect(func, kind):
    out = []
    tvm_ffi.structural_walk(func.body, [(kind, out.append)], order="pre")
    return out


def _thread_extents(func):
    return {a.node.thread_tag: int(a.value) for a in _collect(func, tirx.AttrStmt) if a.attr_key == "thread_extent"}


def test_kernel_grid_and_threads():
    @T.prim_func
    def main(A: T.Tensor((128, 64), "float16")):
        with T.Kernel(4, 8, 2, threads=(32, 4)) as (bx, by, bz):
            A[bx, by] = A[bz, 0]

    assert _thread_extents(main) == {
        "blockIdx.x": 4,
        "blockIdx.y": 8,
        "blockIdx.z": 2,
        "threadIdx.x": 32,
        "threadIdx.y": 4,
    }


def test_kernel_single_block_index_and_ceildiv():
    N = 1000

    @T.prim_func
    def main(A: T.Tensor((N,), "float32")):
        with T.Kernel(T.ceildiv(N, 128), threads=128) as bx:
            A[bx] = 0.0

    assert _thread_extents(main) == {"blockIdx.x": 8, "threadIdx.x": 128}


def test_two_kernels_in_one_prim_func():
    @T.prim_func
    def main(A: T.Tensor((64,), "float32")):
        with T.Kernel(2, threads=32) as bx:
            A[bx] = 1.0
        with T.Kernel(1, threads=64) as bx:
            A[bx] = 2.0

    extents = [a for a in _collect(main, tirx.AttrStmt) if a.node.thread_tag == "threadIdx.x"]
    assert [int(a.value) for a in extents] == [32, 64]


def test_allocation_scopes_and_dtypes():
    @T.prim_func
    def main(A: T.Tensor((64,), T.float16)):
        with T.Kernel(1, threads=32):
            s = T.alloc_shared((16, 16), T.bfloat16)
            f = T.alloc_fragment((16, 16), "float")
            loc = T.alloc_local((4,), T.int8)
            s[0, 0] = T.Cast(T.bfloat16, A[0])
            f[0, 0] = 1.0
            loc[0] = T.int8(1)

    allocs = {a.buffer.name: (a.buffer.scope(), str(a.buffer.dtype)) for a in _collect(main, tirx.AllocBuffer)}
    assert allocs == {"s": ("shared.dyn", "bfloat16"), "f": ("local.fragment", "float32"), "loc": ("local", "int8")}
    assert str(main.params[0].dtype) == "float16"


def test_parallel_becomes_parallel_loops_with_annotations():
    @T.prim_func
    def main(A: T.Tensor((64, 32), "float32")):
        with T.Kernel(1, threads=128):
            for i, j in T.Parallel(64, 32, coalesced_width=2):
                A[i, j] = 0.0

    loops = _collect(main, tirx.For)
    assert [lp.kind for lp in loops] == [tirx.ForKind.PARALLEL, tirx.ForKind.PARALLEL]
    assert [int(lp.extent) for lp in loops] == [64, 32]
    assert int(loops[0].annotations["coalesced_width"]) == 2


def test_loop_kinds_and_pipelined_annotations():
    @T.prim_func
    def main(A: T.Tensor((64,), "float32")):
        with T.Kernel(1, threads=32):
            for k in T.Pipelined(8, num_stages=3):
                A[k] = 1.0
            for k in T.serial(4):
                A[k] = 2.0
            for k in T.unroll(4):
                A[k] = 3.0
            for k in T.vectorized(4):
                A[k] = 4.0

    loops = _collect(main, tirx.For)
    assert [lp.kind for lp in loops] == [
        tirx.ForKind.SERIAL,
        tirx.ForKind.SERIAL,
        tirx.ForKind.UNROLLED,
        tirx.ForKind.VECTORIZED,
    ]
    assert int(loops[0].annotations["num_stages"]) == 3


def _copy_regions(func):
    calls = [e.value for e in _collect(func, tirx.Evaluate) if base.is_tile_op(e.value, "copy")]
    return [(base.Region.from_ir(c.args[0]).describe(), base.Region.from_ir(c.args[1]).describe()) for c in calls]


def test_copy_region_forms():
    @T.prim_func
    def main(A: T.Tensor((256, 128), "float16"), Q: T.Tensor((2, 256, 4, 64), "float16")):
        with T.Kernel(2, 2, threads=128) as (bx, by):
            s = T.alloc_shared((64, 32), "float16")
            q = T.alloc_shared((64, 64), "float16")
            T.copy(A[by * 64, bx * 32], s)  # start element: extent from the other side
            T.copy(s, A[by * 64 : by * 64 + 64, 0:32])  # slice
            T.copy(Q[bx, by * 64 : by * 64 + 64, 3, :], q)  # slice with unit dimensions
            T.copy(q, q)  # whole buffers

    got = _copy_regions(main)
    assert got[0] == ("A[by * 64:by * 64 + 64, bx * 32:bx * 32 + 32]", "s[0:0 + 64, 0:0 + 32]")
    assert got[1] == ("s[0:0 + 64, 0:0 + 32]", "A[by * 64:by * 64 + 64, 0:0 + 32]")
    assert got[2][0] == "Q[bx, by * 64:by * 64 + 64, 3, 0:0 + 64]"


def test_fill_and_clear():
    @T.prim_func
    def main(A: T.Tensor((64,), "float32")):
        with T.Kernel(1, threads=32):
            f = T.alloc_fragment((64,), "float32")
            T.fill(f, -T.infinity("float32"))
            T.clear(f)
            T.copy(f, A)

    fills = [e.value for e in _collect(main, tirx.Evaluate) if base.is_tile_op(e.value, "fill")]
    assert len(fills) == 2
    assert float(fills[1].args[1].value) == 0.0


def test_scalar_assignment_becomes_binding_and_alloc_var_stays_mutable():
    @T.prim_func
    def main(A: T.Tensor((64,), "float32")):
        with T.Kernel(2, threads=32) as bx:
            acc = T.alloc_var("float32", init=0)
            for k in T.serial(4):
                acc = acc + A[k]
            for i in T.Parallel(32):
                y = bx * 32 + i
                A[y] = acc

    binds = _collect(main, tirx.Bind)
    assert [b.var.name for b in binds] == ["y"]
    stores = [s.buffer.name for s in _collect(main, tirx.BufferStore)]
    assert stores.count("acc") == 2  # init and the update in the loop


def test_python_if_on_compile_time_values_keeps_one_branch():
    def build(flag):
        @T.prim_func
        def main(A: T.Tensor((64,), "float32")):
            with T.Kernel(1, threads=64):
                for i in T.Parallel(64):
                    if flag:
                        A[i] = 1.0
                    else:
                        A[i] = T.exp2(A[i]) if not flag else 0.0

        return main

    on, off = build(True), build(False)
    assert len(_collect(on, tirx.IfThenElse)) == 0
    assert "exp2" not in on.script() and "exp2" in off.script()


def test_math_helpers():
    @T.prim_func
    def main(A: T.Tensor((64,), "float32")):
        with T.Kernel(1, threads=64):
            for i in T.Parallel(64):
                A[i] = T.max(T.exp(A[i]), T.log(T.min(A[i], 1.0))) + T.if_then_else(i < 3, T.log2(A[i]), 0.0)

    text = main.script()
    for name in ("T.max", "T.exp", "T.log", "T.min", "T.if_then_else", "T.log2"):
        assert name in text


def test_copy_shape_mismatch_names_buffers_and_line():
    with pytest.raises(Exception) as info:

        @T.prim_func
        def main(A: T.Tensor((256, 128), "float16")):
            with T.Kernel(1, threads=128):
                s = T.alloc_shared((64, 32), "float16")
                T.copy(A[0:64, 0:16], s)

    text = str(info.value)
    assert "T.copy" in text and "(64, 16)" in text and "(64, 32)" in text
    assert "T.copy(A[0:64, 0:16], s)" in text  # the user's line


def test_kernel_rejects_four_grid_dims():
    with pytest.raises(Exception, match="one to three grid extents"):

        @T.prim_func
        def main(A: T.Tensor((8,), "float32")):
            with T.Kernel(1, 1, 1, 1, threads=32):
                A[0] = 1.0


def test_user_error_type():
    assert issubclass(UserError, ValueError)
    assert isinstance(ir.Op.get(base.register_op("copy")), ir.Op)


def test_fragment_from_python_functions_pins_a_fragment_and_is_ignored_on_locals():
    """TileLang's T.Fragment(shape, forward_thread_fn, forward_index_fn): a fragment annotation
    built from lambdas; on a per-thread (alloc_local) buffer it pins nothing."""
    import tilelang
    from tilelang.layout.evaluate import evaluate, grid

    frag = T.Fragment((128, 4), forward_thread_fn=lambda i, j: i, forward_index_fn=lambda i, j: j)
    i, j = grid((128, 4))
    assert frag.num_threads == 128
    assert (evaluate(frag.base, {frag.vars[0]: i, frag.vars[1]: j}) == i).all()
    assert (evaluate(frag.index, {frag.vars[0]: i, frag.vars[1]: j}) == j).all()

    @T.prim_func
    def main(A: T.Tensor((128, 4), "float32"), B: T.Tensor((128,), "float32")):
        with T.Kernel(1, threads=128):
            acc = T.alloc_fragment((128, 4), "float32")
            total = T.alloc_local([1], "float32")
            T.annotate_layout({acc: frag, total: T.Fragment(total.shape, forward_thread_fn=lambda i: i)})
            T.copy(A, acc)
            T.clear(total)
            for k in T.serial(4):
                total[0] += A[0, k]
            for r in T.Parallel(128):
                B[r] = acc[r, 0] + acc[r, 3] + total[0]

    src = tilelang.compile(main, target="sm_80").get_kernel_source()
    assert "__global__" in src


def _copy_with_bound_bounds(length):
    @T.prim_func
    def main(A: T.Tensor((256, 64), "float16"), B: T.Tensor((256, 64), "float16")):
        with T.Kernel(4, threads=128) as bx:
            s = T.alloc_shared((64, 64), "float16")
            start = bx * 64
            end = bx * 64 + length
            T.copy(A[start:end, :], s)
            T.copy(s, B[start:end, :])

    return main


def test_copy_extents_from_bound_values_are_checked_once_the_bindings_are_known():
    """`A[start:end]` with `start`/`end` bound to expressions (public MLA kernels do this): parsing
    cannot compare `end - start` with the tile, lowering can."""
    import tilelang
    from tilelang.errors import UserError

    assert "__global__" in tilelang.compile(_copy_with_bound_bounds(64), target="sm_80").get_kernel_source()
    with pytest.raises(UserError, match=r"(?s)shapes .*must match.*T.copy\(A\[start:end") as err:
        tilelang.compile(_copy_with_bound_bounds(32), target="sm_80")
    assert_points_at(err, "T.copy(A[start:end, :], s)")

"""Layout inference: free partition, common propagation through fragments, and conflicts."""

import numpy as np
import pytest
import tvm_ffi
from tvm import tirx

import tilelang
import tilelang.language as T
from tilelang.codegen import cuda
from tilelang.errors import UserError
from tilelang.layout import fragment as fl
from tilelang.layout import layout as sl
from tilelang.layout.evaluate import evaluate, grid
from tilelang.layout.layout import shared_layout_from_ir
from tilelang.testing import assert_points_at, locations_shown
from tilelang.transform.expand_elementwise_ops import expand_elementwise_ops
from tilelang.transform.infer_layout import (
    DYNAMIC,
    FRAGMENT_LAYOUTS,
    LOOP_LAYOUT,
    SHARED_LAYOUTS,
    infer_layout,
)
from tilelang.transform.legalize_safe_memory_access import legalize_safe_memory_access


def _prepare(func):
    return legalize_safe_memory_access(expand_elementwise_ops(func))


def _loop_layouts(func):
    out = []

    def on_for(loop):
        if LOOP_LAYOUT in loop.annotations:
            out.append(fl.from_ir(loop.annotations[LOOP_LAYOUT]))

    tvm_ffi.structural_walk(func.body, [(tirx.For, on_for)], order="pre")
    return out


def _fragment_layouts(func):
    return {b.name: fl.from_ir(v) for b, v in func.attrs[FRAGMENT_LAYOUTS].items()}


def test_free_level_partitions_and_vectorizes():
    @T.prim_func
    def main(A: T.Tensor((1024, 64), "float16"), C: T.Tensor((1024, 64), "float16")):
        with T.Kernel(8, threads=128) as bx:
            for i, j in T.Parallel(128, 64):
                C[bx * 128 + i, j] = A[bx * 128 + i, j]

    (layout,) = _loop_layouts(infer_layout(_prepare(main)))
    assert layout.vector_size == 8  # 8 x fp16 = 128 bits
    assert layout.is_equivalent(fl.partition((128, 64), 128, 8).with_shape_vars(layout.vars))


def test_vector_limited_by_misaligned_rows():
    @T.prim_func
    def main(A: T.Tensor((1024, 66), "float16"), C: T.Tensor((1024, 66), "float16")):
        with T.Kernel(8, threads=128) as bx:
            for i, j in T.Parallel(128, 64):
                C[bx * 128 + i, j] = A[bx * 128 + i, j]

    (layout,) = _loop_layouts(infer_layout(_prepare(main)))
    assert layout.vector_size == 2  # rows of 66 halves are only 4-byte aligned


@pytest.mark.parametrize("symbol_dtype", ["int32", "int64"])
def test_dynamic_rows_keep_the_full_vector(symbol_dtype):
    M = T.dynamic("m", symbol_dtype)

    @T.prim_func
    def main(A: T.Tensor((M, 64), "float16"), C: T.Tensor((M, 64), "float16")):
        with T.Kernel(T.ceildiv(M, 128), threads=128) as bx:
            for i, j in T.Parallel(128, 64):
                C[bx * 128 + i, j] = A[bx * 128 + i, j]

    (layout,) = _loop_layouts(infer_layout(_prepare(main)))
    # The tail guard is on the row only, uniform over a vector; int64 index casts read no memory.
    assert layout.vector_size == 8


def test_dynamic_row_length_keeps_the_vector_under_a_run_time_check():
    N = T.dynamic("n")

    @T.prim_func
    def main(A: T.Tensor((128, N), "float16"), C: T.Tensor((128, N), "float16")):
        with T.Kernel(T.ceildiv(N, 64), threads=128) as bx:
            for i, j in T.Parallel(128, 64):
                C[i, bx * 64 + j] = A[i, bx * 64 + j]

    (layout,) = _loop_layouts(infer_layout(_prepare(main)))
    # A row's alignment and the tail guard hold per vector when n is a multiple of 8: the lowering
    # checks that at run time (op/vectorize.vector_guard; test_lower_tile_ops).
    assert layout.vector_size == 8


def test_dynamic_row_length_with_a_register_gather_stays_scalar():
    N = T.dynamic("n")

    @T.prim_func
    def main(A: T.Tensor((128, N), "float16"), C: T.Tensor((128, N), "float16")):
        with T.Kernel(T.ceildiv(N, 64), threads=128) as bx:
            for i, j in T.Parallel(128, 64):
                C[i, bx * 64 + j] = A[i, bx * 64 + (j * 3) % 64]

    (layout,) = _loop_layouts(infer_layout(_prepare(main)))
    assert layout.vector_size == 1  # (no assumption on n makes a strided read one vector)


def test_loop_over_a_dynamic_extent_gets_no_layout_to_infer():
    M = T.dynamic("m")

    @T.prim_func
    def main(A: T.Tensor((M,), "float32"), C: T.Tensor((M,), "float32")):
        with T.Kernel(1, threads=128):
            for i in T.Parallel(M):
                C[i] = A[i]

    out = infer_layout(_prepare(main))
    loops = []
    tvm_ffi.structural_walk(out.body, [(tirx.For, loops.append)])
    assert [str(lp.annotations[LOOP_LAYOUT]) for lp in loops] == [DYNAMIC]


def test_common_level_follows_the_fragment():
    @T.prim_func
    def main(A: T.Tensor((128, 64), "float32"), C: T.Tensor((64, 128), "float32")):
        with T.Kernel(1, threads=128):
            f = T.alloc_fragment((128, 64), "float32")
            T.copy(A, f)
            for i, j in T.Parallel(128, 64):
                f[i, j] = f[i, j] * 2.0
            for j, i in T.Parallel(64, 128):  # transposed walk: must run where f's elements live
                C[j, i] = f[i, j]

    func = infer_layout(_prepare(main))
    frag = _fragment_layouts(func)["f"]
    first, second, third = _loop_layouts(func)
    assert frag.is_equivalent(first.with_shape_vars(frag.vars)) and first.vector_size == 4
    assert second.is_equivalent(first)
    assert third.vector_size == 1  # the walk is transposed: no contiguous vector
    i, j = tirx.Var("i", "int32"), tirx.Var("j", "int32")
    t_third, _ = third.map([j, i])
    t_frag, _ = frag.map([i, j])
    from tvm import sym

    assert sym.Analyzer().can_prove_equal(t_third, t_frag)


def test_conflicting_uses_name_the_fragment_and_both_lines():
    @T.prim_func
    def main(A: T.Tensor((64, 64), "float32"), B: T.Tensor((64, 64), "float32")):
        with T.Kernel(1, threads=64):
            f = T.alloc_fragment((64, 64), "float32")
            g = T.alloc_fragment((64, 64), "float32")
            T.copy(A, f)
            T.copy(B, g)
            for i, j in T.Parallel(64, 64):
                g[i, j] = g[i, j] + f[i, j]  # g must live where f does
            for i, j in T.Parallel(64, 64):
                f[i, j] = g[j, i]  # ... but here where f's transpose does

    with pytest.raises(UserError) as info:
        infer_layout(_prepare(main))
    assert_points_at(info, "for i, j in T.Parallel(64, 64):")
    text = str(info.value)
    assert "fragment 'g'" in text and "different layouts" in text
    shown = [source for _, _, source in locations_shown(text)]
    assert shown == ["for i, j in T.Parallel(64, 64):", "for i, j in T.Parallel(64, 64):"]


def test_transposed_use_gives_a_transposed_layout():
    @T.prim_func
    def main(A: T.Tensor((64, 64), "float32"), B: T.Tensor((64, 64), "float32")):
        with T.Kernel(1, threads=64):
            f = T.alloc_fragment((64, 64), "float32")
            g = T.alloc_fragment((64, 64), "float32")
            T.copy(A, f)
            for i, j in T.Parallel(64, 64):
                g[j, i] = f[i, j]
            T.copy(g, B)

    layouts = _fragment_layouts(infer_layout(_prepare(main)))
    i, j = tirx.Var("i", "int32"), tirx.Var("j", "int32")
    from tvm import sym

    assert sym.Analyzer().can_prove_equal(layouts["g"].map([j, i])[0], layouts["f"].map([i, j])[0])


def test_fragment_indexed_by_a_smaller_loop_is_reported():
    @T.prim_func
    def main(A: T.Tensor((64, 64), "float32")):
        with T.Kernel(1, threads=64):
            f = T.alloc_fragment((64,), "float32")
            for i, j in T.Parallel(64, 64):
                f[i] = A[i, j]

    with pytest.raises(UserError, match="fragment 'f'") as err:
        infer_layout(_prepare(main))
    assert_points_at(err, "for i, j in T.Parallel(64, 64):")


def test_a_gemm_into_a_slice_of_a_fragment_is_reported():
    # One of several accumulators picked by an unrolled loop: a user error at the gemm naming the
    # fragment and both shapes, not a compiler error from evaluating the index.
    @T.prim_func
    def main(A: T.Tensor((64, 64), "float16"), C: T.Tensor((64, 256), "float32")):
        with T.Kernel(1, threads=128):
            A_s = T.alloc_shared((64, 64), "float16")
            O = T.alloc_fragment((4, 64, 64), "float32")
            T.copy(A, A_s)
            for p in T.unroll(4):
                T.gemm(A_s, A_s, O[p, :, :], clear_accum=True)
            for p in T.unroll(4):
                T.copy(O[p, :, :], C[:, p * 64 : (p + 1) * 64])

    with pytest.raises(UserError, match=r"fragment 'O' as a \[64, 64\] tile, but it has shape \[4, 64, 64\]") as err:
        tilelang.compile(main, target="sm_90a")
    assert_points_at(err, "T.gemm(A_s, A_s, O[p, :, :], clear_accum=True)")


def test_idle_threads_avoided_when_tile_is_small():
    @T.prim_func
    def main(A: T.Tensor((256,), "float32")):
        with T.Kernel(1, threads=256):
            for i in T.Parallel(256):
                A[i] = A[i] + 1.0

    (layout,) = _loop_layouts(infer_layout(_prepare(main)))
    assert layout.vector_size == 1 and layout.local_size == 1


def test_reduction_gives_a_replicated_destination():
    @T.prim_func
    def main(A: T.Tensor((128, 64), "float32"), B: T.Tensor((128,), "float32")):
        with T.Kernel(1, threads=128):
            x = T.alloc_fragment((128, 64), "float32")
            m = T.alloc_fragment((128,), "float32")
            T.copy(A, x)
            T.reduce_max(x, m, dim=1)
            T.copy(m, B)

    func = infer_layout(_prepare(main))
    layouts = _fragment_layouts(func)
    assert layouts["m"].groups == [(1, 16)] and layouts["m"].local_size == 16
    *_, store = _loop_layouts(func)  # the copy of m runs on every holder (a replicated loop)
    assert store.groups == [(1, 16)]


def scale_read_by_every_iteration():
    """RMSNorm's scale: a [1] fragment loaded once and read along the whole row (B = A * S[row])."""

    @T.prim_func
    def main(A: T.Tensor((8, 256), "float32"), S: T.Tensor((8,), "float32"), B: T.Tensor((8, 256), "float32")):
        with T.Kernel(8, threads=128) as bx:
            scale = T.alloc_fragment((1,), "float32")
            T.copy(S[bx : bx + 1], scale)
            for i in T.Parallel(256):
                B[bx, i] = A[bx, i] * scale[0]

    return main


def row_value_read_along_its_row():
    """A per-row value written once per row and read per element (B = A * 2 S[row])."""

    @T.prim_func
    def main(A: T.Tensor((64, 256), "float32"), S: T.Tensor((64,), "float32"), B: T.Tensor((64, 256), "float32")):
        with T.Kernel(1, threads=128):
            r = T.alloc_fragment((64,), "float32")
            for i in T.Parallel(64):
                r[i] = S[i] * 2.0
            for i, j in T.Parallel(64, 256):
                B[i, j] = A[i, j] * r[i]

    return main


def test_a_value_read_by_every_iteration_is_replicated_over_all_threads():
    func = infer_layout(_prepare(scale_read_by_every_iteration()))
    scale = _fragment_layouts(func)["scale"]
    assert scale.replicate == 128 and scale.local_size == 1
    load, _ = _loop_layouts(func)  # the copy into it runs on every holder, so every copy is written
    assert load.replicate == 128


def test_a_row_value_read_along_its_row_is_held_by_the_row_threads():
    func = infer_layout(_prepare(row_value_read_along_its_row()))
    r = _fragment_layouts(func)["r"]
    _, rows = _loop_layouts(func)
    # Every thread running an iteration of row i holds r[i].
    i, j = (p.reshape(-1) for p in np.indices((64, 256)))
    runner = evaluate(rows.base, dict(zip(rows.vars, [i, j]))).reshape(-1)
    assert r.holds(runner, [i]).all()
    assert r.replicate == 64 and r.local_size == 32


def test_a_replicated_fragment_written_on_some_of_its_threads_is_an_error():
    # m is held by threads i and i + 128; a loop pinned to one thread per element writes one copy.
    (i,) = fl.placeholder_vars(1)
    both_halves = fl.Fragment((128,), [i], i, tirx.const(0, "int32"), 256, [(128, 2)])
    one_thread = fl.partition((128,), 256, 1)

    @T.prim_func
    def main(X: T.Tensor((128,), "float32"), B: T.Tensor((128,), "float32")):
        with T.Kernel(1, threads=256):
            m = T.alloc_fragment((128,), "float32")
            T.annotate_layout({m: both_halves})
            for k in T.Parallel(128, loop_layout=one_thread):
                m[k] = X[k]
            T.copy(m, B)

    with pytest.raises(
        UserError, match="(?s)fragment 'm' is held by several threads.*was annotated.*stale.*loop_layout=one_thread"
    ) as err:
        infer_layout(_prepare(main))
    assert_points_at(err, "for k in T.Parallel(128, loop_layout=one_thread):")


def test_free_level_picks_the_root_with_fewest_registers():
    # Rooting at the 1-D loop first would give s a non-replicated layout that the reduction
    # contradicts; rooting at the copy works and is what the free level must choose.
    @T.prim_func
    def main(A: T.Tensor((1, 4096), "float32"), B: T.Tensor((1, 4096), "float32")):
        with T.Kernel(1, threads=256):
            x = T.alloc_fragment((1, 4096), "float32")
            s = T.alloc_fragment((1,), "float32")
            T.copy(A, x)
            T.reduce_sum(x, s, dim=1)
            for i in T.Parallel(1):
                s[i] = T.rsqrt(s[i])
            for i, j in T.Parallel(1, 4096):
                B[i, j] = x[i, j] * s[i]

    layouts = _fragment_layouts(infer_layout(_prepare(main)))
    assert layouts["x"].local_size == 16 and layouts["s"].groups == [(1, 256)]


def test_annotated_fragment_layout_is_strict():
    pinned = fl.partition((64, 64), 128, 1)  # no vectors, although the copy could use them

    @T.prim_func
    def main(A: T.Tensor((64, 64), "float32"), B: T.Tensor((64, 64), "float32")):
        with T.Kernel(1, threads=128):
            f = T.alloc_fragment((64, 64), "float32")
            T.annotate_layout({f: pinned})
            T.copy(A, f)
            T.copy(f, B)

    func = infer_layout(_prepare(main))
    assert _fragment_layouts(func)["f"].is_equivalent(pinned)
    assert all(lay.vector_size == 1 for lay in _loop_layouts(func))


def test_annotate_layout_checks_the_shape():
    with pytest.raises(Exception, match="is for shape"):

        @T.prim_func
        def main(A: T.Tensor((64, 64), "float32")):
            with T.Kernel(1, threads=128):
                f = T.alloc_fragment((64, 64), "float32")
                T.annotate_layout({f: fl.partition((32, 64), 128, 1)})
                T.copy(A, f)


def _shared_layouts(func):
    return {b.name: shared_layout_from_ir(v) for b, v in func.attrs[SHARED_LAYOUTS].items()}


def test_a_tile_written_from_a_fragment_is_swizzled():
    # An epilogue: accumulate, stage the tile in shared memory, store it with 16-byte accesses.
    @T.prim_func
    def main(A: T.Tensor((128, 128), "float16"), C: T.Tensor((128, 128), "float16")):
        with T.Kernel(1, threads=128):
            acc = T.alloc_fragment((128, 128), "float32")
            staged = T.alloc_shared((128, 128), "float16")
            pinned = T.alloc_shared((128, 128), "float16")
            plain = T.alloc_shared((128, 128), "float16")
            T.annotate_layout({pinned: sl.linear((128, 128))})
            T.copy(A, acc)
            T.copy(acc, staged)  # from a fragment: swizzled
            T.copy(acc, pinned)  # annotated: the user's layout stays
            T.copy(A, plain)  # from global only: row-major
            T.copy(staged, C)
            T.copy(pinned, C)
            T.copy(plain, C)

    layouts = _shared_layouts(infer_layout(_prepare(main)))
    r, c = grid((128, 128))

    def offsets(lay):
        return evaluate(lay.forward, {lay.vars[0]: r, lay.vars[1]: c})

    assert np.array_equal(offsets(layouts["staged"]), offsets(sl.swizzle((128, 128), 16, 3)))
    assert np.array_equal(offsets(layouts["pinned"]), offsets(sl.linear((128, 128))))
    assert "plain" not in layouts


def _staged_then_added_in_quads():
    """acc staged in shared memory, then added into global memory four floats at a time
    (T.atomic_addx4 reads S[i, j * 4 .. j * 4 + 3] as one vector)."""

    @T.prim_func
    def main(A: T.Tensor((32, 128), "float32"), G: T.Tensor((32, 128), "float32")):
        with T.Kernel(1, threads=128):
            acc = T.alloc_fragment((32, 128), "float32")
            S = T.alloc_shared((32, 128), "float32")
            T.copy(A, acc)
            for i, j in T.Parallel(32, 128):
                S[i, j] = acc[i, j] * 2.0
            for i, j in T.Parallel(32, 32):
                T.atomic_addx4(G[i, j * 4], S[i, j * 4])

    return main


def test_a_staged_tile_read_as_vectors_stays_row_major():
    # Swizzled, the quad's index was a vector expression through the swizzle, which TVM's simplifier
    # stopped on ("IntImm can only take scalar, but int32x4 was supplied"; the public MLA backward's
    # dKV accumulation).
    func = infer_layout(_prepare(_staged_then_added_in_quads()))
    assert SHARED_LAYOUTS not in func.attrs or "S" not in _shared_layouts(func)
    for arch in ("sm_80", "sm_90a"):
        k = tilelang.compile(_staged_then_added_in_quads(), target=arch)
        cuda.compile_object(k.get_kernel_source(), k.target, host_src=k.host_source)

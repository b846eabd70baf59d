"""Fragments used the way public TileLang kernels use them (issue 21): indexed by a loop around the
T.Parallel nest (`lse[k, i]`, `x[i, jj * 4 + j]`), read by a loop they do not cover (`m[h]` in a
loop over (h, k)), read outside any loop (`if mask[k]:`, `total += s[0]`), indexed past their extent,
and reduced while replicated. The GPU tests (test_fragment_access_patterns_gpu.py) run these kernels
against torch."""

import numpy as np
import pytest
import tvm_ffi
from tvm import tirx

import tilelang
import tilelang.language as T
from tilelang.codegen import cuda
from tilelang.errors import UserError
from tilelang.layout import fragment as fl
from tilelang.layout.evaluate import evaluate, grid
from tilelang.testing import assert_points_at
from tilelang.transform.expand_elementwise_ops import expand_elementwise_ops
from tilelang.transform.infer_layout import FRAGMENT_LAYOUTS, LOOP_LAYOUT, infer_layout
from tilelang.transform.legalize_safe_memory_access import legalize_safe_memory_access
from tilelang.transform.select_gemm_instructions import select_gemm_instructions
from tilelang.utils.target import determine_target


def _infer(func, target="sm_80"):
    func = select_gemm_instructions(func.with_attr("target", determine_target(target)))
    return infer_layout(legalize_safe_memory_access(expand_elementwise_ops(func)))


def _fragment_layouts(func):
    return {b.name: fl.from_ir(v) for b, v in func.attrs[FRAGMENT_LAYOUTS].items()}


def _loop_layouts(func):
    out = []

    def on_for(loop):
        if LOOP_LAYOUT in loop.annotations:
            out.append(fl.from_ir(loop.annotations[LOOP_LAYOUT]))

    tvm_ffi.structural_walk(func.body, [(tirx.For, on_for)], order="pre")
    return out


def _threads(layout):
    points = grid(layout.shape)
    return np.broadcast_to(evaluate(layout.base, dict(zip(layout.vars, points))), points[0].shape).reshape(layout.shape)


# ---- kernels (the GPU tests run them too) --------------------------------------------------------


def split_combine():
    """The flash-decoding combine: 4 partial results weighted by the softmax of their log-sum-exps,
    the split picked by a serial loop around the T.Parallel loops (`lse[k, i]`, `T.copy(lse[k, :], w)`)."""

    @T.prim_func
    def main(L: T.Tensor((4, 128), "float32"), P: T.Tensor((4, 128, 64), "float32"), O: T.Tensor((128, 64), "float32")):
        with T.Kernel(1, threads=128):
            lse = T.alloc_fragment((4, 128), "float32")
            lmax = T.alloc_fragment((128,), "float32")
            total = T.alloc_fragment((128,), "float32")
            w = T.alloc_fragment((128,), "float32")
            part = T.alloc_fragment((128, 64), "float32")
            acc = T.alloc_fragment((128, 64), "float32")
            T.copy(L, lse)
            T.reduce_max(lse, lmax, dim=0)
            T.clear(total)
            T.clear(acc)
            for k in T.serial(4):
                for i in T.Parallel(128):
                    total[i] += T.exp(lse[k, i] - lmax[i])
            for k in T.serial(4):
                T.copy(P[k, :, :], part)
                T.copy(lse[k, :], w)
                for i, j in T.Parallel(128, 64):
                    acc[i, j] += part[i, j] * T.exp(w[i] - lmax[i]) / total[i]
            T.copy(acc, O)

    return main


# x[i, j] lives on thread 4 i + j % 4: every column j of a group of four on the same thread, as in
# a tf32 mma operand.
_i, _j = fl.placeholder_vars(2)
COLUMNS_MOD_4 = fl.Fragment((32, 256), [_i, _j], _i * 4 + _j % 4, _j // 4, 128)


def squares_by_column_groups(layout=COLUMNS_MOD_4):
    """Row sums of squares, four columns at a time: `x[i, jj * 4 + j]` with jj from a serial loop
    around the T.Parallel loop (the mHC pre example's `sqrsum`)."""

    @T.prim_func
    def main(X: T.Tensor((32, 256), "float32"), S: T.Tensor((32,), "float32")):
        with T.Kernel(1, threads=128):
            x = T.alloc_fragment((32, 256), "float32")
            sq = T.alloc_fragment((32, 4), "float32")
            s = T.alloc_fragment((32,), "float32")
            T.annotate_layout({x: layout})
            T.copy(X, x)
            T.clear(sq)
            for jj in T.serial(64):
                for i, j in T.Parallel(32, 4):
                    sq[i, j] += x[i, jj * 4 + j] * x[i, jj * 4 + j]
            T.reduce_sum(sq, s, dim=1)
            T.copy(s, S)

    return main


def row_max_spread_over_its_holders():
    """A row maximum (held by the threads of its row) read along a loop over (h, k) that it does not
    cover: each row's iterations run on the row's holders (the flash-decoding logits example)."""

    @T.prim_func
    def main(A: T.Tensor((64, 32), "float16"), B: T.Tensor((64, 32), "float16"), O: T.Tensor((64, 16), "float32")):
        with T.Kernel(1, threads=128):
            A_s = T.alloc_shared((64, 32), "float16")
            B_s = T.alloc_shared((64, 32), "float16")
            S = T.alloc_fragment((64, 64), "float32")
            m = T.alloc_fragment((64,), "float32")
            O_s = T.alloc_shared((64, 16), "float32")
            T.copy(A, A_s)
            T.copy(B, B_s)
            T.gemm(A_s, B_s, S, transpose_B=True, clear_accum=True)
            T.reduce_max(S, m, dim=1)
            for h, k in T.Parallel(64, 16):
                O_s[h, k] = m[h] * (k + 1)
            T.copy(O_s, O)

    return main


def block_sparse_gemm():
    """C = sum over the k blocks whose mask is set of A_k B_k, the mask in a fragment read in an `if`
    outside any loop (the block-sparse attention examples' `if block_mask[k] != 0:`)."""

    @T.prim_func
    def main(
        A: T.Tensor((128, 256), "float16"),
        B: T.Tensor((256, 128), "float16"),
        Mask: T.Tensor((8,), "int8"),
        C: T.Tensor((128, 128), "float32"),
    ):
        with T.Kernel(1, threads=128):
            A_s = T.alloc_shared((128, 32), "float16")
            B_s = T.alloc_shared((32, 128), "float16")
            C_f = T.alloc_fragment((128, 128), "float32")
            mask = T.alloc_fragment((8,), "int8")
            T.copy(Mask, mask)
            T.clear(C_f)
            for k in T.Pipelined(8, num_stages=2):
                if mask[k] != 0:
                    T.copy(A[0, k * 32], A_s)
                    T.copy(B[k * 32, 0], B_s)
                    T.gemm(A_s, B_s, C_f)
            T.copy(C_f, C)

    return main


def total_of_block_sums():
    """The sum of a [4, 256] tensor: each row reduced into a [1] fragment, added up in a T.alloc_var
    outside any loop (`total = total + s[0]`, the GDN backward example)."""

    @T.prim_func
    def main(X: T.Tensor((4, 256), "float32"), O: T.Tensor((1,), "float32")):
        with T.Kernel(1, threads=128):
            x = T.alloc_fragment((1, 256), "float32")
            s = T.alloc_fragment((1,), "float32")
            total = T.alloc_var("float32")
            total = 0.0
            for b in T.serial(4):
                T.copy(X[b : b + 1, :], x)
                T.reduce_sum(x, s, dim=1)
                total = total + s[0]
            O[0] = total

    return main


def fragment_indexed_past_its_extent():
    """A [1] fragment written and read at [i] for i < 64 (the attention-sink examples' `sinks`): laid
    out over the loop's 64 elements, as the public TileLang does."""

    @T.prim_func
    def main(A: T.Tensor((64,), "float32"), S: T.Tensor((1,), "float32"), O: T.Tensor((64,), "float32")):
        with T.Kernel(1, threads=64):
            f = T.alloc_fragment((1,), "float32")
            for i in T.Parallel(64):
                f[i] = S[0]
            for i in T.Parallel(64):
                O[i] = A[i] + f[i]

    return main


def first_rows_of_an_accumulator():
    """The first 4 rows of a 64-row gemm accumulator copied out (`T.copy(acc_o[:valid_block_H, :],
    O_shared)` of the GQA decode examples): the loop over those rows follows the accumulator, whose
    registers for them have gaps (rows 8 to 15 of each 16 are the others)."""

    @T.prim_func
    def main(A: T.Tensor((64, 32), "float16"), B: T.Tensor((64, 32), "float16"), O: T.Tensor((4, 64), "float16")):
        with T.Kernel(1, threads=128):
            A_s = T.alloc_shared((64, 32), "float16")
            B_s = T.alloc_shared((64, 32), "float16")
            S = T.alloc_fragment((64, 64), "float32")
            O_s = T.alloc_shared((4, 64), "float16")
            T.copy(A, A_s)
            T.copy(B, B_s)
            T.gemm(A_s, B_s, S, transpose_B=True, clear_accum=True)
            T.copy(S[:4, :], O_s)
            T.copy(O_s, O)

    return main


# x[i, j] on threads 4 i + j and 4 i + j + 128: every element held by two threads.
TWO_COPIES = fl.Fragment((32, 4), [_i, _j], _i * 4 + _j, tirx.const(0, "int32"), 256, [(128, 2)])


def sum_of_a_replicated_fragment():
    """Row sums of a fragment every element of which two threads hold (as a gemm operand replicated
    over the warps along N): each copy reduces on its own, nothing is counted twice."""

    @T.prim_func
    def main(X: T.Tensor((32, 4), "float32"), S: T.Tensor((32,), "float32")):
        with T.Kernel(1, threads=256):
            x = T.alloc_fragment((32, 4), "float32")
            s = T.alloc_fragment((32,), "float32")
            T.annotate_layout({x: TWO_COPIES})
            T.copy(X, x)
            T.reduce_sum(x, s, dim=1)
            T.copy(s, S)

    return main


# ---- layouts ---------------------------------------------------------------------------------------


def test_an_outer_loop_index_is_held_by_each_thread():
    layouts = _fragment_layouts(_infer(split_combine()))
    lse = layouts["lse"]
    threads = _threads(lse)
    assert (threads == threads[:1]).all()  # lse[k, i] lives where lse[0, i] does, for every k
    assert lse.local_size == 4 and not lse.groups


def test_an_outer_loop_index_mixed_with_a_loop_variable():
    func = _infer(squares_by_column_groups())
    sq = _fragment_layouts(func)["sq"]
    assert (_threads(sq) == np.arange(128).reshape(32, 4)).all()  # sq[i, j] where x[i, jj * 4 + j] is


def test_an_outer_loop_index_whose_threads_move_is_an_error():
    # Spread row-major, x[i, jj * 4 + j] lives on another thread for each jj: sq cannot follow it.
    with pytest.raises(
        UserError, match=r"(?s)fragment .x. .*was annotated.*move to other threads as jj changes"
    ) as err:
        _infer(squares_by_column_groups(fl.partition((32, 256), 128, 4)))
    assert_points_at(err, "for i, j in T.Parallel(32, 4):")


def test_iterations_a_fragment_does_not_cover_run_on_its_holders():
    func = _infer(row_max_spread_over_its_holders())
    m = _fragment_layouts(func)["m"]
    loop = [lay for lay in _loop_layouts(func) if tuple(lay.shape) == (64, 16)][0]  # (then the copy to O)
    assert not loop.groups and loop.is_injective()  # each iteration once
    runners = _threads(loop).reshape(-1)
    rows = grid((64, 16))[0]
    assert m.holds(runners, [rows]).all()  # on a holder of m[h]
    assert len(set(runners.tolist())) == 128  # every thread takes a share


def test_a_fragment_read_outside_loops_is_held_whole_by_every_thread():
    layouts = _fragment_layouts(_infer(block_sparse_gemm()))
    assert layouts["mask"].is_fully_replicated() and layouts["mask"].local_size == 8
    layouts = _fragment_layouts(_infer(total_of_block_sums()))
    assert layouts["s"].is_fully_replicated()


def test_a_fragment_indexed_past_its_extent_is_laid_out_over_the_loop(caplog):
    with caplog.at_level("WARNING", logger="tilelang"):
        layouts = _fragment_layouts(_infer(fragment_indexed_past_its_extent()))
    assert tuple(layouts["f"].shape) == (64,)
    assert "fragment 'f' of shape [1] is indexed up to [63]" in caplog.text


def test_a_replicated_fragment_reduces_each_copy_on_its_own():
    s = _fragment_layouts(_infer(sum_of_a_replicated_fragment()))["s"]
    assert sorted(s.groups) == [(1, 4), (128, 2)]
    assert fl.reduced_groups(TWO_COPIES, 1) == [(1, 4)]  # what the reduction combines across


# ---- errors --------------------------------------------------------------------------------------


def test_a_spread_fragment_read_outside_loops_is_an_error():
    @T.prim_func
    def main(A: T.Tensor((64, 64), "float16"), C: T.Tensor((1,), "float32")):
        with T.Kernel(1, threads=128):
            A_s = T.alloc_shared((64, 64), "float16")
            S = T.alloc_fragment((64, 64), "float32")
            T.copy(A, A_s)
            T.gemm(A_s, A_s, S, clear_accum=True)
            C[0] = S[0, 0]

    with pytest.raises(
        UserError,
        match=r"(?s)fragment 'S' is read outside a T.Parallel loop.*spreads it over the threads.*"
        r"C\[0\] = S\[0, 0\].*T.gemm\(A_s, A_s, S",
    ) as err:
        tilelang.compile(main, out_idx=[1], target="sm_80")
    assert_points_at(err, "C[0] = S[0, 0]")


def test_a_fragment_of_a_thread_branch_read_by_the_whole_block_is_an_error():
    # Followed by the whole block, the gemm's 128-thread layout would leave threads 128..255 with
    # iterations and no elements (they wrote out of bounds before this was checked).
    @T.prim_func
    def main(A: T.Tensor((64, 64), "float16"), B: T.Tensor((64, 64), "float32")):
        with T.Kernel(1, threads=256):
            A_s = T.alloc_shared((64, 64), "float16")
            S = T.alloc_fragment((64, 64), "float32")
            T.copy(A, A_s)
            if T.get_thread_binding() < 128:
                T.gemm(A_s, A_s, S, transpose_B=True, clear_accum=True)
            for i, j in T.Parallel(64, 64):
                B[i, j] = S[i, j]

    with pytest.raises(UserError, match=r"(?s)fragment 'S'.*spans 128 threads, the second 256") as err:
        tilelang.compile(main, out_idx=[1], target="sm_90a")
    assert_points_at(err, "for i, j in T.Parallel(64, 64):")


def test_two_gemm_results_in_different_registers_are_reported_with_both_gemms():
    # The GDN backward example adds the accumulators of two gemms that got different layouts.
    @T.prim_func
    def main(A: T.Tensor((64, 64), "float16"), C: T.Tensor((64, 64), "float32")):
        with T.Kernel(1, threads=128):
            A_s = T.alloc_shared((64, 64), "float16")
            X = T.alloc_fragment((64, 64), "float32")
            Y = T.alloc_fragment((64, 64), "float32")
            T.copy(A, A_s)
            T.gemm(A_s, A_s, X, clear_accum=True, policy=T.GemmWarpPolicy.FullRow)
            T.gemm(A_s, A_s, Y, clear_accum=True, policy=T.GemmWarpPolicy.FullCol)
            for i, j in T.Parallel(64, 64):
                C[i, j] = X[i, j] - Y[i, j]

    with pytest.raises(
        UserError, match=r"(?s)T.gemm\(A_s, A_s, [XY]\) and T.gemm\(A_s, A_s, [XY]\) fix the layouts.*shared tile"
    ) as err:
        tilelang.compile(main, out_idx=[1], target="sm_80")
    assert_points_at(err, "T.gemm(A_s, A_s, Y, clear_accum=True, policy=T.GemmWarpPolicy.FullCol)")


def test_a_register_flag_set_per_thread_keeps_its_branch_varying():
    @T.prim_func
    def main(A: T.Tensor((128, 32), "float16"), C: T.Tensor((128, 32), "float16")):
        with T.Kernel(1, threads=128):
            A_s = T.alloc_shared((128, 32), "float16")
            flag = T.alloc_var("int32")
            flag = T.get_thread_binding() % 2
            if flag == 1:
                T.copy(A, A_s)
                T.copy(A_s, C)

    with pytest.raises(UserError, match="may differ between the threads") as err:
        tilelang.compile(main, out_idx=[1], target="sm_80")
    assert_points_at(err, "if flag == 1:")


# ---- whole kernels (lowered, and built with nvcc) ------------------------------------------------


@pytest.mark.parametrize(
    "kernel",
    [
        split_combine,
        squares_by_column_groups,
        row_max_spread_over_its_holders,
        total_of_block_sums,
        fragment_indexed_past_its_extent,
        sum_of_a_replicated_fragment,
    ],
)
def test_kernels_lower(kernel):
    tilelang.compile(kernel(), out_idx=[-1], target="sm_80").get_kernel_source()


def test_part_of_an_accumulator_gets_dense_registers():
    # wgmma: rows 0..3 live on 16 threads, 16 elements each: registers 0..15 with no gaps.
    func = _infer(first_rows_of_an_accumulator(), "sm_90a")
    part = [lay for lay in _loop_layouts(func) if tuple(lay.shape) == (4, 64) and not lay.groups][0]
    assert fl.is_invertible(part) and sorted(set(part.tables()[1].tolist())) == list(range(16))
    tilelang.compile(first_rows_of_an_accumulator(), out_idx=[-1], target="sm_90a").get_kernel_source()


def test_part_of_an_accumulator_on_scattered_threads_runs_over_the_whole():
    # mma.sync: rows 0..3 live on threads 0..15 and 64..79, which no inverse expresses: the loop runs
    # over the whole accumulator's registers and skips the other rows.
    func = _infer(first_rows_of_an_accumulator(), "sm_80")
    assert any(tuple(lay.shape) == (64, 64) for lay in _loop_layouts(func))
    src = tilelang.compile(first_rows_of_an_accumulator(), out_idx=[-1], target="sm_80").get_kernel_source()
    assert "S_local_ptr[" in src


@pytest.mark.parametrize("target", ["sm_80", "sm_90a"])
def test_a_mask_fragment_guards_tile_ops_and_builds(target):
    kernel = tilelang.compile(block_sparse_gemm(), out_idx=[-1], target=target)
    src = kernel.get_kernel_source()
    assert "if (mask_local_ptr[k] != " in src  # every thread reads its own copy
    cuda.compile_object(src, kernel.target)

"""Software pipelining with cp.async (plan_pipelines, then inject_cp_async_pipelines): the schedule
(copies in stage 0, or the user's order/stage/group), multi-buffered tiles, cp.async groups, errors."""

import pytest
import tvm_ffi
from tvm import tirx

import tilelang
import tilelang.language as T
from tilelang import intrinsics
from tilelang.op import base
from tilelang.transform.inject_cp_async_pipelines import inject_cp_async_pipelines
from tilelang.transform.plan_pipelines import plan_pipelines


def pipeline_loops(func):
    """The two passes that build a cp.async pipeline (no target: every loop takes that form)."""
    return inject_cp_async_pipelines(plan_pipelines(func))


def _gemm_loop(stages, K=256):
    @T.prim_func
    def main(A: T.Tensor((128, K), "float16"), B: T.Tensor((K, 128), "float16"), C: T.Tensor((128, 128), "float32")):
        with T.Kernel(1, threads=128):
            A_s = T.alloc_shared((128, 32), "float16")
            B_s = T.alloc_shared((32, 128), "float16")
            C_f = T.alloc_fragment((128, 128), "float32")
            T.clear(C_f)
            for k in T.Pipelined(K // 32, num_stages=stages):
                T.copy(A[0, k * 32], A_s)
                T.copy(B[k * 32, 0], B_s)
                T.gemm(A_s, B_s, C_f)
            T.copy(C_f, C)

    return main


def _allocs(func):
    out = {}
    tvm_ffi.structural_walk(func.body, [(tirx.AllocBuffer, lambda a: out.update({a.buffer.name: a.buffer}))])
    return {k: [int(s) for s in v.shape] for k, v in out.items()}


def _externs(func):
    """The device calls, in order: extern names, and (intrinsic name, template) for intrinsics."""
    out = []

    def on_eval(e):
        if getattr(e.value.op, "name", "") == "tirx.call_extern":
            out.append(str(e.value.args[0].value))
        elif intrinsics.lookup(e) is not None:
            out.append((intrinsics.lookup(e).name, intrinsics.lookup(e).template(e)))

    tvm_ffi.structural_walk(func.body, [(tirx.Evaluate, on_eval)])
    return out


def _copies(func):
    out = []

    def on_eval(e):
        if base.is_tile_op(e.value, "copy"):
            out.append((base.Region.from_ir(e.value.args[1]).name, int(e.value.args[3].value)))

    tvm_ffi.structural_walk(func.body, [(tirx.Evaluate, on_eval)])
    return out


@pytest.mark.parametrize("stages", [2, 3, 4])
def test_tiles_get_one_buffer_per_stage_and_copies_go_async(stages):
    after = pipeline_loops(_gemm_loop(stages))
    allocs = _allocs(after)
    assert allocs["A_s"] == [stages, 128, 32] and allocs["B_s"] == [stages, 32, 128]
    assert allocs["C_f"] == [128, 128]  # fragments are not multi-buffered
    # prologue commit (in a loop unrolled over stages - 1 iterations), then per iteration: wait for
    # this iteration's copies, barrier, issue the copies stages - 1 ahead, commit; drain at the end
    assert _externs(after) == [
        "tl::cp_async_commit",
        ("cp_async_wait", {"pending": stages - 2}),
        "__syncthreads",
        "tl::cp_async_commit",
        ("cp_async_wait", {"pending": 0}),
    ]
    copies = _copies(after)
    assert sorted(set(copies)) == [("A_s", 1), ("B_s", 1), ("C", 0)]
    text = after.script()
    assert f"for stage in T.unroll({stages - 1})" in text
    assert f"A_s[k % {stages}, 0:128, 0:32]" in text  # the gemm reads this iteration's buffer


def test_one_stage_is_a_plain_loop():
    after = pipeline_loops(_gemm_loop(1))
    assert _allocs(after)["A_s"] == [128, 32] and not _externs(after)


def test_a_tile_written_by_two_copies_is_an_error_at_the_loop():
    @T.prim_func
    def main(A: T.Tensor((128, 256), "float16")):
        with T.Kernel(1, threads=128):
            s = T.alloc_shared((128, 32), "float16")
            f = T.alloc_fragment((128, 32), "float16")
            for k in T.Pipelined(8, num_stages=2):
                T.copy(A[0, k * 32], s)
                T.copy(A[0, k * 16], s)
                T.copy(s, f)

    with pytest.raises(Exception) as info:
        pipeline_loops(main)
    assert "written by two copies" in str(info.value) and "for k in T.Pipelined(8, num_stages=2)" in str(info.value)


def test_a_tile_also_written_by_a_consumer_is_an_error():
    @T.prim_func
    def main(A: T.Tensor((128, 256), "float16")):
        with T.Kernel(1, threads=128):
            s = T.alloc_shared((128, 32), "float16")
            for k in T.Pipelined(8, num_stages=2):
                T.copy(A[0, k * 32], s)
                for i, j in T.Parallel(128, 32):
                    s[i, j] = s[i, j] * 2.0

    with pytest.raises(Exception, match="written both by a copy in stage 0 and by a later statement"):
        pipeline_loops(main)


def test_user_stages_override_the_plan():
    @T.prim_func
    def main(A: T.Tensor((128, 256), "float16"), B: T.Tensor((128, 256), "float16")):
        with T.Kernel(1, threads=128):
            s = T.alloc_shared((128, 32), "float16")
            t = T.alloc_shared((128, 32), "float16")
            for k in T.Pipelined(8, num_stages=2, order=[0, 1, 2], stage=[0, 1, 1]):
                T.copy(A[0, k * 32], s)
                T.copy(B[0, k * 32], t)  # a global->shared copy, kept in the last stage by the user
                T.copy(s, B[0, k * 32])

    after = pipeline_loops(main)
    assert _allocs(after)["s"] == [2, 128, 32] and _allocs(after)["t"] == [128, 32]


def _body_order(func):
    """Names of the copies' destinations and the gemm, in the order the main loop issues them."""
    out = []

    def on_eval(e):
        if base.is_tile_op(e.value, "copy"):
            out.append(base.Region.from_ir(e.value.args[1]).name)
        elif base.is_tile_op(e.value, "gemm"):
            out.append("gemm")

    loops = []
    tvm_ffi.structural_walk(func.body, [(tirx.For, lambda f: loops.append(f) if f.loop_var.name == "k" else None)])
    tvm_ffi.structural_walk(loops[0].body, [(tirx.Evaluate, on_eval)])
    return out


def test_user_order_places_each_statement():
    after = pipeline_loops(_staged_loop(order=[1, 2, 0], stage=[0, 0, 2], stages=3))
    assert _body_order(after) == ["gemm", "A_s", "B_s"]
    assert _body_order(pipeline_loops(_gemm_loop(3))) == ["A_s", "B_s", "gemm"]
    # One commit per iteration, after the last producer.
    names = _externs(after)
    assert names.count("tl::cp_async_commit") == 2  # the prologue's (one loop) and the main loop's


def test_user_order_entries_must_be_distinct():
    @T.prim_func
    def main(A: T.Tensor((128, 256), "float16"), B: T.Tensor((128, 256), "float16")):
        with T.Kernel(1, threads=128):
            s = T.alloc_shared((128, 32), "float16")
            for k in T.Pipelined(8, num_stages=2, order=[0, 0], stage=[0, 1]):
                T.copy(A[0, k * 32], s)
                T.copy(s, B[0, k * 32])

    with pytest.raises(Exception, match="entries must be distinct"):
        pipeline_loops(main)


def _staged_loop(order, stage, group=None, stages=2):
    """Two copies and a gemm over `stages` stages, scheduled by `order`, `stage` and `group`."""

    @T.prim_func
    def main(
        A: T.Tensor((128, 256), "float16"), B: T.Tensor((256, 128), "float16"), C: T.Tensor((128, 128), "float32")
    ):
        with T.Kernel(1, threads=128):
            A_s = T.alloc_shared((128, 32), "float16")
            B_s = T.alloc_shared((32, 128), "float16")
            C_f = T.alloc_fragment((128, 128), "float32")
            T.clear(C_f)
            for k in T.Pipelined(8, num_stages=stages, order=order, stage=stage, group=group):
                T.copy(A[0, k * 32], A_s)
                T.copy(B[k * 32, 0], B_s)
                T.gemm(A_s, B_s, C_f)
            T.copy(C_f, C)

    return main


def test_groups_give_statements_one_order_and_stage():
    # Both copies are in the group of stage -1: both are producers (asynchronous, issued ahead).
    after = pipeline_loops(_staged_loop([-1, 0], [-1, 0], [[0, 1], [2]]))
    assert _copies(after).count(("A_s", 1)) == 2 and _copies(after).count(("B_s", 1)) == 2


def test_consumer_stages_keep_the_program_order_off_hopper():
    # B's copy is a consumer in stage 0, the gemm one in stage 1 placed first: only the Hopper
    # pipeline runs them an iteration apart; here the body keeps the program's order.
    after = pipeline_loops(_staged_loop([-1, 1, 0], [-1, 0, 1], [[0], [1], [2]]))
    assert _copies(after).count(("A_s", 1)) == 2 and ("B_s", 0) in _copies(after)
    assert _body_order(after) == ["A_s", "B_s", "gemm"]


def test_a_group_list_must_cover_every_statement_once():
    with pytest.raises(Exception, match=r"`group` must list each of the loop's 3 statements"):
        pipeline_loops(_staged_loop([-1, 0, 1], [-1, 0, 1], [[0], [1], [1]]))


def test_group_count_must_match_order():
    with pytest.raises(Exception, match="`group` has 2 groups but `order` has 3 entries"):
        T.Pipelined(8, num_stages=2, order=[0, 1, 2], stage=[0, 0, 1], group=[[0], [1, 2]])


def test_a_producer_stage_holds_only_global_to_shared_copies():
    @T.prim_func
    def main(A: T.Tensor((128, 256), "float16"), B: T.Tensor((128, 256), "float16")):
        with T.Kernel(1, threads=128):
            s = T.alloc_shared((128, 32), "float16")
            for k in T.Pipelined(8, num_stages=2, order=[0, 1], stage=[0, -1]):
                T.copy(A[0, k * 32], s)
                T.copy(s, B[0, k * 32])

    with pytest.raises(Exception, match="statements in the producer stage must be copies from global to shared"):
        pipeline_loops(main)


def _from_start(stages=3):
    """Tiles start .. 8 of A summed into C: a loop from a start the block computes (a causal backward's
    first key block)."""

    @T.prim_func
    def main(A: T.Tensor((256, 64), "float16"), C: T.Tensor((4, 32, 64), "float32")):
        with T.Kernel(4, threads=128) as bx:
            A_s = T.alloc_shared((32, 64), "float16")
            C_f = T.alloc_fragment((32, 64), "float32")
            T.clear(C_f)
            for k in T.Pipelined(bx * 2, 8, num_stages=stages):
                T.copy(A[k * 32, 0], A_s)
                for i, j in T.Parallel(32, 64):
                    C_f[i, j] += A_s[i, j]
            T.copy(C_f, C[bx, 0, 0])

    return main


def test_a_loop_from_a_start_counts_its_iterations_from_there():
    src = tilelang.compile(_from_start(), out_idx=[1], target="sm_80").get_kernel_source()
    # The prologue issues iterations start and start + 1 (rows bx * 64 ...), the body k + 2 while
    # it is below the stop (before, the prologue issued 0 and 1 and the body stopped start early).
    assert "(((int)blockIdx.x) * 4096)" in src.split("for (int k")[0]
    assert "if (k < 6) {" in src


def block_sparse_gemm(stages=2, K=256, guard_reads_shared=False):
    """A block-sparse GEMM's loop: the whole body under `if mask[k]:` (the public example's form)."""

    @T.prim_func
    def main(
        A: T.Tensor((128, K), "float16"),
        B: T.Tensor((K, 128), "float16"),
        mask: T.Tensor((K // 32,), "bool"),
        C: T.Tensor((128, 128), "float32"),
    ):
        with T.Kernel(1, threads=128):
            A_s = T.alloc_shared((128, 32), "float16")
            B_s = T.alloc_shared((32, 128), "float16")
            flag = T.alloc_shared((1,), "bool")
            C_f = T.alloc_fragment((128, 128), "float32")
            T.clear(C_f)
            if guard_reads_shared:
                flag[0] = True
            for k in T.Pipelined(K // 32, num_stages=stages):
                if flag[0] if guard_reads_shared else mask[k]:
                    T.copy(A[0, k * 32], A_s)
                    T.copy(B[k * 32, 0], B_s)
                    T.gemm(A_s, B_s, C_f)
            T.copy(C_f, C)

    return main


def test_a_body_under_one_condition_pipelines_each_statement_under_it():
    after = pipeline_loops(block_sparse_gemm(stages=3))
    assert _allocs(after)["A_s"] == [3, 128, 32]
    text = after.script()
    # Issued two iterations ahead, each copy under the mask of the iteration it loads.
    assert text.count("if mask[k + 2]:") == 2 and text.count("if mask[k]:") == 1
    assert sorted(set(_copies(after))) == [("A_s", 1), ("B_s", 1), ("C", 0)]


def _mask_then_gemm(same_kernel: bool):
    """A kernel filling the mask, then the block-sparse GEMM reading it: in a second kernel (the mask
    is fixed while the GEMM runs), or in the same one (where the guard is left whole)."""

    @T.prim_func
    def main(
        A: T.Tensor((128, 256), "float16"),
        B: T.Tensor((256, 128), "float16"),
        mask: T.Tensor((8,), "bool"),
        C: T.Tensor((128, 128), "float32"),
    ):
        if not same_kernel:
            with T.Kernel(1, threads=32):
                for i in T.Parallel(8):
                    mask[i] = A[0, i] > 0
        with T.Kernel(1, threads=128):
            A_s = T.alloc_shared((128, 32), "float16")
            B_s = T.alloc_shared((32, 128), "float16")
            C_f = T.alloc_fragment((128, 128), "float32")
            if same_kernel:
                for i in T.Parallel(8):
                    mask[i] = A[0, i] > 0
            T.clear(C_f)
            for k in T.Pipelined(8, num_stages=2):
                if mask[k]:
                    T.copy(A[0, k * 32], A_s)
                    T.copy(B[k * 32, 0], B_s)
                    T.gemm(A_s, B_s, C_f)
            T.copy(C_f, C)

    return main


def test_a_guard_on_a_mask_an_earlier_kernel_wrote_is_distributed_not_one_on_a_mask_its_own_kernel_writes():
    assert _allocs(pipeline_loops(_mask_then_gemm(same_kernel=False)))["A_s"] == [2, 128, 32]
    assert _allocs(pipeline_loops(_mask_then_gemm(same_kernel=True)))["A_s"] == [128, 32]


def test_a_condition_reading_shared_memory_is_left_whole():
    after = pipeline_loops(block_sparse_gemm(stages=3, guard_reads_shared=True))
    assert _allocs(after)["A_s"] == [128, 32] and not _externs(after)  # (no producers: a plain loop)


@pytest.mark.parametrize("arch", ["sm_80", "sm_90a"])
def test_a_block_sparse_gemm_compiles_to_cp_async(arch):
    """(On sm_90a without TMA: test_pipeline_tma.py has its TMA form.)"""
    from tilelang.codegen import cuda

    k = tilelang.compile(block_sparse_gemm(), target=arch, pass_configs={"tl.disable_tma_lower": True})
    src = k.get_kernel_source()
    assert "tl::cp_async<16>" in src and "mask_ptr[(k + 1)]" in src
    cuda.compile_object(src, k.target, host_src=k.host_source)


def gather_by_table(bind: bool, table_written: bool = False, n: int = 8):
    """A loop over the slots of a block table: `j = idx[k]` then `if j >= 0:` around a gathered copy and
    a gemm (NSA's selected blocks), or idx[k] written at each use. `table_written`: the kernel itself
    fills the table first (its reads may then not move)."""

    @T.prim_func
    def main(A: T.Tensor((n * 64, 64), "float16"), idx: T.Tensor((n,), "int32"), C: T.Tensor((64, 64), "float32")):
        with T.Kernel(1, threads=128):
            A_s = T.alloc_shared((64, 64), "float16")
            acc = T.alloc_fragment((64, 64), "float32")
            if table_written:
                for i in T.Parallel(n):
                    idx[i] = n - 1 - i
            T.clear(acc)
            for k in T.Pipelined(n, num_stages=2):
                if bind:
                    j = idx[k]
                    if j >= 0:
                        T.copy(A[j * 64 : j * 64 + 64, :], A_s)
                        T.gemm(A_s, A_s, acc, transpose_B=True)
                else:
                    if idx[k] >= 0:
                        T.copy(A[idx[k] * 64 : idx[k] * 64 + 64, :], A_s)
                        T.gemm(A_s, A_s, acc, transpose_B=True)
            T.copy(acc, C)

    return main


def test_a_name_bound_before_the_condition_is_inlined_and_the_gather_pipelined():
    # Before, `j = idx[k]` in front of the `if` left the loop unpipelined (num_stages had no effect).
    bound, written = pipeline_loops(gather_by_table(bind=True)), pipeline_loops(gather_by_table(bind=False))
    assert _allocs(bound)["A_s"] == _allocs(written)["A_s"] == [2, 64, 64]
    assert "if idx[k + 1] >= 0:" in bound.script()
    src = tilelang.compile(gather_by_table(bind=True), out_idx=[2], target="sm_80").get_kernel_source()
    assert "cp_async" in src
    # A table the kernel writes itself: its read stays where the user put it, the loop unpipelined.
    assert _allocs(pipeline_loops(gather_by_table(bind=True, table_written=True)))["A_s"] == [64, 64]


def test_a_gather_by_a_bound_name_computes_what_torch_does():
    torch = pytest.importorskip("torch")
    A = torch.randn(8 * 64, 64, dtype=torch.float16)
    idx = torch.tensor([3, -1, 0, 7, -1, 5, 5, 1], dtype=torch.int32)
    C = tilelang.compile(gather_by_table(bind=True), out_idx=[2], target="cpu")(A, idx)
    blocks = [A[j * 64 : j * 64 + 64].float() for j in idx.tolist() if j >= 0]
    torch.testing.assert_close(C, sum(b @ b.T for b in blocks), rtol=1e-3, atol=1e-2)

"""The sm_90a plan of a pipelined loop: which copies become TMA loads, the producer/consumer split,
the barriers and their counts, the switches that turn each part off, and nvcc compiling the result
(pipeline_tma, warp_specialize, consumer_barriers; no GPU needed)."""

import os
import re
import sys

import pytest

import tilelang
import tilelang.language as T
from tilelang.codegen import cuda

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "..", "..", "examples", "gemm"))
from example_gemm import matmul  # noqa: E402


def _gemm(configs=None, target="sm_90a", M=1024, N=1024, K=1024, bm=128, bn=256, bk=64, threads=256, stages=3):
    func = matmul.factory(M, N, K, bm, bn, bk, "float16", "float", threads, stages)
    return tilelang.compile(func, out_idx=[-1], target=target, pass_configs=configs or {})


def _count(src, pattern):
    return len(re.findall(pattern, src))


def test_gemm_example_plan_on_hopper():
    k = _gemm()
    src = k.get_kernel_source()
    # Two consumer warpgroups plus the producer's (one block per SM: they trade registers).
    assert "__launch_bounds__(384, 1)" in src
    # A (128 x 64) is one 128-byte-swizzled box; B (64 x 256, N contiguous) is four 64-column panels.
    signature = re.search(r"main_kernel\(([^)]*)\)", src).group(1)
    assert _count(signature, r"const __grid_constant__ CUtensorMap") == 2
    assert _count(src, r"tl::tma_load\(A_tma") == 1 and _count(src, r"tl::tma_load\(B_tma") == 4
    assert _count(src, r"tl::mbarrier_arrive_expect_tx\(") == 2
    # One full barrier per tile and stage (one arrival: the expect_tx), one empty barrier per stage
    # counting the 8 consumer warps.
    assert _count(src, r"tl::mbarrier_init\(\(&\((A|B)_shared_full_ptr\[\d\]\)\), 1\)") == 6
    assert _count(src, r"tl::mbarrier_init\(\(&\(k_empty_ptr\[\d\]\)\), 8\)") == 3
    # Register budgets: the producer gives registers back, the consumers take them.
    assert "tl::setmaxnreg_dec<24>" in src and "tl::setmaxnreg_inc<240>" in src
    assert "((int)threadIdx.x) < 256" in src and "((int)threadIdx.x) == 256" in src
    # The producer waits for the consumers to free a stage before reusing it.
    assert re.search(r"tl::mbarrier_wait\(\(&\(k_empty_ptr", src)
    # The wgmma runs one iteration ahead (Wait = 1) without a proxy fence (TMA wrote its operands);
    # the stage of the previous iteration is released after it.
    assert re.search(r"tl::wgmma_ss<128, 256, 64, 2, 1, false, false, false, 128, 64, 3, 64, 256, 3, 1, false>", src)
    assert "tl::mbarrier_arrive_warp((&(k_empty_ptr[((i + 2) % 3)])))" in src
    assert "tl::wgmma_wait<0>()" in src
    assert "cp_async" not in src
    # The launcher encodes both tensor maps before the launch.
    assert _count(k.host_source, r"tl_host::tensor_map_encode_tiled\(") == 2
    cuda.compile_object(src, k.target, host_src=k.host_source)


def test_without_warp_specialization_thread_0_issues_the_loads_ahead():
    src = _gemm({"tl.disable_warp_specialized": True}).get_kernel_source()
    assert "__launch_bounds__(256)" in src
    assert "setmaxnreg" not in src and "k_empty" not in src
    assert _count(src, r"tl::tma_load\(") == 3 * 5  # the prologue (2 stages, unrolled) and the loop
    assert "__syncthreads();" in src


def test_disable_tma_lower_keeps_cp_async():
    src = _gemm({"tl.disable_tma_lower": True}).get_kernel_source()
    assert "tl::tma_load" not in src and "tl::cp_async<16>" in src


def test_other_targets_keep_cp_async():
    src = _gemm(target="sm_80", bn=128, threads=128).get_kernel_source()
    assert "tl::tma_load" not in src and "tl::cp_async<16>" in src


def test_one_consumer_warpgroup_takes_240_registers():
    src = _gemm(bn=128, threads=128).get_kernel_source()
    assert "__launch_bounds__(256, 1)" in src
    assert "tl::setmaxnreg_inc<240>" in src


@tilelang.jit(out_idx=[-1])
def _dynamic_k_gemm(N=128):
    K = T.dynamic("K")

    @T.prim_func
    def main(A: T.Tensor((128, K), "float16"), B: T.Tensor((K, N), "float16"), C: T.Tensor((128, N), "float32")):
        with T.Kernel(1, threads=128):
            A_s = T.alloc_shared((128, 64), "float16")
            B_s = T.alloc_shared((64, N), "float16")
            C_f = T.alloc_fragment((128, N), "float32")
            T.clear(C_f)
            for k in T.Pipelined(T.ceildiv(K, 64), num_stages=2):
                T.copy(A[0, k * 64], A_s)
                T.copy(B[k * 64, 0], B_s)
                T.gemm(A_s, B_s, C_f)
            T.copy(C_f, C)

    return main


def test_a_dynamic_contiguous_dimension_falls_back_to_cp_async():
    # A's rows are K elements: whether they are a multiple of 16 bytes is only known at run time.
    k = tilelang.compile(_dynamic_k_gemm.factory(), out_idx=[-1], target="sm_90a")
    src = k.get_kernel_source()
    assert "tl::cp_async<16>" in src and "tl::tma_load" not in src


def test_consumer_barriers_leave_the_producer_running():
    sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "..", "..", "examples", "flash_attention"))
    import example_mha_fwd_bshd as fa

    f = fa.flashattn.factory(1, 4, 256, 128, False, 128, 64, 2, 256)
    src = tilelang.compile(f, out_idx=[3], target="sm_90a").get_kernel_source()
    consumer = src[src.index("((int)threadIdx.x) < 256") :]
    # Q is written to shared memory by the consumers and read by their wgmma: a barrier over the
    # 256 consumer threads only; the one block-wide barrier is the one after barrier init.
    assert "tl::named_barrier_sync<1, 256>()" in consumer
    assert "__syncthreads" not in consumer
    assert _count(src, r"__syncthreads\(\)") == 1
    # K and V each complete on their own barriers: Q·Kᵀ waits for K only, P·V for V.
    assert (
        src.index("tl::mbarrier_wait((&(K_shared_full")
        < src.index("tl::wgmma_ss")
        < src.index("tl::mbarrier_wait((&(V_shared_full")
    )


@pytest.mark.parametrize("threads,expect", [(128, (40, 240)), (256, (24, 240)), (384, (24, 160)), (512, (24, 112))])
def test_register_budgets_fit_the_register_file(threads, expect):
    from tilelang.transform.set_register_budgets import register_budgets

    producer, consumer = register_budgets(threads)
    assert (producer, consumer) == expect
    assert producer * 128 + consumer * threads <= 65536


@tilelang.jit(out_idx=[-1])
def _gemm_per_batch():
    @T.prim_func
    def main(
        A: T.Tensor((4, 128, 256), "float16"), B: T.Tensor((256, 128), "float16"), C: T.Tensor((4, 128, 128), "float32")
    ):
        with T.Kernel(1, threads=128):
            A_s = T.alloc_shared((128, 64), "float16")
            B_s = T.alloc_shared((64, 128), "float16")
            C_f = T.alloc_fragment((128, 128), "float32")
            for b in T.serial(4):
                T.clear(C_f)
                for k in T.Pipelined(4, num_stages=2):
                    T.copy(A[b, 0, k * 64], A_s)
                    T.copy(B[k * 64, 0], B_s)
                    T.gemm(A_s, B_s, C_f)
                T.copy(C_f, C[b, 0:128, 0:128])

    return main


def test_a_pipelined_loop_inside_another_loop_counts_its_stages_across_runs():
    k = tilelang.compile(_gemm_per_batch.factory(), out_idx=[-1], target="sm_90a")
    src = k.get_kernel_source()
    assert "tl::tma_load" in src and "setmaxnreg" in src
    # Each side counts the iterations of earlier runs, from 0 at the kernel's start, and the
    # barriers and stages of iteration i are those of iteration runs + i.
    for side in ("consumer", "producer"):
        assert f"k_{side}_runs_ptr[0] = 0;" in src
        assert f"k_{side}_runs_ptr[0] = (k_{side}_runs_ptr[0] + 4);" in src
    assert re.search(r"mbarrier_wait\(\(&\(A_s_full_ptr\[[^\]]*k_consumer_runs_ptr\[0\]", src)
    assert re.search(r"mbarrier_wait\(\(&\(k_empty_ptr\[\(\(k_producer_runs_ptr\[0\] \+ i_load\) & 1\)", src)
    # The producer follows the outer loop with its own variable.
    assert "for (int b_p = 0; b_p < 4; ++b_p)" in src
    cuda.compile_object(src, k.target)


def test_without_a_producer_warpgroup_a_nested_pipelined_loop_keeps_cp_async():
    # Thread 0's loads ahead would start each run in a phase the parities do not count from.
    k = tilelang.compile(
        _gemm_per_batch.factory(), out_idx=[-1], target="sm_90a", pass_configs={"tl.disable_warp_specialized": True}
    )
    src = k.get_kernel_source()
    assert "tl::cp_async<16>" in src and "tl::tma_load" not in src


@tilelang.jit(out_idx=[-1])
def _gemm_with_a_computed_trip_count(from_thread=False):
    @T.prim_func
    def main(
        A: T.Tensor((128, 256), "float16"), B: T.Tensor((256, 128), "float16"), C: T.Tensor((128, 128), "float32")
    ):
        with T.Kernel(1, threads=128):
            A_s = T.alloc_shared((128, 64), "float16")
            B_s = T.alloc_shared((64, 128), "float16")
            C_f = T.alloc_fragment((128, 128), "float32")
            tx = T.get_thread_binding()
            n = T.alloc_var("int32", init=0)
            if from_thread:
                n = 4 + tx // 1024  # reads the thread index: another warpgroup would get another value
            else:
                for _ in T.serial(4):  # a value the threads compute, held in a register
                    n = n + 1
            T.clear(C_f)
            for k in T.Pipelined(n, num_stages=2):
                T.copy(A[0, k * 64], A_s)
                T.copy(B[k * 64, 0], B_s)
                T.gemm(A_s, B_s, C_f)
            T.copy(C_f, C)

    return main


def test_a_trip_count_in_a_register_the_producer_computes_itself():
    # `n` depends on nothing but constants: the producer warpgroup runs the statements computing it.
    k = tilelang.compile(_gemm_with_a_computed_trip_count.factory(), out_idx=[-1], target="sm_90a")
    src = k.get_kernel_source()
    assert "tl::tma_load" in src and "setmaxnreg" in src
    assert src.count("n_ptr[0] = 0;") == 2 and "for (int i_load = 0; i_load < n_ptr[0]; ++i_load)" in src
    cuda.compile_object(src, k.target)


def test_a_trip_count_from_the_thread_index_keeps_every_thread_in_the_loop():
    # The producer warpgroup could not compute the consumers' `n`: TMA, but no warp specialization.
    func = _gemm_with_a_computed_trip_count.factory(from_thread=True)
    src = tilelang.compile(func, out_idx=[-1], target="sm_90a").get_kernel_source()
    assert "tl::tma_load" in src and "setmaxnreg" not in src


@tilelang.jit(out_idx=[-1])
def _gemm_last_block_first():
    @T.prim_func
    def main(
        A: T.Tensor((512, 256), "float16"), B: T.Tensor((256, 128), "float16"), C: T.Tensor((512, 128), "float32")
    ):
        with T.Kernel(4, threads=128) as bx_launch:
            bx = 3 - bx_launch  # a binding before the tiles (blocks in reverse order)
            A_s = T.alloc_shared((128, 64), "float16")
            B_s = T.alloc_shared((64, 128), "float16")
            C_f = T.alloc_fragment((128, 128), "float32")
            A0_s = T.alloc_shared((128, 64), "float16")
            steps = T.min(4, bx + 1)  # a trip count bound from it
            T.copy(A[bx * 128, 0], A0_s)  # loaded once, read in every iteration
            T.clear(C_f)
            for k in T.Pipelined(steps, num_stages=2):
                T.copy(A[bx * 128, k * 64], A_s)
                T.copy(B[k * 64, 0], B_s)
                T.gemm(A_s, B_s, C_f)
                T.gemm(A0_s, B_s, C_f)
            T.copy(C_f, C[bx * 128, 0])

    return main


def test_tiles_allocated_after_a_binding_are_shared_by_both_warpgroups(tmp_path, monkeypatch):
    monkeypatch.setenv("TILELANG_DUMP_IR", str(tmp_path))
    k = tilelang.compile(_gemm_last_block_first.factory(), out_idx=[-1], target="sm_90a")
    (ir_after,) = tmp_path.glob("*_warp_specialize.py")
    text = ir_after.read_text()
    # Each tile is allocated once, before the split into producer and consumers.
    for tile in ("A_s", "B_s", "A0_s"):
        assert text.count(f"{tile} = T.alloc_buffer(") == 1, tile
    assert text.index("A0_s = T.alloc_buffer(") < text.index("tl.ws_producer_branch")
    # The producer binds its own copies and uses only those (no free `bx` or `steps`).
    assert "bx_p: T.let" in text and "steps_p: T.let" in text
    assert "bx = T.int32()" not in text and "steps = T.int32()" not in text
    src = k.get_kernel_source()
    assert "setmaxnreg" in src and "tl::tma_load" in src
    cuda.compile_object(src, k.target)


def test_one_stage_attention_gets_a_producer_and_frees_each_tile_after_its_last_reader():
    """num_stages=1 (as public examples write for Hopper): one buffer per tile, a producer warpgroup,
    K freed right after Q·Kᵀ so its next load runs beside the softmax and P·V (barrier protocol checked)."""
    sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "..", "..", "examples", "flash_attention"))
    from example_mha_fwd_bshd import flashattn

    func = flashattn.get_tir(1, 2, 512, 128, False, 64, 64, 1, 128)
    configs = {"tl.check_barrier_protocol": True, "tl.enable_fast_math": True}
    src = tilelang.compile(func, out_idx=[3], target="sm_90a", pass_configs=configs).get_kernel_source()
    assert "setmaxnreg" in src and "K_shared_empty" in src and "V_shared_empty" in src
    qk = re.search(r"tl::wgmma_ss<[^;]*;\s*tl::mbarrier_arrive_warp\(\(&\(K_shared_empty_ptr\[0\]\)\)\)", src)
    assert qk is not None  # K is freed by the statement after the gemm that reads it last


def test_a_block_sparse_gemm_skips_its_loads_and_still_completes_each_stage():
    """The public block-sparse GEMM's `if mask[k]:` body: each TMA load runs under its iteration's
    mask, and a skipped one arrives on its stage's barrier without bytes, so the consumers (skipping
    the gemm under the same mask) wait on every stage as usual. Barrier protocol checked."""
    sys.path.insert(0, os.path.dirname(__file__))
    from test_inject_cp_async_pipelines import block_sparse_gemm

    configs = {"tl.check_barrier_protocol": True}
    k = tilelang.compile(block_sparse_gemm(stages=3), out_idx=[3], target="sm_90a", pass_configs=configs)
    src = k.get_kernel_source()
    assert "setmaxnreg" in src and "cp_async" not in src
    skipped = r"if \(mask_ptr\[i_load\]\) \{\s*tl::mbarrier_arrive_expect_tx\(\(&\(A_s_full_ptr\[\(i_load % 3\)\]\)\)"
    skipped += r"[^}]*\}\s*else \{\s*tl::mbarrier_arrive\(\(&\(A_s_full_ptr\[\(i_load % 3\)\]\)\)\);"
    assert re.search(skipped, src), src
    cuda.compile_object(src, k.target, host_src=k.host_source)


def test_a_load_under_a_condition_its_readers_do_not_share_keeps_cp_async():
    """A tile loaded only when mask[k] holds but read by an unconditional gemm: a skipped TMA load
    would leave the reader a stage no load filled, so the loop keeps cp.async."""

    @T.prim_func
    def main(
        A: T.Tensor((128, 256), "float16"),
        B: T.Tensor((256, 128), "float16"),
        mask: T.Tensor((8,), "bool"),
        C: T.Tensor((128, 128), "float32"),
    ):
        with T.Kernel(1, threads=128):
            A_s = T.alloc_shared((128, 32), "float16")
            B_s = T.alloc_shared((32, 128), "float16")
            C_f = T.alloc_fragment((128, 128), "float32")
            T.clear(C_f)
            for k in T.Pipelined(8, num_stages=2):
                if mask[k]:
                    T.copy(A[0, k * 32], A_s)
                T.copy(B[k * 32, 0], B_s)
                T.gemm(A_s, B_s, C_f)
            T.copy(C_f, C)

    src = tilelang.compile(main, out_idx=[3], target="sm_90a").get_kernel_source()
    assert "tl::cp_async<16>" in src and "tma_load" not in src


@pytest.mark.parametrize("stages", [2, 3])
def test_without_a_producer_warpgroup_skipped_loads_also_complete_their_stages(stages):
    """Thread 0 issuing the block-sparse GEMM's loads ahead (no warp specialization): a masked-off
    iteration's loads arrive on their barriers without bytes too (barrier protocol checked)."""
    sys.path.insert(0, os.path.dirname(__file__))
    from test_inject_cp_async_pipelines import block_sparse_gemm

    configs = {"tl.disable_warp_specialized": True, "tl.check_barrier_protocol": True}
    k = tilelang.compile(block_sparse_gemm(stages=stages), out_idx=[3], target="sm_90a", pass_configs=configs)
    src = k.get_kernel_source()
    assert "tl::tma_load" in src and "setmaxnreg" not in src
    # A and B, in each of the stages - 1 prologue iterations and in the loop body
    assert src.count("tl::mbarrier_arrive((&(") == 2 * (stages - 1) + 2

"""The consumers of a warp-specialized loop (consumer_loop, place_wgmma_waits): where the asynchronous
wgmma waits go, consumer stages (prologue, loop, epilogue), which stage each iteration frees, the two
consumer warpgroups' turns at the tensor cores, and nvcc compiling the result (sm_90a, no GPU)."""

import os
import re
import sys

import tilelang
import tilelang.language as T
from tilelang.codegen import cuda

_EXAMPLES = os.path.join(os.path.dirname(__file__), "..", "..", "..", "examples")
sys.path[:0] = [os.path.join(_EXAMPLES, d) for d in ("flash_attention", "deepseek_mla", "gemm")]
import example_gemm as gemm  # noqa: E402
import example_mha_fwd_bshd as fa  # noqa: E402
import example_mla_decode as mla  # noqa: E402


def _calls(src, pattern):
    return [m.group(0) for m in re.finditer(pattern, src)]


def _fa(target="sm_90a"):
    f = fa.flashattn.factory(2, 4, 512, 128, False, 128, 128, 2, 256)
    return tilelang.compile(f, out_idx=[3], target=target, pass_configs={"tl.enable_fast_math": True})


def test_flash_attention_schedule_runs_pv_beside_the_softmax():
    k = _fa()
    src = k.get_kernel_source()
    loop = src[src.index("for (int i = 1; i < 4; ++i)") :]
    loop = loop[: loop.index("tl::wgmma_rs<128, 128, 128, 2, 1, false, false, false, 0, 0, 0, 128, 128, 3, 0,")]
    # In the loop: Q·Kᵀ of block i and P·V of block i - 1 are issued without a wait; the softmax waits
    # for Q·Kᵀ only (wait<1>), and P is rewritten only after P·V is done (wait<0>, P fenced).
    gemms = _calls(loop, r"tl::wgmma_(ss|rs)<[^>]*>")
    assert [g[:11] for g in gemms] == ["tl::wgmma_s", "tl::wgmma_r"] and all(", -1, " in g for g in gemms)
    assert loop.index("tl::wgmma_rs") < loop.index("tl::wgmma_wait<1>();") < loop.index("tl::wgmma_wait<0>();")
    assert "tl::fence_registers<64>((&(acc_s_local_ptr[0])));" in loop
    assert "tl::fence_registers<64>((&(acc_s_cast_local_ptr[0])));" in loop
    # K and V are freed separately: K of block i at the end of body i, V of block i - 1.
    assert "tl::mbarrier_arrive_warp((&(K_shared_empty_ptr[(i & 1)])));" in loop
    assert "tl::mbarrier_arrive_warp((&(V_shared_empty_ptr[((i + 1) & 1)])));" in loop
    # The prologue (Q·Kᵀ and softmax of block 0) frees K of block 0; the epilogue runs P·V of the last.
    prologue = src[: src.index("for (int i = 1; i < 4; ++i)")]
    assert "tl::mbarrier_arrive_warp((&(K_shared_empty_ptr[0])));" in prologue
    # T.clear(acc_s) before Q·Kᵀ is the gemm's clear flag (fold_accumulator_clear), there and in the loop.
    assert "tl::wgmma_ss<128, 128, 128, 2, 1, false, true, true, 128, 128, 3, 128, 128, 3, -1, false>" in prologue
    assert "tl::wgmma_ss<128, 128, 128, 2, 1, false, true, true, 128, 128, 3, 128, 128, 3, -1, false>" in loop
    assert "tl::mbarrier_wait((&(V_shared_full_ptr[1])), 1);" in src  # block 3's V, before the last P·V
    # The producer waits for each tile's own stage to be freed.
    assert "tl::mbarrier_wait((&(K_shared_empty_ptr[(i_load & 1)]))" in src
    assert "tl::mbarrier_wait((&(V_shared_empty_ptr[(i_load & 1)]))" in src
    # The two warpgroups (64 rows each) take turns issuing their gemms: in the prologue, the loop
    # (Q·Kᵀ through P·V) and the epilogue; warpgroup 1 lets warpgroup 0 go first.
    assert src.count("tl::pingpong_init();") == 1 and src.index("tl::pingpong_init();") < src.index("for (int i = 1;")
    assert src.count("tl::pingpong_sync();") == 3 and src.count("tl::pingpong_arrive();") == 3
    assert loop.index("tl::pingpong_sync();") < loop.index("tl::wgmma_ss") < loop.index("tl::wgmma_rs")
    assert loop.index("tl::wgmma_rs") < loop.index("tl::pingpong_arrive();") < loop.index("tl::wgmma_wait<1>();")
    cuda.compile_object(src, k.target, fast_math=True)


def _two_gemms(threads=256):
    """C = A·B per block of K, then D += C·W: C goes through shared memory between the gemms."""

    @T.prim_func
    def main(
        A: T.Tensor((128, 512), "float16"),
        B: T.Tensor((512, 128), "float16"),
        W: T.Tensor((128, 128), "float16"),
        D: T.Tensor((128, 128), "float"),
    ):
        with T.Kernel(1, threads=threads):
            A_s = T.alloc_shared((128, 64), "float16")
            B_s = T.alloc_shared((64, 128), "float16")
            W_s = T.alloc_shared((128, 128), "float16")
            S_s = T.alloc_shared((128, 128), "float16")
            C_f = T.alloc_fragment((128, 128), "float")
            D_f = T.alloc_fragment((128, 128), "float")
            T.copy(W, W_s)
            T.clear(D_f)
            for k in T.Pipelined(8, num_stages=2):
                T.copy(A[0, k * 64], A_s)
                T.copy(B[k * 64, 0], B_s)
                T.gemm(A_s, B_s, C_f, clear_accum=True, policy=T.GemmWarpPolicy.FullRow)
                T.copy(C_f, S_s)
                T.gemm(S_s, W_s, D_f, policy=T.GemmWarpPolicy.FullRow)
            T.copy(D_f, D)

    return main


def test_no_turns_across_a_barrier_over_both_warpgroups():
    k = tilelang.compile(_two_gemms(), out_idx=[3], target="sm_90a")
    src = k.get_kernel_source()
    # Between the two gemms (one turn), C's tile in shared memory needs a barrier over both
    # warpgroups: one would wait there for the other, waiting for its turn. No turns.
    assert "tl::named_barrier_sync<1, 256>();" in src and "pingpong" not in src
    cuda.compile_object(src, k.target)


def _plain_attention():
    """Q·Kᵀ, a softmax-like row rescale, P·V with a carried accumulator, kept in program order by
    the user's schedule (without it, infer_stages would split the stages as FlashAttention-3 does)."""

    @T.prim_func
    def main(
        Q: T.Tensor((128, 64), "float16"),
        K: T.Tensor((512, 64), "float16"),
        V: T.Tensor((512, 64), "float16"),
        O: T.Tensor((128, 64), "float"),
    ):
        with T.Kernel(1, threads=256):
            Q_s = T.alloc_shared((128, 64), "float16")
            K_s = T.alloc_shared((64, 64), "float16")
            V_s = T.alloc_shared((64, 64), "float16")
            S = T.alloc_fragment((128, 64), "float")
            P = T.alloc_fragment((128, 64), "float16")
            O_f = T.alloc_fragment((128, 64), "float")
            m = T.alloc_fragment((128,), "float")
            T.copy(Q, Q_s)
            T.clear(O_f)
            for k in T.Pipelined(8, num_stages=2, order=[-1, 0, 1, 2, 3, -1, 4], stage=[-1, 0, 0, 0, 0, -1, 0]):
                T.copy(K[k * 64, 0], K_s)
                T.gemm(Q_s, K_s, S, transpose_B=True, clear_accum=True, policy=T.GemmWarpPolicy.FullRow)
                T.reduce_max(S, m, dim=1)
                for i, j in T.Parallel(128, 64):
                    S[i, j] = T.exp2(S[i, j] - m[i])
                T.copy(S, P)
                T.copy(V[k * 64, 0], V_s)
                T.gemm(P, V_s, O_f, policy=T.GemmWarpPolicy.FullRow)
            T.copy(O_f, O)

    return main


def test_no_turns_when_the_work_lies_between_the_gemms():
    # The whole softmax lies between Q·Kᵀ and P·V: inside a turn, the two warpgroups would run it
    # one after the other (measured on the H200: a plain FlashAttention 434 TFLOP/s with turns,
    # 518 without). No turns.
    src = tilelang.compile(_plain_attention(), out_idx=[3], target="sm_90a").get_kernel_source()
    assert "tl::wgmma_rs" in src and "pingpong" not in src


def test_without_warp_specialization_the_schedule_is_not_used():
    f = fa.flashattn.factory(2, 4, 512, 128, False, 128, 128, 2, 256)
    k = tilelang.compile(f, out_idx=[3], target="sm_90a", pass_configs={"tl.disable_warp_specialized": True})
    src = k.get_kernel_source()
    assert "for (int i = 1;" not in src and "wgmma_wait" not in src and ", -1, " not in src


_ARRIVE = r"tl::mbarrier_arrive_warp\(\(&\(k_empty_ptr"  # freeing a stage (index follows)


def test_mla_pv_is_waited_for_with_two_stages():
    f = mla.mla_decode.factory(64, 128, 1, 8192, 512, 64, 64, 64, 1, "float16")
    src = tilelang.compile(f, out_idx=[6], target="sm_90a").get_kernel_source()
    # P·V reads the KV stage; with 2 stages, freeing the stage before instead would leave the loads
    # no stage of lead, so the body waits for P·V and frees its own stage.
    assert re.search(r"tl::wgmma_ss<64, 512, 64, 1, 2, [^>]*, 0, true>[^;]*;\s*" + _ARRIVE + r"\[\(i & 1\)\]", src)
    assert ", -1, true>" not in src.split("wgmma_ss<64, 512, 64")[1].split(";")[0]


def _gemm_k_loop(stages):
    f = gemm.matmul.factory(256, 256, 1024, 128, 128, 64, "float16", "float", 256, stages)
    return tilelang.compile(f, out_idx=[-1], target="sm_90a").get_kernel_source()


def test_gemm_runs_on_into_the_next_iteration_when_a_stage_of_loads_stays_ahead():
    # 3 stages: each body leaves its own gemm running (the gemm's own wait<1>) and frees the stage
    # before; the loads keep one stage of lead.
    src = _gemm_k_loop(3)
    frees_the_stage_before = r"if \(1 <= i\) \{\s*" + _ARRIVE + r"\[\(\(i \+ 2\) % 3\)\]"
    assert re.search(r"tl::wgmma_ss<[^>]*, 1, false>[^;]*;\s*" + frees_the_stage_before, src)
    # After the loop everything is waited for and the accumulator fenced before the epilogue reads it.
    tail = src[src.rindex("tl::wgmma_wait<0>();") :]
    assert tail.startswith("tl::wgmma_wait<0>();\n") and "tl::fence_registers<" in tail
    # 2 stages: the gemm is waited for in its own body, which frees its own stage.
    src = _gemm_k_loop(2)
    assert re.search(r"tl::wgmma_ss<[^>]*, 0, false>[^;]*;\s*" + _ARRIVE + r"\[\(i & 1\)\]", src)


def test_a_gemm_the_user_made_asynchronous_keeps_the_users_waits():
    @T.prim_func
    def main(A: T.Tensor((128, 512), "float16"), B: T.Tensor((512, 128), "float16"), C: T.Tensor((128, 128), "float")):
        with T.Kernel(1, threads=128):
            A_s = T.alloc_shared((128, 64), "float16")
            B_s = T.alloc_shared((64, 128), "float16")
            C_f = T.alloc_fragment((128, 128), "float")
            T.clear(C_f)
            for k in T.Pipelined(8, num_stages=2):
                T.copy(A[0, k * 64], A_s)
                T.copy(B[k * 64, 0], B_s)
                T.gemm(A_s, B_s, C_f, wg_wait=-1)
                T.wait_wgmma(0)
            T.copy(C_f, C)

    src = tilelang.compile(main, out_idx=[2], target="sm_90a").get_kernel_source()
    assert len(_calls(src, r"tl::wgmma_wait<")) == 1 and "fence_registers" not in src
    assert "tl::mbarrier_arrive_warp((&(k_empty_ptr[(i & 1)])));" in src

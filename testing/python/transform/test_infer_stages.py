"""infer_stages: an attention loop written without `order/stage/group` gets FlashAttention-3's split
(Q·Kᵀ of block i, the rescale and P·V of block i - 1, then the softmax of block i); loops it would
change the result of, or that are not attention loops, keep program order (sm_90a, no GPU)."""

import tvm_ffi
from tvm import tirx

import tilelang
import tilelang.language as T
from tilelang.codegen import cuda
from tilelang.transform.common import inline_bindings
from tilelang.transform.pipelining import infer_stages, schedule
from tilelang.transform.select_gemm_instructions import select_gemm_instructions
from tilelang.utils.target import determine_target


def _attention(variant="plain"):
    """Q·Kᵀ, a softmax, the rescale of O, P·V; `variant` adds what must keep program order."""

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
            m_prev = T.alloc_fragment((128,), "float")
            T.copy(Q, Q_s)
            T.clear(O_f)
            T.fill(m, -T.infinity("float"))
            for k in T.Pipelined(8, num_stages=2):
                T.copy(K[k * 64, 0], K_s)
                if variant == "prefix reads O":
                    for i in T.Parallel(128):
                        m_prev[i] = O_f[i, 0]
                if variant == "causal mask with names":
                    for i, j in T.Parallel(128, 64):
                        q_idx = i + 256
                        k_idx = k * 64 + j
                        S[i, j] = T.if_then_else(q_idx >= k_idx, 0, -T.infinity("float"))
                T.gemm(
                    Q_s, K_s, S, transpose_B=True, clear_accum=(variant != "causal mask with names"),
                    policy=T.GemmWarpPolicy.FullRow,
                )
                if variant != "prefix reads O":
                    T.copy(m, m_prev)
                T.reduce_max(S, m, dim=1, clear=False)
                for i, j in T.Parallel(128, 64):
                    S[i, j] = T.exp2(S[i, j] - m[i])
                T.copy(S, P)
                for i, j in T.Parallel(128, 64):
                    O_f[i, j] *= T.exp2(m_prev[i] - m[i])
                T.copy(V[k * 64, 0], V_s)
                T.gemm(P, V_s, O_f, clear_accum=(variant == "P·V cleared"), policy=T.GemmWarpPolicy.FullRow)
                if variant == "O written after P·V":
                    for i, j in T.Parallel(128, 64):
                        O_f[i, j] *= 0.5
            T.copy(O_f, O)

    return main


def _stages(func):
    func = select_gemm_instructions(func.with_attr("target", determine_target("sm_90a")))
    loops = []
    tvm_ffi.structural_walk(func.body, [(tirx.For, lambda f: loops.append(f) if schedule.stages_of(f) else None)])
    (loop,) = loops
    return infer_stages.attention_stages(inline_bindings(schedule._statements(loop.body)))


def test_an_attention_loop_gets_the_flash_attention_3_split():
    # Statements: K copy, Q·Kᵀ, m_prev, reduce_max, exp2, cast to P, rescale of O, V copy, P·V.
    order, stage = _stages(_attention())
    assert stage == [-1, 0, 0, 0, 0, 0, 1, -1, 1]
    # Q·Kᵀ first, then the rescale and P·V (of the block before), then the softmax.
    assert order == [-1, 0, 3, 4, 5, 6, 1, -1, 2]


def test_loops_the_split_would_change_keep_program_order():
    # O read before Q·Kᵀ (it would read O before the previous block's P·V), O written after P·V,
    # and a P·V that does not accumulate across blocks.
    for variant in ("prefix reads O", "O written after P·V", "P·V cleared"):
        assert _stages(_attention(variant)) is None, variant


def test_one_gemm_is_not_an_attention_loop():
    @T.prim_func
    def gemm(A: T.Tensor((128, 512), "float16"), B: T.Tensor((512, 128), "float16"), C: T.Tensor((128, 128), "float")):
        with T.Kernel(1, threads=256):
            A_s = T.alloc_shared((128, 64), "float16")
            B_s = T.alloc_shared((64, 128), "float16")
            C_f = T.alloc_fragment((128, 128), "float")
            T.clear(C_f)
            for k in T.Pipelined(8, num_stages=2):
                T.copy(A[0, k * 64], A_s)
                T.copy(B[k * 64, 0], B_s)
                T.gemm(A_s, B_s, C_f)
            T.copy(C_f, C)

    assert _stages(gemm) is None


def test_the_split_attention_loop_compiles_to_the_annotated_schedule():
    k = tilelang.compile(_attention(), out_idx=[3], target="sm_90a")
    src = k.get_kernel_source()
    loop = src[src.index("for (int i = 1; i < 8; ++i)") :]
    # In the loop, Q·Kᵀ of block i, then P·V of block i - 1 (V's stage (i + 1) & 1), both issued
    # without a wait; the softmax waits for Q·Kᵀ only.
    assert loop.index("tl::wgmma_ss") < loop.index("tl::wgmma_rs") < loop.index("tl::wgmma_wait<1>();")
    assert "V_s_full_ptr[((i + 1) & 1)]" in loop
    cuda.compile_object(src, k.target)


def test_names_bound_in_a_split_statement_are_bound_once_each():
    # The mask (with its names) runs in the prologue and in the loop: each copy binds its own
    # variables (TVM's simplifier stopped on one variable bound to two ranges).
    k = tilelang.compile(_attention("causal mask with names"), out_idx=[3], target="sm_90a")
    src = k.get_kernel_source()
    assert "tl::wgmma_wait<1>();" in src
    cuda.compile_object(src, k.target)

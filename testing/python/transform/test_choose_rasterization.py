"""choose_rasterization: GEMM-shaped kernels without T.use_swizzle get panels of 8 grid rows (logged
at INFO); attention-shaped kernels, kernels whose blocks may wait on each other, 1-D grids and the
user's own choice (T.use_swizzle, also enable=False) keep what they have."""

import logging

from tvm import ir

import tilelang
import tilelang.language as T
from tilelang.op import base
from tilelang.transform.choose_rasterization import PANEL, choose_rasterization
from tilelang.transform.select_gemm_instructions import select_gemm_instructions
from tilelang.utils.ir import collect
from tilelang.utils.target import determine_target


def _gemm(swizzle=None, spin=False):
    @T.prim_func
    def main(A: T.Tensor((512, 512), "float16"), B: T.Tensor((512, 512), "float16"), C: T.Tensor((512, 512), "float")):
        with T.Kernel(4, 4, threads=128) as (bx, by):
            A_s = T.alloc_shared((128, 32), "float16")
            B_s = T.alloc_shared((32, 128), "float16")
            C_f = T.alloc_fragment((128, 128), "float")
            flag = T.alloc_var("int32")
            if swizzle is not None:
                T.use_swizzle(panel_size=swizzle, enable=swizzle > 0)
            T.clear(C_f)
            for k in T.Pipelined(16, num_stages=3):
                T.copy(A[by * 128, k * 32], A_s)
                T.copy(B[k * 32, bx * 128], B_s)
                T.gemm(A_s, B_s, C_f)
            if spin:
                flag = 0
                while flag < 1:
                    flag = flag + 1
            T.copy(C_f, C[by * 128, bx * 128])

    return main


def _attention_like():
    """Both loads move with blockIdx.y (the head), the queries with blockIdx.x: not a GEMM grid."""

    @T.prim_func
    def main(
        Q: T.Tensor((4, 512, 64), "float16"), K: T.Tensor((4, 512, 64), "float16"), O: T.Tensor((4, 512, 64), "float")
    ):
        with T.Kernel(4, 4, threads=128) as (bx, by):
            Q_s = T.alloc_shared((128, 64), "float16")
            K_s = T.alloc_shared((64, 64), "float16")
            S = T.alloc_fragment((128, 64), "float")
            T.copy(Q[by, bx * 128, 0], Q_s)
            T.clear(S)
            for k in T.Pipelined(8, num_stages=2):
                T.copy(K[by, k * 64, 0], K_s)
                T.gemm(Q_s, K_s, S, transpose_B=True)
            T.copy(S, O[by, bx * 128, 0])

    return main


def _swizzles(func):
    func = select_gemm_instructions(func.with_attr("target", determine_target("sm_90a")))
    after = choose_rasterization(func)
    return [c for c in collect(after.body, ir.Call) if base.is_tile_op(c, "use_swizzle")], after, func


def test_a_gemm_gets_panels_and_a_log_line(caplog):
    with caplog.at_level(logging.INFO, logger="tilelang"):
        (call,), _, _ = _swizzles(_gemm())
    assert int(call.args[0]) == PANEL and int(call.args[1]) == 0
    assert "panels of 8 grid rows" in caplog.text
    src = tilelang.compile(_gemm(), out_idx=[2], target="sm_90a").get_kernel_source()
    assert "int bx_r = " in src and "int by_r = " in src


def _dynamic_gemm():
    m = T.dynamic("m")

    @T.prim_func
    def main(A: T.Tensor((m, 512), "float16"), B: T.Tensor((512, 512), "float16"), C: T.Tensor((m, 512), "float")):
        with T.Kernel(4, T.ceildiv(m, 128), threads=128) as (bx, by):
            A_s = T.alloc_shared((128, 32), "float16")
            B_s = T.alloc_shared((32, 128), "float16")
            C_f = T.alloc_fragment((128, 128), "float")
            T.clear(C_f)
            for k in T.Pipelined(16, num_stages=3):
                T.copy(A[by * 128, k * 32], A_s)
                T.copy(B[k * 32, bx * 128], B_s)
                T.gemm(A_s, B_s, C_f)
            T.copy(C_f, C[by * 128, bx * 128])

    return main


def test_kernels_that_keep_launch_order():
    for func in (_attention_like(), _gemm(spin=True), _dynamic_gemm()):
        calls, after, before = _swizzles(func)
        assert not calls and after.same_as(before)


def test_the_users_choice_stands():
    (call,), _, _ = _swizzles(_gemm(swizzle=4))
    assert int(call.args[0]) == 4
    (call,), _, _ = _swizzles(_gemm(swizzle=0))  # enable=False: panel 0, launch order
    assert int(call.args[0]) == 0
    src = tilelang.compile(_gemm(swizzle=0), out_idx=[2], target="sm_90a").get_kernel_source()
    assert "bx_r" not in src

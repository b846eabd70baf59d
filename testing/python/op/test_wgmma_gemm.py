"""T.wgmma_gemm (the public TileLang's explicit Hopper gemm): T.gemm issued without a wait that must
run as wgmma; the kernel waits with T.wait_wgmma. CPU: the plan and the calls in the generated code,
nvcc; the errors where wgmma does not apply, at the user's line. GPU: the product (test_wgmma_gemm_gpu.py)."""

import re

import pytest
from tvm import ir

import tilelang
import tilelang.language as T
from tilelang.codegen import cuda
from tilelang.errors import UserError
from tilelang.op import base
from tilelang.op import gemm as gemm_op
from tilelang.testing import assert_points_at
from tilelang.utils.ir import collect


def two_parts(M=64, threads=128):
    """S = Q K^T + Qt Kt^T, both parts issued before one wait (an MLA forward's scores)."""

    @T.prim_func
    def main(
        Q: T.Tensor((M, 128), "bfloat16"),
        K: T.Tensor((64, 128), "bfloat16"),
        Qt: T.Tensor((M, 64), "bfloat16"),
        Kt: T.Tensor((64, 64), "bfloat16"),
        S: T.Tensor((M, 64), "float32"),
    ):
        with T.Kernel(1, threads=threads):
            Q_s = T.alloc_shared((M, 128), "bfloat16")
            K_s = T.alloc_shared((64, 128), "bfloat16")
            Qt_s = T.alloc_shared((M, 64), "bfloat16")
            Kt_s = T.alloc_shared((64, 64), "bfloat16")
            S_f = T.alloc_fragment((M, 64), "float32")
            T.copy(Q, Q_s)
            T.copy(K, K_s)
            T.copy(Qt, Qt_s)
            T.copy(Kt, Kt_s)
            T.clear(S_f)
            T.wgmma_gemm(Q_s, K_s, S_f, transpose_B=True)
            T.wgmma_gemm(Qt_s, Kt_s, S_f, transpose_B=True)
            T.wait_wgmma(0)
            T.copy(S_f, S)

    return main


def test_it_is_a_gemm_without_a_wait_that_must_be_wgmma():
    gemms = [gemm_op.Gemm(c) for c in collect(two_parts().body, ir.Call) if base.is_tile_op(c, gemm_op.NAME)]
    assert [(g.wg_wait, g.wgmma_only) for g in gemms] == [(-1, True), (-1, True)]


def test_both_parts_are_issued_then_waited_for_once():
    k = tilelang.compile(two_parts(), out_idx=[4], target="sm_90a")
    src = k.get_kernel_source()
    # wgmma_ss<M, N, K, wg_m, wg_n, trans_a, trans_b, clear (T.clear folded into the first), ..., wait,
    # fence>: no wait inside either call, one tl::wgmma_wait<0> after both.
    calls = re.findall(r"tl::wgmma_ss<64, 64, (\d+), 1, 1, false, true, (\w+), [^>]*, (-?\d+), (?:true|false)>", src)
    assert calls == [("128", "true", "-1"), ("64", "false", "-1")]
    assert src.count("tl::wgmma_wait<0>();") == 1
    assert src.index("tl::wgmma_wait<0>();") > src.rindex("tl::wgmma_ss<")
    cuda.compile_object(src, k.target, host_src=k.host_source)


def test_where_wgmma_does_not_apply_it_is_an_error_at_the_users_line():
    # sm_80 has no wgmma; on sm_90a 32 rows are too few for a 64-row wgmma.
    for func, arch in ((two_parts(), "sm_80"), (two_parts(M=32), "sm_90a")):
        with pytest.raises(UserError) as err:
            tilelang.compile(func, out_idx=[4], target=arch)
        assert_points_at(err, "T.wgmma_gemm(Q_s, K_s, S_f, transpose_B=True)")
        msg = str(err.value)
        assert "T.wgmma_gemm(Q_s, K_s, S_f) cannot run as wgmma here" in msg and "use T.gemm" in msg
        assert "T.wgmma_gemm(Q_s, K_s, S_f, transpose_B=True)" in msg and "test_wgmma_gemm.py" in msg

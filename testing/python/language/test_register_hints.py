"""Register controls of the public TileLang: T.annotate_producer_reg_dealloc /
T.annotate_consumer_reg_alloc (the counts of the warp specialization tilelang builds for a
T.Pipelined loop on sm_90a), T.no_set_max_nreg / T.disable_warp_group_reg_alloc (none), and
T.inc_max_nreg / T.dec_max_nreg (T.set_max_nreg(n, 1) / (n, 0) in a role written by hand).
CPU: the setmaxnreg counts in the generated code, nvcc for sm_90a, the hints accepted (and
without effect) on sm_80, an over-budget hint reported at its line. GPU: the products."""

import re

import pytest
import torch

import tilelang
import tilelang.language as T
from tilelang.codegen import cuda
from tilelang.errors import UserError
from tilelang.testing import assert_points_at
from tilelang.utils.target import determine_target


def pipelined_gemm(hint=None, M=512, N=512, K=512):
    """A T.Pipelined GEMM (block 128 x 256 x 64, 256 threads) that tilelang warp-specializes on
    sm_90a; `hint`: None, "off", "counts" (24 and 232) or "too_many" (40 and 240)."""

    @T.prim_func
    def main(A: T.Tensor((M, K), "float16"), B: T.Tensor((K, N), "float16"), C: T.Tensor((M, N), "float16")):
        with T.Kernel(N // 256, M // 128, threads=256) as (bx, by):
            if hint == "off":
                T.disable_warp_group_reg_alloc()
            elif hint == "counts":
                T.annotate_producer_reg_dealloc(24)
                T.annotate_consumer_reg_alloc(232)
            elif hint == "too_many":
                T.annotate_producer_reg_dealloc(40)
                T.annotate_consumer_reg_alloc()
            A_s = T.alloc_shared((128, 64), "float16")
            B_s = T.alloc_shared((64, 256), "float16")
            C_f = T.alloc_fragment((128, 256), "float")
            T.clear(C_f)
            for k in T.Pipelined(K // 64, num_stages=3):
                T.copy(A[by * 128, k * 64], A_s)
                T.copy(B[k * 64, bx * 256], B_s)
                T.gemm(A_s, B_s, C_f)
            T.copy(C_f, C[by * 128, bx * 256])

    return main


def _asks(src):
    return sorted(re.findall(r"tl::setmaxnreg_(inc|dec)<(\d+)>", src))


@pytest.mark.parametrize(
    "hint, expect",
    [(None, [("dec", "24"), ("inc", "240")]), ("off", []), ("counts", [("dec", "24"), ("inc", "232")])],
)
def test_hints_set_the_warp_specialization_counts(hint, expect):
    kernel = tilelang.compile(pipelined_gemm(hint), out_idx=[2], target="sm_90a")
    src = kernel.get_kernel_source()
    assert "tl::tma_load" in src  # warp-specialized: a producer warpgroup issues the loads
    assert _asks(src) == expect
    assert "register_hint" not in src
    cuda.compile_object(src, determine_target("sm_90a"))


def test_hints_elsewhere_change_nothing():
    src = tilelang.compile(pipelined_gemm("counts"), out_idx=[2], target="sm_80").get_kernel_source()
    assert "setmaxnreg" not in src and "register_hint" not in src


def test_hint_past_the_register_file():
    message = r"(?s)need 520, more than the 504 \(3 x 168\)"
    message += r".*test_register_hints.py:\d+:\d+\n\s*\|\n\d+ \|\s*T.annotate_"
    with pytest.raises(UserError, match=message) as err:
        tilelang.compile(pipelined_gemm("too_many"), out_idx=[2], target="sm_90a")
    assert_points_at(err, "T.annotate_producer_reg_dealloc(40)")


def hand_written(inc=240, dec=24):
    """Two roles written by hand with T.inc_max_nreg / T.dec_max_nreg."""

    @T.prim_func
    def main(A: T.Tensor((256,), "float32")):
        with T.Kernel(1, threads=256):
            tx = T.get_thread_binding()
            if tx < 128:
                T.inc_max_nreg(inc)
                A[tx] = 1.0
            else:
                T.dec_max_nreg(dec)
                A[tx] = 2.0

    return main


def test_inc_and_dec_max_nreg():
    src = tilelang.compile(hand_written(), target="sm_90a").get_kernel_source()
    assert "tl::setmaxnreg_inc<240>();" in src and "tl::setmaxnreg_dec<24>();" in src
    with pytest.raises(UserError, match="multiple of 8"):  # raised at the call: the traceback shows the user's line
        T.inc_max_nreg(241)
    with pytest.raises(UserError, match=r"(?s)256 \+ 248 = 504 registers per thread, more than the 496") as err:
        tilelang.compile(hand_written(inc=256, dec=248), target="sm_90a")
    assert_points_at(err, "T.inc_max_nreg(inc)")


@pytest.mark.gpu
@pytest.mark.parametrize("hint", [None, "off", "counts"])
def test_pipelined_gemm_on_gpu(hint):
    kernel = tilelang.compile(pipelined_gemm(hint), out_idx=[2])
    a = torch.randn(512, 512, device="cuda", dtype=torch.float16)
    b = torch.randn(512, 512, device="cuda", dtype=torch.float16)
    torch.testing.assert_close(kernel(a, b), (a.float() @ b.float()).half(), rtol=1e-2, atol=1e-2)


@pytest.mark.gpu
def test_hand_written_roles_on_gpu():
    kernel = tilelang.compile(hand_written(), out_idx=[0])
    out = kernel()
    assert out[:128].eq(1).all() and out[128:].eq(2).all()

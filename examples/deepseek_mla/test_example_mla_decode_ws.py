"""Warp-specialized MLA decode example: main() against torch on the GPU (fp16, bf16, a batch
and length past the smallest, scores rising along the sequence so that the lazy max moves), and
its CUDA compiled by nvcc for sm_90a on any machine; other targets get an error naming the
Hopper-only primitives."""

import warnings

import example_mla_decode_ws
import pytest
import torch
from example_mla_decode import ref_program

import tilelang
from tilelang.codegen import cuda
from tilelang.errors import UserError
from tilelang.testing import assert_points_at


@pytest.mark.gpu
@pytest.mark.parametrize("dtype", ["float16", "bfloat16"])
def test_mla_decode_ws(dtype):
    example_mla_decode_ws.main(batch=2, seqlen_kv=1024, dtype=dtype)


@pytest.mark.gpu
def test_mla_decode_ws_longer():
    example_mla_decode_ws.main(batch=3, heads=128, seqlen_kv=2176)


@pytest.mark.gpu
@pytest.mark.parametrize("dtype", ["float16", "bfloat16"])
def test_mla_decode_ws_rising_scores(dtype):
    """Scores that climb along the sequence (by about 2^38 for the last head, less for
    the others): each row raises its lazy max, and rescales O, several times, at blocks that differ
    between the rows of one warp."""
    batch, heads, seqlen_kv = 2, 128, 1024
    tdt = getattr(torch, dtype)
    q = torch.randn(batch, heads, 512, device="cuda", dtype=tdt)
    kv = torch.randn(batch, seqlen_kv, 1, 512, device="cuda", dtype=tdt)
    slope = torch.arange(1, heads + 1, device="cuda") / heads  # per head
    ramp = torch.arange(seqlen_kv, device="cuda") * (10 / seqlen_kv)  # per key
    q_pe = (slope[None, :, None] + 0.1 * torch.randn(batch, heads, 64, device="cuda")).to(tdt)
    k_pe = (ramp[None, :, None, None] + 0.1 * torch.randn(batch, seqlen_kv, 1, 64, device="cuda")).to(tdt)
    kernel = example_mla_decode_ws.mla_decode_ws(batch, heads, seqlen_kv, dtype=dtype)
    out = kernel(q, q_pe, kv, k_pe)
    torch.testing.assert_close(out, ref_program(q, q_pe, kv, k_pe), rtol=1e-2, atol=1e-2)


def _compile(target, seqlen_kv=8192):
    f = example_mla_decode_ws.mla_decode_ws.factory(64, 128, seqlen_kv)
    return tilelang.compile(f, out_idx=[4], target=target, pass_configs={"tl.enable_fast_math": True})


def test_generated_cuda_compiles():
    src = _compile("sm_90a").get_kernel_source()
    # Three warpgroups: two consumers raising their registers, a producer lowering its own.
    assert src.count("tl::setmaxnreg_inc<240>();") == 2 and "tl::setmaxnreg_dec<24>();" in src
    assert "if (((int)threadIdx.x) < 128) {" in src and "if (((int)threadIdx.x) < 256) {" in src
    assert "__launch_bounds__(384, 1)" in src  # else ptxas may drop the setmaxnreg calls
    # The scores (rotary part from registers, the rest per 128-column part from shared) and both
    # kinds of P·V (own P from registers, the other warpgroup's from shared), per part.
    assert "tl::wgmma_rs<64, 64, 64," in src and src.count("tl::wgmma_ss<64, 64, 128,") == 8
    assert src.count("tl::wgmma_rs<64, 128, 64,") == 4 and src.count("tl::wgmma_ss<64, 128, 64,") == 4
    assert src.count("tl::tma_load(KV_tma") == 16  # 2 boxes per part, 4 parts, 2 blocks a pair
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # a setmaxnreg ignored by ptxas (C7508) fails the test
        cuda.compile_object(src, tilelang.utils.target.determine_target("sm_90a"))


def test_needs_hopper():
    with pytest.raises(UserError, match=r"need Hopper \(sm_90a\)") as err:
        _compile("sm_80")
    assert_points_at(err, "p_full = T.alloc_barrier([1, 1])")


def test_length_must_be_whole_pairs():
    with pytest.raises(AssertionError, match="multiple of 128"):
        _compile("sm_90a", seqlen_kv=8000)

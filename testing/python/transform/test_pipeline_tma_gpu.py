"""The sm_90a pipelines on the GPU: each combination of the Hopper switches computes the same GEMM,
at sizes that leave partial tiles (TMA zero-fills them), and flash attention with and without the
producer warpgroup."""

import os
import sys

import pytest
import torch

import tilelang

pytestmark = pytest.mark.gpu

_EXAMPLES = os.path.join(os.path.dirname(__file__), "..", "..", "..", "examples")
sys.path.insert(0, os.path.join(_EXAMPLES, "gemm"))
sys.path.insert(0, os.path.join(_EXAMPLES, "flash_attention"))
import example_gemm  # noqa: E402
import example_mha_fwd_bshd  # noqa: E402

SWITCHES = [
    {},
    {"tl.disable_warp_specialized": True},
    {"tl.disable_tma_lower": True},
    {"tl.disable_wgmma": True},
    {"tl.enable_tma_multicast": True},
]


@pytest.mark.parametrize("configs", SWITCHES)
@pytest.mark.parametrize("dtype", ["float16", "bfloat16"])
@pytest.mark.parametrize(
    "M,N,K,bm,bn,bk,threads,stages",
    [
        (1000, 1000, 1000, 128, 256, 64, 256, 4),
        (1000, 1000, 1000, 128, 256, 64, 256, 3),  # room for the C tile in shared memory (staged store)
        (256, 384, 200, 128, 128, 64, 128, 3),
    ],
)
def test_gemm_under_every_switch(configs, dtype, M, N, K, bm, bn, bk, threads, stages):
    func = example_gemm.matmul.factory(M, N, K, bm, bn, bk, dtype, "float", threads, stages)
    kernel = tilelang.compile(func, out_idx=[-1], pass_configs=configs)
    t = getattr(torch, dtype)
    a, b = torch.randn(M, K, device="cuda", dtype=t), torch.randn(K, N, device="cuda", dtype=t)
    c = kernel(a, b)
    ref = a.double() @ b.double()
    assert (c.double() - ref).norm() / ref.norm() < 1e-2


@pytest.mark.parametrize("configs", SWITCHES[:2] + SWITCHES[-1:])
@pytest.mark.parametrize("causal", [False, True])
def test_flash_attention_with_and_without_the_producer_warpgroup(configs, causal):
    B, H, S, D = 2, 4, 512, 128  # 4 query blocks: pairs of them share K and V with multicast
    func = example_mha_fwd_bshd.flashattn.factory(B, H, S, D, causal, 128, 64, 2, 256)
    kernel = tilelang.compile(func, out_idx=[3], pass_configs=configs)
    q, k, v = (torch.randn(B, S, H, D, device="cuda", dtype=torch.float16) for _ in range(3))
    out = kernel(q, k, v)
    ref = torch.nn.functional.scaled_dot_product_attention(
        q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2), is_causal=causal
    ).transpose(1, 2)
    torch.testing.assert_close(out, ref, rtol=1e-2, atol=1e-2)

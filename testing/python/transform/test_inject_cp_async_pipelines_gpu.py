"""A cp.async pipeline over a loop from a computed start sums the right tiles on the GPU
(test_inject_cp_async_pipelines.py's kernel, against torch)."""

import pytest
import torch
from test_inject_cp_async_pipelines import _from_start

import tilelang

pytestmark = pytest.mark.gpu


@pytest.mark.parametrize("stages", [2, 3])
def test_loop_from_a_start(stages):
    a = torch.randn(256, 64, device="cuda", dtype=torch.float16)
    kernel = tilelang.compile(_from_start(stages), out_idx=[1], pass_configs={"tl.disable_tma_lower": True})
    tiles = a.float().view(8, 32, 64)
    want = torch.stack([tiles[b * 2 :].sum(0) for b in range(4)])
    torch.testing.assert_close(kernel(a), want, rtol=1e-3, atol=1e-3)


@pytest.mark.parametrize("tma", [False, True])  # on Hopper: TMA loads by a producer warpgroup, or cp.async
@pytest.mark.parametrize("stages", [2, 3])
@pytest.mark.parametrize("density", [0.0, 0.5, 1.0])
def test_block_sparse_gemm(stages, density, tma):
    from test_inject_cp_async_pipelines import block_sparse_gemm

    a = torch.randn(128, 256, device="cuda", dtype=torch.float16)
    b = torch.randn(256, 128, device="cuda", dtype=torch.float16)
    mask = torch.rand(8, device="cuda") < density
    configs = {"tl.disable_tma_lower": not tma, "tl.check_barrier_protocol": True}
    kernel = tilelang.compile(block_sparse_gemm(stages), out_idx=[3], pass_configs=configs)
    keep = mask.repeat_interleave(32).half()
    want = (a * keep).float() @ b.float()
    torch.testing.assert_close(kernel(a, b, mask), want, rtol=1e-2, atol=1e-2)

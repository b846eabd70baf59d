"""Linear attention and gated delta rule examples: each main() against torch on the GPU and on the CPU
target (small sizes, lengths that are not a multiple of the chunk among them), the torch references
against each other, and the generated CUDA compiled by nvcc for sm_80 and sm_90a on any machine."""

import example_gated_delta_rule_fwd
import example_linear_attn_fwd
import pytest
import torch

import tilelang
from tilelang.codegen import cuda


@pytest.mark.gpu
@pytest.mark.parametrize("decay", [None, "head", "token"])
@pytest.mark.parametrize("dtype", ["float16", "bfloat16"])
@pytest.mark.parametrize(
    "seq_len,dim_k,dim_v,block_V,num_stages,threads",
    [
        (256, 64, 64, 64, 2, 128),
        (200, 64, 64, 64, 2, 128),  # a partial last chunk
        (1000, 128, 128, 64, 2, 128),
        (333, 128, 64, 32, 1, 128),
        (512, 128, 128, 128, 2, 128),  # the whole of V per block
    ],
)
def test_linear_attn_fwd(decay, dtype, seq_len, dim_k, dim_v, block_V, num_stages, threads):
    example_linear_attn_fwd.main(2, 3, seq_len, dim_k, dim_v, decay, dtype, 64, block_V, num_stages, threads)


@pytest.mark.parametrize(
    "decay,dtype,seq_len,dim_k,dim_v",
    [
        (None, "float16", 200, 64, 64),  # a partial last chunk
        ("head", "float16", 128, 64, 64),
        ("token", "float16", 200, 64, 64),
        ("token", "bfloat16", 130, 128, 128),  # two value blocks, a 2-token last chunk
    ],
)
def test_linear_attn_fwd_on_the_cpu(decay, dtype, seq_len, dim_k, dim_v):
    example_linear_attn_fwd.main(1, 2, seq_len, dim_k, dim_v, decay, dtype, device="cpu")


@pytest.mark.parametrize("decay", [None, "head", "token"])
def test_references_agree(decay):
    """The quadratic form the GPU tests check long sequences with, and the chunked form the benchmark
    times, equal the token recurrence (float32, a partial last chunk)."""
    Q, K, V, G = example_linear_attn_fwd.make_inputs(2, 3, 150, 32, 16, decay, "float32", "cpu")
    recurrent = example_linear_attn_fwd.ref_recurrent(Q, K, V, G)
    for ref in (example_linear_attn_fwd.ref_quadratic, example_linear_attn_fwd.ref_chunked):
        torch.testing.assert_close(ref(Q, K, V, G), recurrent, rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("arch", ["sm_80", "sm_90a"])
@pytest.mark.parametrize("decay", [None, "head", "token"])
def test_generated_cuda_compiles(arch, decay):
    """The benchmark's size (b8 h32 s4096, d128) through nvcc."""
    f = example_linear_attn_fwd.linear_attn_fwd.factory(8, 32, 4096, 128, 128, decay)
    k = tilelang.compile(f, out_idx=[-1], target=arch, pass_configs={"tl.enable_fast_math": True})
    src = k.get_kernel_source()
    gemm = "tl::wgmma_" if arch == "sm_90a" else "tl::gemm_"  # Hopper's warpgroup MMA, else mma.sync
    # Q·Kᵀ, Q·S and Kᵀ·V from shared memory; A·V with the masked scores A in registers.
    assert gemm + "ss<" in src and gemm + "rs<" in src
    if arch == "sm_90a":  # Q, K, V (and the gates) loaded by TMA from a producer warpgroup
        assert "tl::tma_load" in src and "tl::setmaxnreg_dec" in src
    else:  # the next chunk prefetched while this one computes
        assert "tl::cp_async" in src
    cuda.compile_object(src, k.target, fast_math=True)


@pytest.mark.gpu
@pytest.mark.parametrize("dtype", ["float16", "bfloat16"])
@pytest.mark.parametrize(
    "seq_len,dim_k,dim_v,block_V,num_stages",
    [(256, 64, 64, 64, 1), (200, 64, 64, 64, 2), (1000, 128, 128, 64, 1), (333, 128, 64, 32, 2)],
)
def test_gated_delta_rule_fwd(dtype, seq_len, dim_k, dim_v, block_V, num_stages):
    example_gated_delta_rule_fwd.main(2, 3, seq_len, dim_k, dim_v, dtype, 64, block_V, num_stages)


@pytest.mark.parametrize(
    "dtype,seq_len,dim_k,dim_v", [("float16", 200, 64, 64), ("bfloat16", 130, 128, 128), ("float16", 64, 128, 64)]
)
def test_gated_delta_rule_fwd_on_the_cpu(dtype, seq_len, dim_k, dim_v):
    example_gated_delta_rule_fwd.main(1, 2, seq_len, dim_k, dim_v, dtype, device="cpu")


def test_gated_delta_rule_references_agree():
    """The chunked form (triangular solves) equals the token recurrence (float32, a partial last chunk)."""
    inputs = example_gated_delta_rule_fwd.make_inputs(2, 3, 150, 32, 16, "float32", "cpu")
    torch.testing.assert_close(
        example_gated_delta_rule_fwd.ref_chunked(*inputs),
        example_gated_delta_rule_fwd.ref_recurrent(*inputs),
        rtol=1e-4,
        atol=1e-4,
    )


@pytest.mark.parametrize("arch", ["sm_80", "sm_90a"])
@pytest.mark.parametrize("dim,num_stages", [(128, 1), (64, 2)])
def test_gated_delta_rule_generated_cuda_compiles(arch, dim, num_stages):
    gdn = example_gated_delta_rule_fwd
    prepare = gdn.gdn_prepare.factory(8, 32, 4096, dim, dim, "float16", None, 64)
    recurrence = gdn.gdn_recurrence.factory(8, 32, 4096, dim, dim, "float16", None, 64, 64, num_stages)
    gemm = "tl::wgmma_" if arch == "sm_90a" else "tl::gemm_"
    for f, out_idx in ((prepare, None), (recurrence, [-1])):
        k = tilelang.compile(f, out_idx=out_idx, target=arch, pass_configs={"tl.enable_fast_math": True})
        src = k.get_kernel_source()
        if f is prepare:  # Q·Kᵀ and K·Kᵀ from shared memory; T from registers
            assert gemm + "ss<" in src and gemm + "rs<" in src and "for (int m2 = 0; m2 < 32; ++m2)" in src
        else:  # only matrix products along the chunks: no substitution
            assert gemm + "ss<" in src and "m2" not in src
            if arch == "sm_90a":  # the chunk's tiles loaded by TMA from a producer warpgroup
                assert "tl::tma_load" in src and "tl::setmaxnreg_dec" in src
        cuda.compile_object(src, k.target, fast_math=True)

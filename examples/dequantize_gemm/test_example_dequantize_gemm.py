"""int4 weight-only GEMM examples: main() against torch on the GPU (small sizes, partial tiles), the
generated CUDA of both kernels checked and compiled by nvcc for sm_80 and sm_90a, and the CPU target's
numbers (the last two on any machine)."""

import example_dequantize_gemm as example
import pytest
import torch
from quant_common import GROUP, dequantize, quantize

import tilelang
from tilelang.codegen import cuda


@pytest.mark.gpu
@pytest.mark.parametrize("has_zeros", [True, False])
@pytest.mark.parametrize(
    "M,N,K",
    [
        (1, 4096, 4096),
        (1, 1000, 1152),  # a partial block of rows, a K step past K
        (5, 300, 2048),
        (16, 4096, 14336),
        (200, 1000, 512),  # partial tiles in M and N
        (256, 4096, 4096),
    ],
)
def test_dequantize_gemm(M, N, K, has_zeros):
    example.main(M, N, K, has_zeros)


@pytest.mark.parametrize("has_zeros", [True, False])
def test_quantize_round_trip(has_zeros):
    # Each weight comes back within half a step of its group's grid (plus the fp16 rounding of the
    # scale); symmetric codes quantize back to themselves. (Asymmetric ones need not: the min and max
    # of the dequantized group can pick another zero point.)
    torch.manual_seed(0)
    W = torch.randn(24, 512, dtype=torch.float16)
    packed, scales, zeros = quantize(W, has_zeros)
    err = (dequantize(packed, scales, zeros) - W.float()).abs().view(24, -1, GROUP)
    assert bool((err <= 0.51 * scales.float().unsqueeze(-1)).all())
    assert (zeros is None) == (not has_zeros)
    if not has_zeros:
        again = quantize(dequantize(packed, scales, zeros).half(), has_zeros)
        assert torch.equal(again[0], packed) and torch.equal(again[1], scales)


@pytest.mark.parametrize(
    "M,N,K,has_zeros",
    [(1, 200, 1024, True), (5, 77, 1152, False), (16, 40, 384, True), (200, 136, 256, True), (130, 72, 384, False)],
)
def test_on_the_cpu(M, N, K, has_zeros):
    example.main(M, N, K, has_zeros, device="cpu")


def _compiled_source(func, arch):
    kernel = tilelang.compile(func, out_idx=[-1], target=arch)
    src = kernel.get_kernel_source()
    cuda.compile_object(src, kernel.target, host_src=kernel.host_source)
    return src


@pytest.mark.parametrize("arch", ["sm_80", "sm_90a"])
def test_gemv_generated_cuda(arch):
    src = _compiled_source(example.dequant_gemv.factory(4, 4096, 4096), arch)
    # Eight 32-bit words of W a lane (each 128 contiguous bytes a warp), A's 8 columns of a word in one
    # 128-bit load.
    assert "word_ptr[7] = W_ptr[" in src and "*(uint4*)(a_ptr + 0) = *(uint4*)(A_ptr + " in src
    # Codes made floats by the exponent trick: no int-to-float conversion of a code.
    assert "| 1258291200" in src and "(float)((word" not in src
    # The 32 lanes of a row folded by warp shuffles.
    assert "tl::shfl_xor" in src


@pytest.mark.parametrize("arch", ["sm_80", "sm_90a"])
def test_gemm_generated_cuda(arch):
    src = _compiled_source(example.dequant_gemm.factory(4096, 4096, 4096), arch)
    # fp16 codes by the exponent trick (0x6400 | q), in fp16 math.
    assert "(ushort)25600" in src and "half2 v__" in src
    if arch == "sm_80":
        assert "tl::cp_async<16>" in src and "tl::gemm_ss<128, 128, 64," in src
        # One barrier after the packed tile lands, one before and one after the fp16 tile's stores.
        loop = src[src.index("for (int k = 0;") :]
        assert loop[: loop.index("tl::gemm_ss")].count("__syncthreads();") == 3
    else:
        assert "tl::tma_load" in src and "tl::wgmma_ss<128, 128, 64," in src


def test_symmetric_kernel_reads_no_zeros():
    src = tilelang.compile(example.dequant_gemv.factory(1, 256, 1024, has_zeros=False), target="sm_80")
    assert "zeros_ptr[" not in src.get_kernel_source()

"""MLA decode example: main() against torch on the GPU (no split and split + combine, fp16 and
bf16), and the generated CUDA compiled by nvcc for sm_80 and sm_90a on any machine."""

import example_mla_decode
import pytest

import tilelang
from tilelang.codegen import cuda


@pytest.mark.gpu
@pytest.mark.parametrize("dtype", ["float16", "bfloat16"])
@pytest.mark.parametrize("num_split", [1, 4])
def test_mla_decode(dtype, num_split):
    example_mla_decode.main(batch=2, seqlen_kv=1024, num_split=num_split, dtype=dtype)


@pytest.mark.parametrize("arch", ["sm_80", "sm_90a"])
def test_generated_cuda_compiles(arch):
    # sm_80 has 163 KiB of shared memory per block, not 227: smaller blocks, on 4 warps (the
    # `if tx < 128` branch then spans the whole block and disappears).
    block, threads = (64, 256) if arch == "sm_90a" else (32, 128)
    f = example_mla_decode.mla_decode.factory(64, 128, 1, 8192, 512, 64, block, block, 4, "float16", threads)
    k = tilelang.compile(f, out_idx=[6], target=arch)
    src = k.get_kernel_source()
    assert src.count("__global__") == 4  # split and combine kernels (declaration + definition each)
    assert ("tl::wgmma_ss<" if arch == "sm_90a" else "tl::gemm_ss<") in src
    if arch == "sm_90a":  # the scores: one warpgroup's 64x64 gemm, in the first warpgroup's branch
        assert "if (((int)threadIdx.x) < 128) {" in src and "tl::wgmma_ss<64, 64, 512, 1, 1," in src
    cuda.compile_object(src, k.target)

"""Top-k and MoE routing examples: each main() against torch on the GPU (small sizes, partial row
blocks, rows not a power of two), the generated CUDA checked and compiled by nvcc for sm_80 and
sm_90a on any machine, and the numbers on the CPU target."""

import example_moe_routing
import example_topk
import pytest
import torch

import tilelang
from tilelang.codegen import cuda


@pytest.mark.gpu
@pytest.mark.parametrize(
    "M,N,k,rows,threads,split,dtype",
    [
        (1000, 256, 8, 4, 128, 1, "float32"),  # a router's row on each warp; a partial last block of rows
        (1001, 100, 5, 2, 64, 1, "float16"),  # a row that is not a power of two
        (300, 4096, 8, 1, 256, 1, "float32"),
        (77, 32768, 8, 1, 1024, 1, "float16"),  # a vocabulary-sized row, 32 entries a thread
        (77, 32768, 8, 1, 256, 8, "float32"),  # the same row in 8 parts, then the merge kernel
        (50, 3000, 16, 1, 128, 3, "float32"),  # parts of 1024 columns, the last one short
        (64, 64, 1, 8, 256, 1, "float32"),  # k = 1: an arg-max
    ],
)
def test_topk(M, N, k, rows, threads, split, dtype):
    example_topk.main(M, N, k, rows, threads, split, dtype)


@pytest.mark.gpu
@pytest.mark.parametrize("renormalize", [True, False])
@pytest.mark.parametrize(
    "M,E,k,rows,threads,dtype",
    [
        (1000, 256, 8, 4, 128, "float32"),
        (1001, 64, 2, 8, 256, "float16"),
        (333, 128, 6, 4, 128, "float32"),
        (100, 160, 6, 2, 64, "float32"),  # experts not a power of two: the last thread's entries pass the end
    ],
)
def test_moe_routing(M, E, k, rows, threads, renormalize, dtype):
    example_moe_routing.main(M, E, k, rows, threads, renormalize, dtype)


def _compiled_source(func, arch):
    kernel = tilelang.compile(func, out_idx=[-2, -1], target=arch)
    src = kernel.get_kernel_source()
    cuda.compile_object(src, kernel.target, host_src=kernel.host_source)
    return src


@pytest.mark.parametrize("arch", ["sm_80", "sm_90a"])
def test_topk_generated_cuda(arch):
    src = _compiled_source(example_topk.topk.factory(4096, 256, 8, 4, 128), arch)
    # Each row on one warp: a round is one butterfly of 64-bit keys, no shared memory, no barrier.
    assert "int64_t best_partial_ptr[1];" in src and "tl::shfl_xor(best_partial_ptr[0], 16)" in src
    assert "__syncthreads" not in src
    # The entries stay in registers (unrolled: no dynamically indexed local array).
    assert "int ord__local_ptr[8];" in src and "ord__local_ptr[e]" not in src


@pytest.mark.parametrize("arch", ["sm_80", "sm_90a"])
def test_topk_vocabulary_row_generated_cuda(arch):
    # One 32768-wide row on 1024 threads: shuffles inside each warp, then the 32 warps through shared memory.
    src = _compiled_source(example_topk.topk.factory(4096, 32768, 8, 1, 1024, dtype="float16"), arch)
    assert "int ord__local_ptr[32];" in src and "tl::shfl_xor" in src and "__syncthreads" in src


@pytest.mark.parametrize("arch", ["sm_80", "sm_90a"])
def test_topk_split_row_generated_cuda(arch):
    # A row in 8 parts of 4096 columns (16 entries on each of 256 threads), then a merge kernel.
    src = _compiled_source(example_topk.topk.factory(4096, 32768, 8, 1, 256, 8), arch)
    assert src.count("__global__") == 4 and "int ord__local_ptr[16];" in src


@pytest.mark.parametrize("renormalize", [True, False])
@pytest.mark.parametrize("arch", ["sm_80", "sm_90a"])
def test_moe_routing_generated_cuda(arch, renormalize):
    src = _compiled_source(example_moe_routing.moe_routing.factory(4096, 256, 8, 4, 128, renormalize), arch)
    assert "tl::shfl_xor(best_partial_ptr[0], 16)" in src
    # Only the not-renormalized router sums exp over the whole row.
    assert ("exps_local_ptr" in src) == (not renormalize)


def test_topk_on_the_cpu():
    example_topk.main(M=37, N=1000, k=5, rows=2, threads=64, device="cpu")
    example_topk.main(M=9, N=300, k=16, rows=1, threads=32, dtype="float16", device="cpu")
    example_topk.main(M=9, N=1000, k=5, rows=1, threads=64, split=3, device="cpu")


@pytest.mark.parametrize("renormalize", [True, False])
def test_moe_routing_on_the_cpu(renormalize):
    example_moe_routing.main(M=37, E=100, k=6, rows=2, threads=64, renormalize=renormalize, device="cpu")


def test_topk_nan_and_infinities_on_the_cpu():
    # torch.topk ranks a NaN (of either sign) above +inf, and -inf below every number.
    with tilelang.use_target("cpu"):
        X = torch.randn(4, 100)
        X[0, 7], X[1, 9], X[2, 3], X[3, 5] = float("nan"), -float("nan"), float("inf"), -float("inf")
        X[3] = -float("inf")
        X[3, 50] = 0.0
        values, indices = example_topk.topk(4, 100, 3, 1, 32)(X)
    ref_values, _ = torch.topk(X, 3)
    torch.testing.assert_close(values, ref_values, rtol=0, atol=0, equal_nan=True)
    assert indices[:, 0].tolist() == [7, 9, 3, 50] and indices[3, 1:].tolist() == [0, 1]

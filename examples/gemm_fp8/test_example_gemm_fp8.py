"""fp8 GEMM examples: each main() against an fp32 torch reference on the GPU (small sizes), and the
generated CUDA through nvcc on any machine: wgmma on e4m3 operands for sm_90a, fp8 mma.sync for
sm_89."""

import os
import re
import subprocess
import tempfile

import example_gemm_fp8
import example_gemm_fp8_blockscale
import pytest

import tilelang
from tilelang import env
from tilelang.codegen import cuda
from tilelang.testing import requires_cuda_compute_version_ge

# The tolerances are fp8_quant.assert_close's (its docstring says why): both mains check with it.


@pytest.mark.gpu
@requires_cuda_compute_version_ge(9, 0)  # Hopper's tiles (Ada runs fp8 too, with less shared memory)
@pytest.mark.parametrize(
    "M,N,K,block_M,block_N,block_K,threads,stages,out_dtype",
    [
        (512, 512, 512, 128, 256, 128, 256, 3, "bfloat16"),  # the benchmark's tile
        (1000, 1000, 1000, 128, 256, 128, 256, 3, "bfloat16"),  # partial tiles; rows not 16-byte aligned
        (256, 384, 640, 128, 128, 128, 256, 4, "float16"),
        (384, 256, 512, 128, 128, 64, 128, 3, "bfloat16"),  # one consumer warpgroup, 64-byte rows
    ],
)
def test_gemm_fp8(M, N, K, block_M, block_N, block_K, threads, stages, out_dtype):
    example_gemm_fp8.main(M, N, K, block_M, block_N, block_K, threads, stages, out_dtype)


@pytest.mark.gpu
@requires_cuda_compute_version_ge(9, 0)
@pytest.mark.parametrize(
    "M,N,K,stages",
    [
        (1024, 1024, 512, 4),  # fewer tiles than SMs: one tile per block
        (4096, 4096, 512, 3),  # several tiles per block, the loads running on into the next tile
        (1000, 1000, 1000, 3),  # partial tiles
    ],
)
def test_gemm_fp8_persistent(M, N, K, stages):
    example_gemm_fp8.main(M, N, K, 128, 256, 128, 256, stages, "bfloat16", persistent=True)


@pytest.mark.gpu
@requires_cuda_compute_version_ge(9, 0)
@pytest.mark.parametrize(
    "M,N,K,block_M,block_N,threads,stages,out_dtype",
    [
        (512, 512, 512, 128, 128, 256, 4, "bfloat16"),  # the benchmark's tile
        (1000, 1000, 1000, 128, 128, 256, 4, "bfloat16"),  # partial tiles and a partial last K block
        (256, 384, 1024, 128, 64, 256, 3, "float16"),  # two column blocks per B scale block
        (256, 512, 768, 64, 256, 256, 3, "bfloat16"),  # two B scale blocks per column block
        (384, 256, 512, 192, 128, 384, 3, "bfloat16"),  # three consumer warpgroups
    ],
)
def test_gemm_fp8_blockscale(M, N, K, block_M, block_N, threads, stages, out_dtype):
    example_gemm_fp8_blockscale.main(M, N, K, block_M, block_N, threads, stages, out_dtype)


# ---- generated CUDA, nvcc, PTX (no GPU) -------------------------------------------------------------


def _ptx(kernel):
    """The PTX nvcc makes of a kernel's generated device source (and the source compiles)."""
    with tempfile.TemporaryDirectory() as tmp:
        cu, ptx = os.path.join(tmp, "k.cu"), os.path.join(tmp, "k.ptx")
        with open(cu, "w") as f:
            f.write(kernel.get_kernel_source())
        cmd = [env.nvcc_path(), *cuda.nvcc_flags(kernel.target), "-ptx", "-o", ptx, cu]
        subprocess.run(cmd, check=True, capture_output=True)
        with open(ptx) as f:
            return f.read()


def _mma_instructions(ptx):
    return sorted(set(re.findall(r"(wgmma\.mma_async\.\S+|mma\.sync\.\S+)", ptx)))


def test_per_tensor_sm90a_is_wgmma_on_e4m3_fed_by_tma():
    f = example_gemm_fp8.gemm_fp8.factory(4096, 4096, 4096, 128, 256, 128, "bfloat16", 256, 3)
    k = tilelang.compile(f, out_idx=[-1], target="sm_90a")
    src = k.get_kernel_source()
    assert "tl::wgmma_ss<128, 256, 128" in src and "__nv_fp8_e4m3" in src
    assert "tl::tma_load(A_tma" in src and "tl::tma_load(B_tma" in src and "tl::setmaxnreg_dec" in src
    # Two consumer warpgroups of 64 rows, each one m64n256k32 instruction per 32 of K.
    assert _mma_instructions(_ptx(k)) == ["wgmma.mma_async.sync.aligned.m64n256k32.f32.e4m3.e4m3"]


def test_persistent_runs_its_producer_into_the_next_tile():
    f = example_gemm_fp8.gemm_fp8_persistent.factory(4096, 4096, 4096, 132, 128, 256, 128, "bfloat16", 256, 4)
    k = tilelang.compile(f, out_idx=[-1], target="sm_90a")
    src = k.get_kernel_source()
    # Stages and barrier phases continue from one tile to the next (the runs counted so far).
    assert "k_consumer_runs" in src and "k_producer_runs" in src and "tl::setmaxnreg_dec" in src
    assert _mma_instructions(_ptx(k)) == ["wgmma.mma_async.sync.aligned.m64n256k32.f32.e4m3.e4m3"]
    # The protocol checked warp by warp at a small size: 12 tiles over 5 blocks.
    f = example_gemm_fp8.gemm_fp8_persistent.factory(512, 768, 384, 5, 128, 256, 128, "bfloat16", 256, 3)
    tilelang.compile(f, out_idx=[-1], target="sm_90a", pass_configs={"tl.check_barrier_protocol": True})


def test_per_tensor_sm89_is_fp8_mma_sync():
    # Ada has fp8 tensor cores without wgmma: mma.sync m16n8k32 on e4m3, cp.async copies.
    f = example_gemm_fp8.gemm_fp8.factory(4096, 4096, 4096, 128, 128, 64, "bfloat16", 128, 3)
    k = tilelang.compile(f, out_idx=[-1], target="sm_89")
    src = k.get_kernel_source()
    assert "tl::gemm_ss<128, 128, 64" in src and "tl::cp_async" in src
    assert _mma_instructions(_ptx(k)) == ["mma.sync.aligned.m16n8k32.row.col.f32.e4m3.e4m3.f32"]


def test_blockscale_sm90a_promotes_each_k_block():
    f = example_gemm_fp8_blockscale.gemm_fp8_blockscale.factory(4096, 4096, 4096, 128, 128, "bfloat16", 256, 4)
    k = tilelang.compile(f, out_idx=[-1], target="sm_90a")
    src = k.get_kernel_source()
    # The K block's product starts from zero (the wgmma's scale-d off: clear_accum) ...
    assert re.search(r"tl::wgmma_ss<128, 128, 128, 2, 1, false, true, true,", src)
    # ... and is waited for before its promotion into the second accumulator.
    body = src[src.index("tl::wgmma_ss<") :]
    # (The promotion runs two columns at a time: one B scale per 128 columns, the same for both.)
    assert body.index("tl::wgmma_wait<0>();") < body.index("C_local_local_ptr[r_1] = __1;")
    # The two consumer warpgroups take turns issuing their products: one promotes while the other multiplies.
    assert "tl::pingpong_sync();" in src and "tl::pingpong_arrive();" in src
    # The A scales come by TMA with each stage; the B scales of the block's columns once.
    assert "tl::tma_load(scales_a_tma" in src and "tl::tma_load(scales_b_tma" in src
    assert _mma_instructions(_ptx(k)) == ["wgmma.mma_async.sync.aligned.m64n128k32.f32.e4m3.e4m3"]


def test_blockscale_sm89_is_fp8_mma_sync():
    # The same kernel on Ada: mma.sync products, promoted the same way, cp.async copies.
    f = example_gemm_fp8_blockscale.gemm_fp8_blockscale.factory(4096, 4096, 4096, 128, 128, "bfloat16", 256, 3)
    k = tilelang.compile(f, out_idx=[-1], target="sm_89")
    src = k.get_kernel_source()
    assert "tl::gemm_ss<128, 128, 128" in src and "tl::cp_async" in src
    assert _mma_instructions(_ptx(k)) == ["mma.sync.aligned.m16n8k32.row.col.f32.e4m3.e4m3.f32"]


def test_blockscale_barrier_protocol():
    # The warp-specialized pipeline with the extra per-stage A-scale load and the B scales' own
    # barrier, run warp by warp on the CPU: no deadlock, no stage refilled while read.
    f = example_gemm_fp8_blockscale.gemm_fp8_blockscale.factory(256, 256, 640, 128, 128, "bfloat16", 256, 3)
    tilelang.compile(f, out_idx=[-1], target="sm_90a", pass_configs={"tl.check_barrier_protocol": True})


def test_blockscale_refuses_tiles_straddling_a_scale_block():
    with pytest.raises(AssertionError, match="block_N = 192 straddles"):
        example_gemm_fp8_blockscale.gemm_fp8_blockscale.factory(512, 512, 512, 128, 192)

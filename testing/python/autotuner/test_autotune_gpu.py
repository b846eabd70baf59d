"""Autotuning GEMMs on the GPU: parallel compiles, reference checks, real timings, the tuning cache in a
second process; supply_prog, manual_check_prog, early_stop, set_autotune_inputs, the AutoTuner API
and an eager kernel (skipped without a GPU)."""

import os
import subprocess
import sys
import textwrap

import pytest
import torch

import tilelang
import tilelang.language as T
from tilelang import cache
from tilelang.autotuner import AutoTuner, set_autotune_inputs

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "..", "..", "examples", "gemm"))
import example_gemm  # noqa: E402

pytestmark = pytest.mark.gpu

CONFIGS = [
    {"block_M": bm, "block_N": bn, "block_K": 32, "num_stages": stages}
    for bm in (64, 128)
    for bn in (64, 128)
    for stages in (2, 3)
]
# Four stages of 256 x 128 tiles of A and B need 512 KiB of shared memory: rejected when compiled.
TOO_BIG = {"block_M": 256, "block_N": 256, "block_K": 128, "num_stages": 4}


def reference(A, B):
    return A @ B


def no_bench(profiler, func, inputs, baseline):
    raise AssertionError("the tuning cache should have answered without timing anything")


def make_tuner(bench=None):
    return tilelang.autotune(
        configs=[*CONFIGS, TOO_BIG], ref_prog=reference, atol=1e-1, warmup=5, rep=20, _bench=bench
    )(example_gemm.matmul)


def test_autotune_the_example_gemm(tmp_path, monkeypatch, caplog):
    monkeypatch.setenv("TILELANG_CACHE_DIR", str(tmp_path))  # cold: every configuration compiles
    kernel = make_tuner()(1024, 1024, 1024)
    assert kernel.config in CONFIGS and 0 < kernel.latency < 5 and 0 < kernel.ref_latency < 5
    assert "skipped 1 of 9 configurations" in caplog.text and str(TOO_BIG) in caplog.text
    A = torch.randn(1024, 1024, device="cuda", dtype=torch.float16)
    B = torch.randn(1024, 1024, device="cuda", dtype=torch.float16)
    torch.testing.assert_close(kernel(A, B), A @ B, rtol=1e-2, atol=1e-1)

    code = textwrap.dedent(f"""
        import sys; sys.path.insert(0, {HERE!r}); sys.path.insert(0, {os.getcwd()!r})
        import test_autotune_gpu, tilelang.cache
        tilelang.cache.compiler_fingerprint = lambda: {cache.compiler_fingerprint()!r}
        kernel = test_autotune_gpu.make_tuner(test_autotune_gpu.no_bench)(1024, 1024, 1024)
        print("best", kernel.config)
    """)
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=dict(os.environ))
    assert out.returncode == 0, out.stderr[-3000:]
    assert f"best {kernel.config}" in out.stdout


def test_supply_prog_manual_check_prog_and_early_stop(tmp_path, monkeypatch, caplog):
    """Small-valued inputs from supply_prog, a check that the user writes, and early stop: each
    configuration after the first is timed against twice the best so far."""
    monkeypatch.setenv("TILELANG_CACHE_DIR", str(tmp_path))
    supplied, judged, timed = [], [], []

    def supply_prog(params):
        supplied.append([(p.name, tuple(p.shape)) for p in params])
        return [torch.randn(tuple(p.shape), device="cuda").div(8).half() for p in params]

    def manual_check_prog(outputs, expected):
        judged.append(1)
        torch.testing.assert_close(outputs[0], expected[0], rtol=1e-2, atol=1e-2)

    def bench(profiler, func, inputs, baseline):
        ms = profiler.do_bench(func, n_warmup=5, n_repeat=20, input_tensors=inputs, early_stop_baseline=baseline)
        timed.append((profiler.kernel.config, baseline, ms))
        return ms

    # Small tiles with one stage are slower than 128 x 128 ones on 2048^3.
    configs = [
        {"block_M": 128, "block_N": 128, "block_K": 32, "num_stages": 3},
        {"block_M": 32, "block_N": 32, "block_K": 32, "num_stages": 1},
        {"block_M": 64, "block_N": 64, "block_K": 32, "num_stages": 2},
    ]
    tuned = tilelang.autotune(
        configs=configs,
        ref_prog=reference,
        supply_prog=supply_prog,
        manual_check_prog=manual_check_prog,
        early_stop=True,
        early_stop_factor=2.0,
        _bench=bench,
    )(example_gemm.matmul)
    kernel = tuned(2048, 2048, 2048)
    assert kernel.config != configs[1] and supplied[0] == [("A", (2048, 2048)), ("B", (2048, 2048))]
    assert len(judged) == 3 and [t[0] for t in timed[:3]] == configs  # the fourth timing is the reference
    assert timed[0][1] is None and timed[1][1] == pytest.approx(2 * timed[0][2])
    assert timed[2][1] == pytest.approx(2 * min(timed[0][2], timed[1][2]))


def test_the_autotuner_api_with_inputs_set_and_cupti(tmp_path, monkeypatch):
    """AutoTuner.from_kernel over a function returning a prim_func, under set_autotune_inputs, timed
    with the cupti backend; the result's kernel computes the product."""
    monkeypatch.setenv("TILELANG_CACHE_DIR", str(tmp_path))
    M = N = K = 1024

    def kernel(block_M=None, block_N=None, num_stages=None):
        return example_gemm.matmul.factory(M, N, K, block_M, block_N, 32, num_stages=num_stages)

    configs = [{"block_M": 128, "block_N": 128, "num_stages": 3}, {"block_M": 64, "block_N": 128, "num_stages": 2}]
    A = torch.randn(M, K, device="cuda", dtype=torch.float16)
    B = torch.randn(K, N, device="cuda", dtype=torch.float16)
    with set_autotune_inputs(A, B):
        result = (
            AutoTuner.from_kernel(kernel=kernel, configs=configs)
            .set_compile_args(out_idx=[-1], target="auto")
            .set_profile_args(ref_prog=reference, atol=1e-1, backend="cupti")
            .run(warmup=3, rep=20)
        )
    assert result.config in configs and 0 < result.latency < 5 and 0 < result.ref_latency < 5
    torch.testing.assert_close(result.kernel(A, B), A @ B, rtol=1e-2, atol=1e-1)


@tilelang.jit
def eager_gemm(A, B, block_M=128, block_N=128, block_K=32):
    M, N, K = T.const("M, N, K")
    A: T.Tensor((M, K), "float16")
    B: T.Tensor((K, N), "float16")
    C = T.empty((M, N), "float16")
    with T.Kernel(T.ceildiv(N, block_N), T.ceildiv(M, block_M), threads=128) as (bx, by):
        A_shared = T.alloc_shared((block_M, block_K), "float16")
        B_shared = T.alloc_shared((block_K, block_N), "float16")
        C_local = T.alloc_fragment((block_M, block_N), "float")
        T.clear(C_local)
        for k in T.Pipelined(T.ceildiv(K, block_K), num_stages=2):
            T.copy(A[by * block_M, k * block_K], A_shared)
            T.copy(B[k * block_K, bx * block_N], B_shared)
            T.gemm(A_shared, B_shared, C_local)
        T.copy(C_local, C[by * block_M, bx * block_N])
    return C


def test_an_eager_kernel_tuned_and_run_on_the_call_tensors(tmp_path, monkeypatch):
    monkeypatch.setenv("TILELANG_CACHE_DIR", str(tmp_path))
    tuned = tilelang.autotune(
        configs=[{"block_M": 64, "block_N": 64}, {"block_M": 128, "block_N": 128}], ref_prog=reference, atol=1e-1
    )(eager_gemm)
    A = torch.randn(512, 256, device="cuda", dtype=torch.float16)
    B = torch.randn(256, 384, device="cuda", dtype=torch.float16)
    torch.testing.assert_close(tuned(A, B), A @ B, rtol=1e-2, atol=1e-1)
    kernel = tuned.compile(M=512, N=384, K=256)
    assert kernel.config in ({"block_M": 64, "block_N": 64}, {"block_M": 128, "block_N": 128})
    assert kernel.latency > 0

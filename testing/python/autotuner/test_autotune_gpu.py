"""Autotuning the example GEMM on the GPU: parallel compiles, reference checks, real timings, and the
tuning cache in a second process (skipped without a GPU)."""

import os
import subprocess
import sys
import textwrap

import pytest
import torch

import tilelang
from tilelang import cache

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


def no_bench(profiler, func):
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

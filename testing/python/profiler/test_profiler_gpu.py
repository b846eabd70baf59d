"""The profiler on a real kernel: assert_allclose against torch, and timings (skipped without a GPU)."""

import pytest
import torch

import tilelang
import tilelang.language as T
from tilelang.profiler import do_bench

pytestmark = pytest.mark.gpu


@tilelang.jit(out_idx=[-1])
def axpy(N, alpha=2.0, dtype="float16"):
    @T.prim_func
    def main(X: T.Tensor((N,), dtype), Y: T.Tensor((N,), dtype), Z: T.Tensor((N,), dtype)):
        with T.Kernel(T.ceildiv(N, 256), threads=256) as bx:
            for i in T.Parallel(256):
                Z[bx * 256 + i] = X[bx * 256 + i] * alpha + Y[bx * 256 + i]

    return main


@pytest.mark.parametrize("dtype", ["float16", "bfloat16", "float32"])
def test_assert_allclose_on_a_real_kernel(dtype):
    profiler = axpy(1 << 20, dtype=dtype).get_profiler(tilelang.TensorSupplyType.Randn)
    profiler.assert_allclose(lambda x, y: x.float() * 2 + y.float(), rtol=1e-2, atol=1e-2)
    with pytest.raises(AssertionError, match="output 'Z' differs"):
        profiler.assert_allclose(lambda x, y: x.float() * 3 + y.float())


def test_do_bench_times_the_kernel_and_a_reference():
    profiler = axpy(1 << 24).get_profiler()
    ours = profiler.do_bench(warmup=5, rep=20)
    theirs = profiler.do_bench(lambda x, y: x * 2 + y, warmup=5, rep=20)
    # 3 x 32 MiB moved: well above 10 us and below 10 ms on any GPU this runs on.
    assert 0.01 < ours < 10 and 0.01 < theirs < 10


def test_do_bench_run_counts():
    calls = []
    x = torch.randn(1024, device="cuda")
    ms = do_bench(lambda: calls.append(x.sum()), n_warmup=3, n_repeat=7)
    assert ms > 0 and len(calls) == 1 + 3 + 7  # the first call is outside the timing

import example_gemm
import example_gemm_persistent
import pytest

pytestmark = pytest.mark.gpu


def test_example_gemm():
    example_gemm.main(M=1000, N=1000, K=1000)


@pytest.mark.parametrize(
    "M,N,K,stages",
    [
        (1000, 1000, 1000, 4),  # masked partial tiles
        (512, 768, 256, 2),  # fewer tiles than SMs: one run per block
        (4096, 4096, 512, 3),  # several tiles per block, the loads running on into the next tile
    ],
)
def test_example_gemm_persistent(M, N, K, stages):
    example_gemm_persistent.main(M, N, K, num_stages=stages)

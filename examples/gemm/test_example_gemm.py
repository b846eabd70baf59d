import example_gemm
import pytest

pytestmark = pytest.mark.gpu


def test_example_gemm():
    example_gemm.main(M=1000, N=1000, K=1000)

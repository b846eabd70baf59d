import example_elementwise_add
import pytest

pytestmark = pytest.mark.gpu


def test_example_elementwise():
    example_elementwise_add.main(N=100003, M=300, K=200)

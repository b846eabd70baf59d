import example_softmax
import pytest

pytestmark = pytest.mark.gpu


def test_example_softmax():
    example_softmax.main(M=300, N=2048)
    example_softmax.main(M=64, N=1000, blk_m=4)

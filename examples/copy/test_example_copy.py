import example_transpose
import pytest

pytestmark = pytest.mark.gpu


def test_example_transpose():
    example_transpose.main(M=300, N=129)

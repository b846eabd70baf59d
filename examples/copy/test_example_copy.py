import pytest

import example_transpose

pytestmark = pytest.mark.gpu


def test_example_transpose():
    example_transpose.main(M=300, N=129)

import example_rms_norm
import pytest

pytestmark = pytest.mark.gpu


def test_example_rms_norm():
    example_rms_norm.main(M=300, N=1024)
    example_rms_norm.main(M=64, N=512, blk_m=4)

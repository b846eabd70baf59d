"""pytest setup for examples/: each folder's test imports the example beside it."""

import os
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.dirname(HERE))
sys.path.extend(os.path.join(HERE, d) for d in sorted(os.listdir(HERE)) if os.path.isdir(os.path.join(HERE, d)))

import pytest  # noqa: E402

from tilelang.testing import end_process_after_cuda_fault, skip_gpu_tests_without_gpu, use_test_cache  # noqa: E402

use_test_cache()


def pytest_collection_modifyitems(config, items):
    skip_gpu_tests_without_gpu(items)


@pytest.hookimpl(trylast=True)
def pytest_runtest_logreport(report):
    end_process_after_cuda_fault(report)

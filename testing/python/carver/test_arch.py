"""tilelang.carver.arch: the CUDA device description and the driver queries, read from torch's
device properties (faked here: no GPU), and the other platforms' classes refusing to be built."""

import types

import pytest

from tilelang.carver import arch
from tilelang.carver.arch import CDNA, CUDA, driver
from tilelang.errors import UserError

H100 = types.SimpleNamespace(
    name="NVIDIA H100 80GB HBM3",
    major=9,
    minor=0,
    multi_processor_count=132,
    warp_size=32,
    shared_memory_per_block=49152,
    shared_memory_per_multiprocessor=233472,
    L2_cache_size=52428800,
)


@pytest.fixture
def h100(monkeypatch):
    monkeypatch.setattr(driver, "get_cuda_device_properties", lambda device_id=0: H100)


def test_driver_queries(h100):
    assert driver.get_num_sms() == 132
    assert driver.get_device_name() == "NVIDIA H100 80GB HBM3"
    assert driver.get_shared_memory_per_block() == 49152 and driver.get_shared_memory_per_block(format="kb") == 48
    assert driver.get_max_dynamic_shared_size_bytes(format="kb") == 228  # per SM, as the public TileLang answers
    with pytest.raises(ValueError, match="format must be one of"):
        driver.get_shared_memory_per_block(format="gb")


def test_driver_without_a_gpu(monkeypatch):
    monkeypatch.setattr(driver, "get_cuda_device_properties", lambda device_id=0: None)
    with pytest.raises(RuntimeError, match="no CUDA device 0"):
        driver.get_num_sms()
    assert driver.get_device_name() is None


def test_cuda_description(h100):
    dev = CUDA("sm_90a")
    assert (dev.sm_version, dev.compute_capability, dev.compute_max_core) == (90, "90", 132)
    assert (dev.smem_cap, dev.max_smem_usage, dev.warp_size, dev.l2_cache_size_bytes) == (49152, 98304, 32, 52428800)
    assert dev.platform == "CUDA" and dev.get_avaliable_tensorintrin_shapes() == [[16, 16], [16, 16]]
    assert arch.is_hopper_arch(dev) and arch.has_mma_support(dev) and not arch.is_ampere_arch(dev)
    assert arch.is_tensorcore_supported_precision("float8_e4m3", "float32", dev)
    assert not arch.is_tensorcore_supported_precision("int4", "int32", dev)
    assert isinstance(arch.get_arch("sm_90a"), CUDA)


def test_opt_in_shared_memory_is_the_compilers_limit(h100):
    assert CUDA("sm_90a").smem_optin_cap == 227 * 1024  # what check_shared_memory allows on sm_90


def test_described_without_a_gpu(monkeypatch):
    monkeypatch.setattr(driver, "get_cuda_device_properties", lambda device_id=0: None)
    a100 = CUDA.from_arch("sm_80", sm_count=108)
    assert (a100.sm_version, a100.compute_capability, a100.compute_max_core) == (80, "80", 108)
    assert (a100.smem_cap, a100.smem_optin_cap, a100.warp_size) == (48 * 1024, 163 * 1024, 32)
    assert arch.is_ampere_arch(a100) and CUDA.from_arch("sm_89", sm_count=128).smem_optin_cap == 99 * 1024
    with pytest.raises(UserError, match="positive sm_count"):  # raised at the call: the traceback shows the user's line
        CUDA.from_arch("sm_90a", sm_count=0)


def test_other_platforms_are_refused_by_name():
    # raised at the call: the traceback shows the user's line
    with pytest.raises(UserError, match="AMD CDNA devices are not a target of this tilelang"):
        CDNA("hip")
    with pytest.raises(UserError, match="CUDA only"):  # raised at the call: the traceback shows the user's line
        arch.get_arch("hip")
    assert not arch.is_cdna_arch(object())


def test_current_arch_needs_a_gpu(monkeypatch):
    monkeypatch.setattr(driver, "get_cuda_device_properties", lambda device_id=0: None)
    # raised at the call: the traceback shows the user's line
    with pytest.raises(UserError, match="no CUDA GPU is visible"):
        arch.auto_infer_current_arch()


@pytest.mark.gpu
def test_on_the_gpu():
    import torch

    prop = torch.cuda.get_device_properties(0)
    assert driver.get_num_sms() == prop.multi_processor_count
    assert driver.get_registers_per_block() == 65536  # through the CUDA runtime, not torch
    assert driver.get_persisting_l2_cache_max_size() >= 0
    dev = CUDA("cuda")
    assert dev.compute_capability == f"{prop.major}{prop.minor}" and dev.compute_max_core == prop.multi_processor_count

"""Properties of the CUDA device, as the public TileLang's `tilelang.carver.arch.driver` reads them:

    from tilelang.carver.arch import driver
    sm_num = driver.get_num_sms()            # persistent kernels launch this many blocks

Read through torch (`torch.cuda.get_device_properties`); the two attributes torch does not report
(registers per block, persisting L2 size) through the CUDA runtime's cudaDeviceGetAttribute.
Every function takes the device index (default 0) and raises RuntimeError without a CUDA device.
"""

from __future__ import annotations

import ctypes
import functools
import os


class cudaDeviceAttrNames:  # noqa: N801  (the public TileLang's name)
    """cudaDeviceAttr values (CUDA runtime API) the functions below read."""

    cudaDevAttrMaxThreadsPerBlock = 1
    cudaDevAttrMaxRegistersPerBlock = 12
    cudaDevAttrMaxSharedMemoryPerMultiprocessor = 81
    cudaDevAttrMaxPersistingL2CacheSize = 108


_FORMATS = {"bytes": 1, "kb": 1024, "mb": 1024 * 1024}


def get_cuda_device_properties(device_id: int = 0):
    """torch's properties of the device, or None without a CUDA device (or without torch)."""
    try:
        import torch
    except ImportError:
        return None
    if not torch.cuda.is_available():
        return None
    return torch.cuda.get_device_properties(device_id)


def _properties(device_id: int):
    prop = get_cuda_device_properties(device_id)
    if prop is None:
        raise RuntimeError(f"no CUDA device {device_id}: torch.cuda.is_available() is False")
    return prop


def _in(value: int, format: str) -> int:  # noqa: A002  (the public TileLang's argument name)
    if format not in _FORMATS:
        raise ValueError(f"format must be one of {', '.join(_FORMATS)}, got {format!r}")
    return int(value) // _FORMATS[format]


def get_device_name(device_id: int = 0) -> str | None:
    prop = get_cuda_device_properties(device_id)
    return prop.name if prop is not None else None


def get_num_sms(device_id: int = 0) -> int:
    """The number of streaming multiprocessors (132 on an H100 SXM / H200)."""
    return int(_properties(device_id).multi_processor_count)


def get_shared_memory_per_block(device_id: int = 0, format: str = "bytes") -> int:  # noqa: A002
    """Shared memory a block may use without opting in (48 KB on every current GPU)."""
    return _in(_properties(device_id).shared_memory_per_block, format)


def get_max_dynamic_shared_size_bytes(device_id: int = 0, format: str = "bytes") -> int:  # noqa: A002
    """Shared memory per multiprocessor (228 KB on sm_90). The public TileLang answers this name with
    the per-multiprocessor size, not the per-block opt-in limit (227 KB on sm_90); kept for code
    that relies on it."""
    return _in(_properties(device_id).shared_memory_per_multiprocessor, format)


@functools.cache
def _cudart():
    """The CUDA runtime library: the one torch loaded if any, else the toolkit's."""
    candidates = ["libcudart.so", "libcudart.so.13", "libcudart.so.12"]
    try:
        from tilelang import env

        candidates.append(os.path.join(env.cuda_paths()[1], "libcudart.so"))
    except (RuntimeError, OSError):
        pass
    for name in candidates:
        try:
            return ctypes.CDLL(name)
        except OSError:
            continue
    raise RuntimeError("the CUDA runtime library (libcudart.so) was not found")


def get_device_attribute(attr: int, device_id: int = 0) -> int:
    """cudaDeviceGetAttribute(attr, device_id) (see `cudaDeviceAttrNames` for a few values)."""
    _properties(device_id)  # a clear error without a device
    value = ctypes.c_int()
    fn = _cudart().cudaDeviceGetAttribute
    fn.argtypes = [ctypes.POINTER(ctypes.c_int), ctypes.c_int, ctypes.c_int]
    fn.restype = ctypes.c_int
    status = fn(ctypes.byref(value), int(attr), int(device_id))
    if status != 0:
        raise RuntimeError(f"cudaDeviceGetAttribute({attr}, device {device_id}) failed with CUDA error {status}")
    return value.value


def get_registers_per_block(device_id: int = 0) -> int:
    """32-bit registers available to one block (65536 on sm_80 and sm_90)."""
    return get_device_attribute(cudaDeviceAttrNames.cudaDevAttrMaxRegistersPerBlock, device_id)


def get_persisting_l2_cache_max_size(device_id: int = 0) -> int:
    """The largest L2 set-aside for persisting accesses, in bytes."""
    return get_device_attribute(cudaDeviceAttrNames.cudaDevAttrMaxPersistingL2CacheSize, device_id)

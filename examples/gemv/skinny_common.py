"""What the GEMV and split-K examples (and benchmark/gemv) share: fp16 inputs, the fp32 torch
reference, and the figures they print (time, HBM bandwidth, the GPU's SM count)."""

import os

import torch

from tilelang.profiler import do_bench

# HBM3e peak of the H200 (4.8 TB/s), the yardstick for memory-bound kernels' bandwidth.
PEAK_HBM_GBS = 4800


def randn(*shape, dtype=torch.float16, device="cuda"):
    """Random inputs (never zeros: a kernel that skips work must not pass)."""
    return torch.randn(*shape, device=device, dtype=dtype)


def ref_matmul(a, b):
    """a @ b in float32, the accumulation the kernels use, whatever their input dtype."""
    return a.float() @ b.float()


def num_sms(device="cuda"):
    """The GPU's SMs (the CPU's cores: the CPU target runs a block per core)."""
    if device == "cpu":
        return os.cpu_count()
    return torch.cuda.get_device_properties(torch.cuda.current_device()).multi_processor_count


def time_ms(fn, device="cuda"):
    """Median time of fn() in milliseconds (on the GPU: L2 flushed before each run, so weights come
    from HBM)."""
    return do_bench(fn, return_mode="median", device=device)


def gbs(moved_bytes, ms):
    """Bandwidth in GB/s of `moved_bytes` read and written in `ms` milliseconds."""
    return moved_bytes / ms / 1e6

"""Device descriptions, as the public TileLang's `tilelang.carver.arch` gives them to its analysis
tools (`tilelang.tools.Analyzer`) and to examples that size persistent kernels:

    from tilelang.carver.arch import CUDA, driver
    arch = CUDA("cuda")                   # the current GPU
    arch.compute_max_core                 # SMs, as driver.get_num_sms()
    arch.smem_cap, arch.compute_capability, arch.sm_version    # 49152, "90", 90 on an H100

`CUDA` reads the device through torch (`driver`); building one needs a CUDA GPU.
`CUDA.from_arch("sm_90a", sm_count=132)` describes a GPU without one (tests, or planning tiles for
another machine): the fields a GPU would report are filled from the architecture.
`smem_optin_cap` is the shared memory one block may opt in to (227 KB on sm_90), the limit the
compiler holds kernels to; `smem_cap` stays the 48 KB every block gets without opting in, as the
public TileLang reports it. The public TileLang's other device classes (CDNA, RDNA, METAL, CPU)
exist so that code choosing between them imports, and raise a UserError naming the platform when
built: this tilelang targets CUDA only. `tilelang.carver.template` ranks GEMM tiles on a `CUDA`.
"""

from __future__ import annotations

import re
import types

from tilelang.carver.arch import driver
from tilelang.errors import UserError

__all__ = [
    "CDNA",
    "CPU",
    "CUDA",
    "METAL",
    "RDNA",
    "TileDevice",
    "auto_infer_current_arch",
    "driver",
    "get_arch",
    "has_mma_support",
    "is_ada_arch",
    "is_ampere_arch",
    "is_cdna_arch",
    "is_cpu_arch",
    "is_cuda_arch",
    "is_hopper_arch",
    "is_metal_arch",
    "is_rdna_arch",
    "is_tensorcore_supported_precision",
    "is_volta_arch",
]


class TileDevice:
    """What the analysis tools read of a device (the public TileLang's fields and defaults)."""

    platform: str = "unknown"
    compute_capability: str = "unknown"  # "90" for sm_90
    reg_cap: int = 0  # 32-bit registers per block
    smem_cap: int = 0  # shared memory per block without opt-in, bytes
    smem_optin_cap: int = 0  # shared memory one block may opt in to, bytes (the limit kernels compile to)
    max_smem_usage: int = 0
    compute_max_core: int = 0  # SMs
    warp_size: int = 0
    sm_partition: int = 0  # schedulers (sub-partitions) per SM
    l2_cache_size_bytes: int = 0
    transaction_size: tuple = (0, 0)  # bytes: the smallest and the preferred global transaction
    bandwidth: tuple = (0, 0)  # MB/s: shared memory-ish and global: relative figures for the roofline

    def get_avaliable_tensorintrin_shapes(self):  # (sic: the public TileLang's spelling)
        raise NotImplementedError


class TensorInstruction:
    def __init__(self, name: str, shape: list[int]):
        self.name, self.shape = name, shape  # shape: [M, N] of the instruction


def _sm_version(arch: str) -> int:
    digits = re.match(r"sm_(\d+)", arch)
    return int(digits.group(1)) if digits else -1


class CUDA(TileDevice):
    """The CUDA GPU a target runs on (device 0), e.g. `CUDA("cuda")` or `CUDA(Target(...))`.

    Raises: UserError for a target that is not CUDA; RuntimeError without a CUDA device."""

    platform = "CUDA"

    def __init__(self, target="cuda"):
        self._describe(_cuda_target(target), driver._properties(0))

    @classmethod
    def from_arch(cls, arch: str = "sm_90a", sm_count: int = 132, l2_cache_size_bytes: int = 0) -> CUDA:
        """A GPU of architecture `arch` with `sm_count` SMs, described without touching a GPU.

        Example: CUDA.from_arch("sm_80", sm_count=108)   # an A100, on a machine without one
        Raises: UserError for an arch that is not a CUDA architecture ("sm_XY")."""
        target = _cuda_target(arch)
        sm = _sm_version(str(target.attrs.get("arch", "")))
        if sm < 0 or int(sm_count) <= 0:
            raise UserError(
                f"CUDA.from_arch: expected an arch like 'sm_90a' and a positive sm_count, got {arch!r}, {sm_count!r}"
            )
        prop = types.SimpleNamespace(  # what torch would report for such a GPU
            name=f"{target.attrs['arch']} with {sm_count} SMs (described, no device)",
            major=sm // 10,
            minor=sm % 10,
            multi_processor_count=int(sm_count),
            warp_size=32,
            shared_memory_per_block=48 * 1024,
            L2_cache_size=int(l2_cache_size_bytes),
        )
        device = cls.__new__(cls)
        device._describe(target, prop)
        return device

    def _describe(self, target, prop):
        """Fill the fields from a target and torch-style device properties."""
        from tilelang.transform.check_shared_memory import shared_memory_limit

        self.target = target
        self.sm_version = _sm_version(str(self.target.attrs.get("arch", "")))
        self.name = prop.name
        self.compute_capability = f"{prop.major}{prop.minor}"
        self.compute_max_core = int(prop.multi_processor_count)
        self.warp_size = int(getattr(prop, "warp_size", 32))
        self.smem_cap = int(prop.shared_memory_per_block)
        self.max_smem_usage = 2 * self.smem_cap
        # The compiler's own limit (check_shared_memory), so a tile chosen against it compiles.
        self.smem_optin_cap = shared_memory_limit(self.target)
        self.reg_cap = 65536
        self.sm_partition = 4
        self.l2_cache_size_bytes = int(getattr(prop, "L2_cache_size", 0))
        self.transaction_size = [32, 128]
        self.bandwidth = [750, 12080]  # the public TileLang's relative figures (not measured)
        self.available_tensor_instructions = None

    def get_avaliable_tensorintrin_shapes(self):  # (sic)
        self.available_tensor_instructions = (TensorInstruction("mma", [16, 16]), TensorInstruction("wmma", [16, 16]))
        return [t.shape for t in self.available_tensor_instructions]

    def __repr__(self) -> str:
        return f"CUDA({self.target})"


def _cuda_target(target):
    from tvm.target import Target

    from tilelang.utils.target import determine_target

    target = target if isinstance(target, Target) else determine_target(target)
    if target.kind.name != "cuda":
        raise UserError(f"CUDA(...): target {target} is not a CUDA target")
    return target


def _not_a_target(platform: str):
    class Unsupported(TileDevice):
        def __init__(self, *args, **kwargs):
            raise UserError(f"{platform} devices are not a target of this tilelang (CUDA only); use CUDA('cuda')")

    Unsupported.__name__ = Unsupported.__qualname__ = platform.split()[-1]
    Unsupported.platform = platform
    return Unsupported


CDNA = _not_a_target("AMD CDNA")
RDNA = _not_a_target("AMD RDNA")
METAL = _not_a_target("Apple METAL")
CPU = _not_a_target("CPU")


def get_arch(target="cuda") -> TileDevice:
    """The device of `target` (a string or tvm Target): a CUDA one.

    Raises: UserError for any other platform."""
    kind = getattr(getattr(target, "kind", None), "name", None) or str(target).split()[0]
    if kind in ("hip", "rocm", "metal", "llvm", "c"):
        raise UserError(f"target {target}: this tilelang compiles for CUDA only")
    return CUDA(target)


def auto_infer_current_arch() -> TileDevice:
    """The current GPU. Raises: UserError without a CUDA GPU (the public TileLang would fall back
    to a CPU or Metal device, which are not targets here)."""
    if driver.get_cuda_device_properties(0) is None:
        raise UserError("no CUDA GPU is visible, and CUDA is this tilelang's only target")
    return CUDA("cuda")


def is_cuda_arch(arch) -> bool:
    return isinstance(arch, CUDA)


def is_volta_arch(arch) -> bool:
    return is_cuda_arch(arch) and 70 <= arch.sm_version < 80


def is_ampere_arch(arch) -> bool:
    return is_cuda_arch(arch) and 80 <= arch.sm_version < 89


def is_ada_arch(arch) -> bool:
    return is_cuda_arch(arch) and arch.sm_version == 89


def is_hopper_arch(arch) -> bool:
    return is_cuda_arch(arch) and arch.sm_version == 90


def has_mma_support(arch) -> bool:
    return is_cuda_arch(arch) and arch.sm_version >= 80


def is_cdna_arch(arch) -> bool:
    return False  # no such device can be built here


is_rdna_arch = is_metal_arch = is_cpu_arch = is_cdna_arch

# (input dtype, accumulator dtype) pairs the tensor cores of each generation take.
_AMPERE_TC = {("bfloat16", "float32"), ("float16", "float32"), ("float16", "float16"), ("int8", "int32")}
_ADA_TC = _AMPERE_TC | {("float8_e5m2", "float32"), ("float8_e4m3", "float32")}
_TENSORCORE = {
    is_volta_arch: {("float16", "float32"), ("float16", "float16")},
    is_ampere_arch: _AMPERE_TC | {("int4", "int32"), ("int2", "int32"), ("int1", "int32")},
    is_ada_arch: _ADA_TC,
    is_hopper_arch: _ADA_TC,
}


def is_tensorcore_supported_precision(in_dtype: str, accum_dtype: str, arch) -> bool:
    """Whether `arch`'s tensor cores multiply `in_dtype` into `accum_dtype`.

    Raises: UserError for an architecture outside sm_70 .. sm_90."""
    for matches, pairs in _TENSORCORE.items():
        if matches(arch):
            return (str(in_dtype), str(accum_dtype)) in pairs
    raise UserError(f"is_tensorcore_supported_precision: no table for {arch!r} (sm_70 to sm_90 only)")

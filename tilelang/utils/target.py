"""Targets: what the user writes ("auto", "cuda", "sm_90a", "cpu", a dict, a tvm Target) -> a Target.

Every CUDA target built here has `host="cuda_host"`, so the host launcher is C++ in the same
translation unit as the kernels (see `codegen/cuda.py`). The CPU target is LLVM for this machine's
processor (`codegen/cpu.py`); "auto" picks it when torch sees no GPU.
"""

from __future__ import annotations

import contextlib
import functools

import tvm
from tvm.target import Target

from tilelang import env
from tilelang.errors import UserError
from tilelang.log import logger

# Architectures whose features (wgmma, setmaxnreg) exist only in the "a" variant.
_ARCH_SUFFIX = {"sm_90": "sm_90a", "sm_100": "sm_100a"}


def detect_arch() -> str | None:
    """The arch of the current GPU through torch (e.g. "sm_90a"), or None without a GPU."""
    try:
        import torch
    except ImportError:
        return None
    if not torch.cuda.is_available():
        return None
    major, minor = torch.cuda.get_device_capability()
    arch = f"sm_{major}{minor}"
    return _ARCH_SUFFIX.get(arch, arch)


def _cuda(arch: str) -> Target:
    return Target({"kind": "cuda", "arch": arch}, host="cuda_host")


@functools.cache
def cpu_target() -> Target:
    """This machine's processor as an LLVM target: its vector instructions (AVX-512, NEON) are what
    the loops of a CPU kernel are vectorized for."""
    from tvm.target import codegen

    triple = codegen.llvm_get_system_triple().replace("-conda-", "-")  # conda's LLVM names its vendor
    return Target({"kind": "llvm", "mtriple": triple, "mcpu": codegen.llvm_get_system_cpu()})


def is_cpu(target) -> bool:
    """Whether `target` runs kernels on the CPU (`codegen/cpu.py`) rather than a GPU."""
    return target is not None and target.kind.name in ("llvm", "c")


_said_cpu = False


def _auto() -> Target:
    """"auto": the current GPU, or the CPU (said once, at INFO) when torch sees none."""
    global _said_cpu
    if detect_arch() is not None:
        return determine_target("cuda")
    if not _said_cpu:
        mcpu = cpu_target().attrs.get("mcpu", "llvm")
        logger.info("target 'auto': torch sees no CUDA GPU, so kernels are compiled for the CPU (%s)", mcpu)
        _said_cpu = True
    return cpu_target()


@contextlib.contextmanager
def use_target(target):
    """Within the `with`, target "auto" (every `@tilelang.jit` kernel that names no target) means
    `target`: run a GPU program's kernels on the CPU, or pick the GPU arch, without editing them.

    Example:
        with tilelang.use_target("cpu"):
            c = matmul(256, 256, 256)(a_cpu, b_cpu)
    """
    if not isinstance(target, (str, dict, Target)):
        raise UserError(f"tilelang.use_target: expected a target such as 'cpu' or 'sm_90a', got {target!r}")
    env._target_stack.append(target)
    try:
        yield
    finally:
        env._target_stack.pop()


def determine_target(target=None) -> Target:
    """The Target for `target`.

    Accepted: None/"auto" (the current GPU, the CPU without one, or $TILELANG_DEFAULT_TARGET), "cuda"
    (the current GPU), an arch ("sm_80", "sm_89", "sm_90a"), "cuda -arch=sm_80", a dict such as
    {"kind": "cuda", "arch": "sm_90a"}, "cpu" or "llvm" (this machine's processor), a TVM target tag,
    or a tvm Target.
    """
    if target is None or target == "auto":
        target = env.default_target()
        if target == "auto":
            return _auto()
    if isinstance(target, Target):
        if is_cpu(target):
            return target
        arch = target.attrs.get("arch")
        return _cuda(str(arch)) if arch else target
    if isinstance(target, dict):
        if target.get("kind", "cuda") != "cuda" or "arch" not in target:
            raise UserError(f"target {target!r}: expected a dict with kind 'cuda' and an 'arch' such as 'sm_90a'")
        return _cuda(_ARCH_SUFFIX.get(target["arch"], target["arch"]))
    if not isinstance(target, str):
        raise UserError(f"target must be a string, a dict or a tvm Target, got {target!r}")
    text = target.strip()
    if text in ("cpu", "llvm"):
        return cpu_target()
    if text == "cuda":
        arch = detect_arch()
        if arch is None:
            raise UserError(
                "target 'cuda' needs a GPU to detect the architecture; none is visible. "
                "Name the architecture instead, e.g. target='sm_90a' or 'sm_80'"
            )
        return _cuda(arch)
    if text.startswith("cuda") and "-arch=" in text:
        text = text.split("-arch=")[1].split()[0]
    if text.startswith("sm_"):
        return _cuda(_ARCH_SUFFIX.get(text, text))
    try:
        return determine_target(tvm.target.Target(text))
    except Exception:  # noqa: BLE001
        raise UserError(f"unknown target {target!r}; use 'auto', 'cuda', 'cpu', or an arch such as 'sm_90a'") from None


def arch_of(target: Target) -> str:
    """The GPU architecture ("sm_90a"), or "cpu"."""
    return "cpu" if is_cpu(target) else str(target.attrs["arch"])


def compute_capability(target: Target) -> int:
    """e.g. 90 for sm_90a (0 for the CPU)."""
    if is_cpu(target):
        return 0
    return int("".join(ch for ch in arch_of(target).removeprefix("sm_") if ch.isdigit()))


# ---- what a target has: the passes' target gates (engine/pipeline.py asks these) -------------------
# tilelang's Hopper code (TMA boxes on mbarriers, wgmma, setmaxnreg, 2-block clusters) is written for
# sm_90a; later architectures replace parts of it (tcgen05 on sm_100a), so each predicate names
# the exact architectures whose form the compiler emits.


def has_tma(target) -> bool:
    """TMA tile loads completing on mbarriers, setmaxnreg and thread-block clusters (sm_90a):
    the Hopper pipeline with a producer warpgroup."""
    return target is not None and arch_of(target) == "sm_90a"


def has_wgmma(target) -> bool:
    """Warpgroup tensor-core gemms reading shared operands through descriptors (sm_90a)."""
    return target is not None and arch_of(target) == "sm_90a"

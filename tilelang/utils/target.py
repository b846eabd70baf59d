"""Targets: what the user writes ("auto", "cuda", "sm_90a", a dict, a tvm Target) -> a CUDA Target.

Every target built here has `host="cuda_host"`, so the host launcher is C++ in the same translation
unit as the kernels (see `codegen/cuda.py`).
"""

from __future__ import annotations

import tvm
from tvm.target import Target

from tilelang import env
from tilelang.errors import UserError

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


def determine_target(target=None) -> Target:
    """A CUDA Target for `target`.

    Accepted: None/"auto" (the current GPU, or $TILELANG_DEFAULT_TARGET), "cuda" (the current GPU),
    an arch ("sm_80", "sm_89", "sm_90a"), "cuda -arch=sm_80", a dict such as
    {"kind": "cuda", "arch": "sm_90a"}, a TVM target tag, or a tvm Target.
    """
    if target is None or target == "auto":
        target = env.default_target()
        if target == "auto":
            target = "cuda"
    if isinstance(target, Target):
        arch = target.attrs.get("arch")
        return _cuda(str(arch)) if arch else target
    if isinstance(target, dict):
        if target.get("kind", "cuda") != "cuda" or "arch" not in target:
            raise UserError(f"target {target!r}: expected a dict with kind 'cuda' and an 'arch' such as 'sm_90a'")
        return _cuda(_ARCH_SUFFIX.get(target["arch"], target["arch"]))
    if not isinstance(target, str):
        raise UserError(f"target must be a string, a dict or a tvm Target, got {target!r}")
    text = target.strip()
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
        raise UserError(f"unknown target {target!r}; use 'auto', 'cuda', or an arch such as 'sm_90a'") from None


def arch_of(target: Target) -> str:
    return str(target.attrs["arch"])


def compute_capability(target: Target) -> int:
    """e.g. 90 for sm_90a."""
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

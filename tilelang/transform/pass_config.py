"""`PassConfigKey`: the names of the compiler options a kernel can set through `pass_configs`.

Example:
    @tilelang.jit(out_idx=[3], pass_configs={tilelang.PassConfigKey.TL_ENABLE_FAST_MATH: True})

The keys are strings (the enum is a `str` subclass whose str/repr is the plain value), so
`{"tl.enable_fast_math": True}` means the same and hashes the same in the kernel cache.
"""

from __future__ import annotations

import contextlib
import contextvars
import enum


class PassConfigKey(str, enum.Enum):
    TL_ENABLE_FAST_MATH = "tl.enable_fast_math"  # nvcc --use_fast_math for the whole kernel
    TL_DISABLE_TMA_LOWER = "tl.disable_tma_lower"  # keep global->shared copies off TMA (sm_90a)
    TL_DISABLE_WARP_SPECIALIZED = "tl.disable_warp_specialized"  # no producer/consumer split (sm_90a)
    TL_DISABLE_WGMMA = "tl.disable_wgmma"  # T.gemm through mma.sync even on sm_90a
    TL_DISABLE_FRAGMENT_STORE_STAGING = "tl.disable_fragment_store_staging"  # fragment -> global stores direct
    TL_ENABLE_TMA_MULTICAST = "tl.enable_tma_multicast"  # 2-block clusters sharing tile loads (sm_90a)

    def __str__(self) -> str:
        return self.value

    def __repr__(self) -> str:
        return repr(self.value)


_active = contextvars.ContextVar("tilelang_pass_configs", default=None)


@contextlib.contextmanager
def active(config: dict):
    """Make `config` the pass configuration that `current()` returns while a kernel is lowered."""
    token = _active.set(dict(config or {}))
    try:
        yield
    finally:
        _active.reset(token)


def current() -> dict:
    """The pass configuration of the kernel being lowered ({} outside lowering)."""
    return _active.get() or {}


def enabled(key: PassConfigKey) -> bool:
    return bool(current().get(str(key), False))

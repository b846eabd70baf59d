"""TileLang names for hardware tilelang does not compile for: each is an error naming the feature
and the target, raised where the kernel uses it, instead of an AttributeError when it is looked up.

tilelang targets NVIDIA sm_80, sm_89 and sm_90a. Blackwell's (sm_100) tensor memory and tcgen05
mma, its cluster launch control, sm_120's block-scaled mma, and the thread-block cluster and
persistent-scheduler helpers built on them are not available.
"""

from __future__ import annotations

from tilelang.errors import UserError

_TARGETS = "tilelang compiles for sm_80, sm_89 and sm_90a"

# name -> (what it is, the target it needs)
_NAMES = {
    "alloc_tmem": ("tensor memory (TMEM)", "Blackwell (sm_100)"),
    "tcgen05_gemm": ("tcgen05 mma", "Blackwell (sm_100)"),
    "tcgen05_gemm_blockscaled": ("block-scaled tcgen05 mma", "Blackwell (sm_100)"),
    "tcgen05_mma_arrive": ("tcgen05 mma completion barriers", "Blackwell (sm_100)"),
    "tcgen05_cp_warpx4": ("tcgen05.cp to tensor memory", "Blackwell (sm_100)"),
    "tcgen05_sf_warp_transpose": ("tcgen05 scale-factor transposes", "Blackwell (sm_100)"),
    "clc_try_cancel_multicast": ("cluster launch control", "Blackwell (sm_100)"),
    "clc_is_canceled": ("cluster launch control", "Blackwell (sm_100)"),
    "clc_get_first_ctaid_x": ("cluster launch control", "Blackwell (sm_100)"),
    "mma_gemm_blockscaled": ("block-scaled mma", "sm_120"),
    "ClusterKernel": ("kernels launched in thread-block clusters", "a cluster launch (not supported yet)"),
    "alloc_cluster_barrier": ("mbarriers shared by a thread-block cluster", "a cluster launch (not supported yet)"),
    "block_rank_in_cluster": ("a block's rank in its cluster", "a cluster launch (not supported yet)"),
    "PersistentTileScheduler": ("the persistent tile scheduler", "cluster launch control (Blackwell, sm_100)"),
}


def _unsupported(name: str, what: str, needs: str):
    def fn(*args, **kwargs):
        raise UserError(f"T.{name}: {what} needs {needs}, which tilelang does not support; {_TARGETS}")

    fn.__name__ = fn.__qualname__ = name
    fn.__doc__ = f"Not supported: {what} needs {needs}. Calling it raises UserError."
    return fn


globals().update({name: _unsupported(name, *info) for name, info in _NAMES.items()})

__all__ = list(_NAMES)

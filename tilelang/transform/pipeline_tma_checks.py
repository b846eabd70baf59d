"""Whether a pipelined loop can take the Hopper pipeline (`pipeline_tma`): TMA loads, a producer
warpgroup, and what the planner knows about the kernel around the loop. Analysis only; the rewrite
is `pipeline_tma.build`."""

from __future__ import annotations

from dataclasses import dataclass

from tvm import ir, tirx

from tilelang.op import base, tma
from tilelang.op import gemm as gemm_op
from tilelang.transform import pass_config
from tilelang.transform.common import collect, walk
from tilelang.transform.infer_layout import ANNOTATED_LAYOUTS, shared_layout_from_ir
from tilelang.utils.target import arch_of

PRODUCER_THREADS = 128  # one warpgroup: setmaxnreg acts per warpgroup


@dataclass
class Kernel:
    """What the planner knows about the kernel around a pipelined loop."""

    func: tirx.PrimFunc
    target: object
    thread: object  # threadIdx.x
    threads: int
    only_x: bool  # no threadIdx.y / threadIdx.z
    specialized: list  # the loops already warp-specialized in this kernel (at most one)
    tma_tiles: tuple = ()  # shared tiles only TMA loads write (`lower_tma_copies`)
    nested: bool = False  # the pipelined loop runs inside another loop


def predicted_layout(tile_buffer, kernel: Kernel):
    """The layout layout inference will give `tile_buffer`: annotated, else the one the gemms that
    read it need, else row-major (None)."""
    annotated = kernel.func.attrs.get(ANNOTATED_LAYOUTS) if kernel.func.attrs is not None else None
    if annotated is not None and tile_buffer in annotated:
        return shared_layout_from_ir(annotated[tile_buffer])
    found = []

    def on_eval(stmt):
        if base.is_tile_op(stmt.value, gemm_op.NAME):
            g = gemm_op.Gemm(stmt.value)
            lay = gemm_op.shared_layouts(g, kernel.target, kernel.threads).get(tile_buffer)
            if lay is not None:
                found.append(lay)

    walk(kernel.func.body, [(tirx.Evaluate, on_eval)])
    return found[0] if found else None


def why_not(producers, kernel: Kernel) -> str | None:
    """Why the loop cannot use TMA (None: it can)."""
    if kernel.target is None or arch_of(kernel.target) != "sm_90a":
        return "not sm_90a"
    if pass_config.enabled(pass_config.PassConfigKey.TL_DISABLE_TMA_LOWER):
        return "tl.disable_tma_lower is set"
    for p in producers:
        src, dst = base.Region.from_ir(p.value.args[0]), base.Region.from_ir(p.value.args[1])
        tile = tma.tile_of(src, dst)
        if isinstance(tile, str):
            return f"T.copy into '{dst.name}': {tile}"
        if tma.box_plan(tile, predicted_layout(dst.buffer, kernel)) is None:
            return f"T.copy into '{dst.name}': its shared layout is not one the TMA unit writes"
    return None


def why_not_specialized(loop, producers, kernel: Kernel) -> str | None:
    """Why the loop cannot get a producer warpgroup (None: it can)."""
    if pass_config.enabled(pass_config.PassConfigKey.TL_DISABLE_WARP_SPECIALIZED):
        return "tl.disable_warp_specialized is set"
    # The producer runs only the loop: its trip count and load coordinates must not read values the
    # consumers' code computes into registers or shared memory (a T.alloc_var, a tile).
    reads = [loop.extent] + [p.value.args[0] for p in producers]
    for node in reads:
        for ld in collect(node, ir.TensorLoad):
            if ld.source.scope() != "global":
                return f"the loop's bounds or copy coordinates read '{ld.source.name}'"
    if not kernel.only_x:
        return "the kernel has threadIdx.y/z"
    if kernel.threads % 128:
        return f"{kernel.threads} threads are not whole warpgroups"
    if kernel.threads + PRODUCER_THREADS > 1024:
        return "no room for a producer warpgroup"
    if kernel.specialized:
        return "another loop of the kernel is already warp-specialized"
    return None


def why_not_nested(kernel: Kernel, why_not_ws: str | None) -> str | None:
    """Why a loop inside another loop cannot use TMA (None: it can): only the warp-specialized
    pipeline counts its barriers' phases on across runs of the loop."""
    if kernel.nested and why_not_ws is not None:
        return f"the pipelined loop is inside another loop and has no producer warpgroup ({why_not_ws})"
    return None

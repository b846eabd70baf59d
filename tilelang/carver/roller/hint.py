"""`Hint`: one recommended GEMM schedule, as `MatmulTemplate.recommend_hints` returns them.

The fields are those the public TileLang's roller hints give to a kernel's parameters:

    block_m, block_n = hint.block            # the output tile of one block
    warp_m, warp_n = hint.warp               # the output tile of one warp (block_m // warp_m warps down)
    block_k = hint.rstep[0]                  # the K step of the pipelined loop
    num_stages = hint.pipeline_stage         # shared-memory stages of that loop
    threads = hint.threads                   # 32 per warp
    T.use_swizzle(**hint.rasterization_plan.swizzle_args())
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field

from tilelang.carver.roller.rasterization import NoRasterization, Rasterization

__all__ = ["Hint"]


@dataclass
class Hint:
    """A GEMM schedule: tile sizes, warp tiles, K step, pipeline depth and launch order.

    block: [block_m, block_n]; warp: [warp_m, warp_n], each dividing its block size; rstep:
    [block_k]; pipeline_stage: shared-memory buffers of the K loop (1: not pipelined); use_async:
    whether the loads are asynchronous (cp.async or TMA, sm_80 and later)."""

    block: list[int] = field(default_factory=list)
    warp: list[int] = field(default_factory=list)
    rstep: list[int] = field(default_factory=list)
    pipeline_stage: int = 1
    use_async: bool = False
    rasterization_plan: Rasterization = field(default_factory=NoRasterization)
    use_tc: bool = True  # tensor cores (the public TileLang's name); every hint here is for them

    @property
    def threads(self) -> int:
        """Threads of a block: 32 per warp, (block_m // warp_m) * (block_n // warp_n) warps."""
        warps = 1
        for b, w in zip(self.block, self.warp):
            warps *= b // w
        return 32 * warps

    def to_dict(self) -> dict:
        return asdict(self) | {"rasterization_plan": self.rasterization_plan}

    @classmethod
    def from_dict(cls, values: dict) -> Hint:
        return cls(**values)

    def __repr__(self) -> str:
        block = "x".join(map(str, self.block)) or "?"
        warp = "x".join(map(str, self.warp)) or "?"
        k = self.rstep[0] if self.rstep else "?"
        loads = ", async" if self.use_async else ""
        return (
            f"Hint(block={block}, warp={warp}, block_k={k}, stages={self.pipeline_stage}, "
            f"threads={self.threads}{loads}, {self.rasterization_plan!r})"
        )

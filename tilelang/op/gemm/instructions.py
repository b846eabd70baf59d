"""Instruction selection for `T.gemm`: which tensor-core instruction a (target, dtypes) pair uses.

One registry; every entry says for which targets and dtypes it applies. Selection raises when no
entry matches (naming what would work) or when several do (a registry bug), never silently taking
the first.
"""

from __future__ import annotations

from dataclasses import dataclass

from tilelang.errors import UserError
from tilelang.utils.target import arch_of, compute_capability


@dataclass(frozen=True)
class MmaInstruction:
    """A 16 x 8 x k mma.sync shape: `k` per instruction and the element dtypes it multiplies."""

    name: str
    k: int
    a_dtypes: tuple
    c_dtypes: tuple
    min_cc: int

    def matches(self, cc: int, a_dtype: str, b_dtype: str, c_dtype: str) -> bool:
        return cc >= self.min_cc and a_dtype == b_dtype and a_dtype in self.a_dtypes and c_dtype in self.c_dtypes


REGISTRY = [
    MmaInstruction("mma.sync.m16n8k16 (fp16)", 16, ("float16",), ("float32", "float16"), 80),
    MmaInstruction("mma.sync.m16n8k16 (bf16)", 16, ("bfloat16",), ("float32",), 80),
    MmaInstruction("mma.sync.m16n8k8 (tf32)", 8, ("float32",), ("float32",), 80),
    MmaInstruction("mma.sync.m16n8k32 (int8)", 32, ("int8",), ("int32",), 80),
    MmaInstruction("mma.sync.m16n8k32 (fp8)", 32, ("float8_e4m3fn", "float8_e5m2"), ("float32",), 89),
]


def select(target, a_dtype: str, b_dtype: str, c_dtype: str) -> MmaInstruction:
    """The one instruction for these dtypes on `target`; UserError when there is none."""
    cc = compute_capability(target)
    hits = [m for m in REGISTRY if m.matches(cc, a_dtype, b_dtype, c_dtype)]
    if len(hits) > 1:
        raise RuntimeError(
            f"gemm instruction registry: several entries match {a_dtype} x {b_dtype} -> {c_dtype}: "
            f"{[h.name for h in hits]}"
        )
    if not hits:
        supported = ", ".join(f"{'/'.join(m.a_dtypes)} -> {'/'.join(m.c_dtypes)} (sm_{m.min_cc}+)" for m in REGISTRY)
        raise UserError(
            f"T.gemm: no tensor-core instruction on {arch_of(target)} multiplies {a_dtype} x {b_dtype} "
            f"into {c_dtype}; supported: {supported}"
        )
    return hits[0]

"""`Analyzer`: a roofline estimate of a kernel from its tile ops, as the public TileLang's
`tilelang.tools.Analyzer` gives it.

    from tilelang.tools import Analyzer
    from tilelang.carver.arch import CUDA
    result = Analyzer.analysis(prim_func, CUDA("cuda"))
    result.total_flops          # 2*M*N*K summed over every T.gemm the kernel runs
    result.total_global_bytes   # bytes every T.copy to or from a global tensor moves

It reads the kernel before lowering (a `@T.prim_func`, or an IRModule of one): each `T.gemm` counts
2*M*N*K and each `T.copy` with a global side the bytes of that side's tile, both times the
iterations of the loops around it and the number of blocks. Element-wise `T.Parallel` code and
other ops are not counted. The time estimate is the larger of memory time (bytes over the device
description's global bandwidth figure) and compute time (flops over the CUDA-core FP32 peak of the
device's architecture, when known). Like the public tool's, these figures are coarse: the
bandwidth of `tilelang.carver.arch.CUDA` is a relative figure, and tensor-core peaks are not used.
"""

from __future__ import annotations

import logging
import math
from dataclasses import dataclass

import tvm
import tvm_ffi
from tvm import tirx

from tilelang.errors import UserError
from tilelang.op import base
from tilelang.op.copy import Copy
from tilelang.op.gemm import Gemm

logger = logging.getLogger("tilelang")

# FP32 CUDA cores per SM and boost clock (GHz) per compute capability: A100, GA10x, Ada, H100 SXM.
_FP32_CORES = {"80": (64, 1.41), "86": (128, 1.70), "89": (128, 2.52), "90": (128, 1.98)}


@dataclass(frozen=True)
class AnalysisResult:
    total_flops: int
    total_global_bytes: int
    estimated_time: float  # seconds
    expected_tflops: float | None  # the device's FP32 CUDA-core peak, None if its architecture is not known
    expected_bandwidth_GBps: float  # noqa: N815  (the public TileLang's field name)


class Analyzer:
    """Counts the FLOPs and global-memory bytes of a kernel's tile ops (see the module docstring)."""

    def __init__(self, fn, device):
        if isinstance(fn, tvm.IRModule):
            funcs = [f for f in fn.functions.values() if isinstance(f, tirx.PrimFunc)]
        elif isinstance(fn, tirx.PrimFunc):
            funcs = [fn]
        else:
            raise UserError(f"Analyzer: expected a prim_func or an IRModule, got {type(fn).__name__}")
        self.funcs, self.device = funcs, device
        self.total_flops = 0
        self.total_global_bytes = 0

    def ir_pass(self) -> Analyzer:
        """Walk every function, adding up its gemm FLOPs and copy bytes."""
        for func in self.funcs:
            self._walk(func)
        return self

    def _walk(self, func) -> None:
        loops: list[int] = []
        blocks = {"blockIdx.x": 1, "blockIdx.y": 1, "blockIdx.z": 1}

        def repeat() -> int:
            return math.prod(loops) * math.prod(blocks.values())

        def on_for(node, mutator):
            extent = node.extent
            if not isinstance(extent, tirx.IntImm):
                raise UserError(f"Analyzer: the loop over '{node.loop_var.name}' has extent {extent}, not a constant")
            loops.append(int(extent.value))
            mutator.default_mutate(node)
            loops.pop()
            return node

        def on_attr(node, mutator):
            if node.attr_key == "thread_extent" and node.node.thread_tag in blocks:
                if not isinstance(node.value, tirx.IntImm):
                    raise UserError(f"Analyzer: the grid's {node.node.thread_tag} is {node.value}, not a constant")
                blocks[node.node.thread_tag] = int(node.value.value)
            mutator.default_mutate(node)
            return node

        def on_evaluate(node, mutator):
            op = base.parse(node)
            if isinstance(op, Gemm):
                self.total_flops += 2 * op.M * op.N * op.K * repeat()
            elif isinstance(op, Copy):
                side = next((r for r in (op.src, op.dst) if r.buffer.scope() == "global"), None)
                if side is not None:
                    elements = math.prod(int(e) for e in side.extents)
                    self.total_global_bytes += elements * tvm.DataType(side.buffer.dtype).bits // 8 * repeat()
            return node

        errors = []

        def guard(fn):
            def call(node, mutator):
                if errors:
                    return node
                try:
                    return fn(node, mutator)
                except UserError as err:  # re-raised below: crossing the FFI would make it a RuntimeError
                    errors.append(err)
                    return node

            return call

        callbacks = [(tirx.For, guard(on_for)), (tirx.AttrStmt, guard(on_attr)), (tirx.Evaluate, guard(on_evaluate))]
        tvm_ffi.structural_mutate(func.body, callbacks)
        if errors:
            raise errors[0]

    def calculate(self) -> AnalysisResult:
        bandwidth_gbps = self.device.bandwidth[1] / 1000
        arch = str(self.device.compute_capability)[:2]
        peak = None
        if arch in _FP32_CORES:
            cores, clock = _FP32_CORES[arch]
            peak = round(self.device.compute_max_core * cores * clock * 2 / 1e3, 1)  # an FMA is 2 flops
        else:
            logger.info("Analyzer: no FP32 peak known for compute capability %s", self.device.compute_capability)
        memory_time = self.total_global_bytes / (bandwidth_gbps * 1e9)
        compute_time = self.total_flops / (peak * 1e12) if peak else 0.0
        return AnalysisResult(
            total_flops=self.total_flops,
            total_global_bytes=self.total_global_bytes,
            estimated_time=max(memory_time, compute_time),
            expected_tflops=peak,
            expected_bandwidth_GBps=bandwidth_gbps,
        )

    @classmethod
    def analysis(cls, fn, device) -> AnalysisResult:
        """Analyze `fn` (a prim_func or IRModule) for `device` (e.g. `tilelang.carver.arch.CUDA("cuda")`)."""
        return cls(fn, device).ir_pass().calculate()

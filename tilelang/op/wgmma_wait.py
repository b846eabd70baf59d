"""`tl.wgmma_wait(pending, fragment...)`: wait for this thread's asynchronous wgmma gemms, keeping
the registers they read or write in place until the wait.

Made by the pipeline planner (`transform/wgmma_waits.py`), not by users (`T.wait_wgmma` is the
user's plain wait). Lowering: the wgmma_wait intrinsic, then a register fence on each fragment
(an empty asm that reads and writes every register of the array). The fences stop the compiler from
reading an accumulator before the wait, or from reusing the registers of an A operand the tensor
cores have not read yet.
"""

from __future__ import annotations

from tvm import tirx

from tilelang import intrinsics
from tilelang.op import base, gemm
from tilelang.utils.ir import i32, seq

NAME = "wgmma_wait"


def make(pending: int, fragments) -> tirx.Stmt:
    """The wait statement: at most `pending` wgmma groups still running, `fragments` fenced."""
    regions = [base.Region(b, [i32(0)] * len(b.shape), list(b.shape)).to_ir() for b in fragments]
    return tirx.Evaluate(base.make_call(NAME, [i32(pending)] + regions))


def pending_of(call) -> int:
    return int(call.args[0].value)


def fragments_of(call) -> list:
    return [base.Region.from_ir(r).buffer for r in call.args[1:]]


@base.register
class WgmmaWait(base.TileOp):
    """A parsed `tl.wgmma_wait(pending, fragment regions...)`."""

    name = NAME

    def __init__(self, call, span=None):
        super().__init__(call, span)
        self.pending = pending_of(call)
        self.regions = [base.Region.from_ir(r) for r in call.args[1:]]

    def describe(self) -> str:
        return f"wait for wgmma ({self.pending} pending)"

    def lower(self, ctx) -> tirx.Stmt:
        out = [intrinsics.WGMMA_WAIT.stmt({"pending": self.pending})]
        for region in self.regions:
            ptr = gemm.pointer(region, ctx, 3)  # the fragment's register array
            count = int(ctx.local_of(region.buffer).shape[0])
            out.append(intrinsics.FENCE_REGISTERS.stmt({"count": count}, ptr))
        return seq(out)

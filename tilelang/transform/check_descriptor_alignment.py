"""Check `check_descriptor_alignment`: every shared tile a wgmma reads through a descriptor starts on
its swizzle's boundary (1024/512/256 bytes for the 128/64/32-byte swizzles).

The hardware applies the swizzle to absolute shared-memory address bits while tilelang lays the tile
out relative to its start (`gmma_panels`); the two agree only on such a boundary. Runs after the
shared tiles are merged into one block, when each tile's offset is known.

Requires: `merge_shared_tiles`. Guarantees: IR unchanged; a CompilerError naming the gemm
and the way out (`tl.disable_wgmma`) when an offset is not provably aligned.
"""

from __future__ import annotations

import tvm
from tvm import ir, sym, tirx

from tilelang import intrinsics
from tilelang.errors import CompilerError
from tilelang.transform.common import walk

_ALIGN = {3: 1024, 2: 512, 1: 256}


def _offset_bytes(ptr):
    """(offset in bytes, buffer name) of a `tvm_access_ptr` or `address_of(buf[i])` argument."""
    if isinstance(ptr, ir.Call) and ptr.op.name == "tirx.tvm_access_ptr":
        dtype = str(ptr.args[0].ty.dtype) if hasattr(ptr.args[0], "ty") else str(ptr.args[0].dtype)
        return ptr.args[2] * (tvm.DataType(dtype).bits // 8), str(ptr.args[1])
    if isinstance(ptr, ir.Call) and ptr.op.name == "tirx.address_of":
        load = ptr.args[0]
        return load.indices[-1] * (tvm.DataType(str(load.buffer.dtype)).bits // 8), load.buffer.name
    return None, None


def check_descriptor_alignment(mod) -> None:
    ana = sym.Analyzer()
    for _, func in mod.functions.items():
        if not isinstance(func, tirx.PrimFunc):
            continue

        def on_eval(stmt):
            wgmma = intrinsics.lookup(stmt)
            if wgmma not in intrinsics.WGMMAS:
                return
            args = wgmma.args(stmt)
            # Operands read through descriptors: B always, A when in shared memory (rows_a > 0).
            swizzles = {1: wgmma.param(stmt, "swz_b")}
            if wgmma.param(stmt, "rows_a"):
                swizzles[0] = wgmma.param(stmt, "swz_a")
            for arg, bits in swizzles.items():
                offset, name = _offset_bytes(args[arg])
                if offset is None:
                    continue
                align = _ALIGN[bits]
                if not ana.can_prove_equal(tirx.floormod(offset, align), 0):
                    raise CompilerError(
                        f"wgmma operand {'AB'[arg]} ({name} + {offset} bytes) is not on a {align}-byte boundary "
                        f"in shared memory, which its {align // 8}-byte swizzle needs; compile this kernel with "
                        f"pass_configs={{'tl.disable_wgmma': True}} and report it"
                    )

        walk(func.body, [(tirx.Evaluate, on_eval)])

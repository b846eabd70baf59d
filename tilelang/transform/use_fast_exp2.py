"""Pass `use_fast_exp2`: `T.exp2` of float32 values becomes the GPU's approximate base-2 exponential,
`tl::fast_exp2` (PTX `ex2.approx.ftz.f32`, one special-function-unit instruction), as the public
TileLang compilers emit by default. CUDA's `exp2f`, which TVM emits otherwise, wraps the same
instruction in a range check and two multiplies (for subnormal results): an attention loop's softmax
then runs about 200 more instructions per block. The approximation's relative error is about 2^-22;
results below 2^-126 become 0. `pass_configs={"tl.disable_fast_math": True}` keeps `exp2f`.

Before:  S[i] = T.exp2(S[i] * 0.18 - m[i])
After:   S[i] = T.call_pure_extern("float32", "tl::fast_exp2", S[i] * 0.18 - m[i])

Runs on per-thread TIR (after `lower_tile_ops`), before vectorization: a vector of exps becomes one
call per lane in the generated code. Requires nothing; guarantees no float32 `exp2` is left (other
types keep theirs).
"""

from __future__ import annotations

import tvm
import tvm_ffi
from tvm import ir, tirx

_EXP2 = ir.Op.get("tirx.exp2")


def use_fast_exp2(func: tirx.PrimFunc) -> tirx.PrimFunc:
    def on_call(call):
        dtype = tvm.DataType(str(call.ty.dtype)) if isinstance(call.op, ir.Op) and call.op.same_as(_EXP2) else None
        if dtype is None or dtype.type_code != tvm.DataTypeCode.FLOAT or dtype.bits != 32:
            return call
        return tirx.call_pure_extern(str(call.ty.dtype), "tl::fast_exp2", call.args[0])

    body = tvm_ffi.structural_map(func.body, [(ir.Call, on_call)], order="post")
    return func if body.same_as(func.body) else func.with_body(body)

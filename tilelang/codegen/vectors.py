"""Vector values TVM's CUDA code generator prints wrong, as calls of `convert.h`'s helpers.

TVM 0.27 prints a vector cast that involves fp8 as one C cast of the whole vector, `(T)(v)`. That
is a conversion only where CUDA has one between the two types: float, half and bfloat16 vectors
of 2 and 4 lanes to and from cuda_fp8.h's x2/x4 types. Past 4 lanes TVM holds the vectors in
plain integer types (8 x fp8 in a uint2, 8 x float in a ulonglong4), so the cast does not compile,
or copies the bits (fp8 e4m3 to e5m2); between the two fp8 formats no cast compiles, even of a
scalar (which goes through float here, exactly). It has no broadcast of more than 4 fp8 lanes at
all (an internal check fails). Right before the code generator (after `templates.spell`), each
such vector becomes a call of the header's helper, which converts each lane as the scalar cast does:

    T.Cast("float8_e4m3fnx8", x: float32x8)  ->  tl::vec_cast<__nv_fp8_e4m3, float, 8>(x)
    T.Broadcast(v: float8_e4m3fn, 16)        ->  tl::vec_broadcast<__nv_fp8_e4m3, 16>(v)

Values TVM prints right are left as they are, so code that compiled before is unchanged.

Buffers of 4-bit values (int4, float4_e2m1fn) it reads two to a byte but stores a byte each:
fp4 ones are bytes by then (`transform/pack_fp4_tensors.py`), a kernel with another is refused by
name before the code generator runs (`refuse_sub_byte_buffers`).
"""

from __future__ import annotations

import tvm_ffi
from tvm import DataType, ir, tirx
from tvm.backend.cuda.op import cuda_func_call

from tilelang.errors import at_span
from tilelang.utils.ir import first_use_span

# The C++ type of one lane of each dtype a converted vector may have.
LANE_TYPES = {
    "float64": "double",
    "float32": "float",
    "float16": "half",
    "bfloat16": "nv_bfloat16",
    "float8_e4m3fn": "__nv_fp8_e4m3",
    "float8_e5m2": "__nv_fp8_e5m2",
    "int8": "signed char",
    "uint8": "unsigned char",
    "int16": "short",
    "uint16": "unsigned short",
    "int32": "int",
    "uint32": "unsigned int",
    "int64": "long long",
    "uint64": "unsigned long long",
}
FP8 = ("float8_e4m3fn", "float8_e5m2")
HEADER_CALL = "tl::vec_"  # the helpers' prefix: codegen/cuda.py includes convert.h for it


def tvm_converts(src: str, dst: str, lanes: int) -> bool:
    """Whether TVM's printed cast of a `lanes`-lane vector from `src` to `dst` lanes converts each
    lane (checked with nvcc for every pair of float32/float16/bfloat16/fp8 at 2 to 16 lanes)."""
    if src == dst or (src not in FP8 and dst not in FP8):
        return True  # no conversion, or TVM converts lane by lane
    if lanes not in (2, 4) or (src in FP8 and dst in FP8):
        return False
    if "float32" in (src, dst) or "float16" in (src, dst) or src == "bfloat16":
        return True  # cuda_fp8.h's x2/x4 constructors and conversion operators
    # fp8 to bfloat16: TVM's bfloat16 x4 type converts from e4m3 only; x2 has a helper for both.
    return dst == "bfloat16" and (lanes == 2 or src == "float8_e4m3fn")


def _lanes(ty) -> tuple:
    dt = DataType(str(ty.dtype))
    return str(dt.with_lanes(1)), int(dt.lanes), str(dt)


def _call(name: str, vector: str, arg):
    # TVM prints an extern call of a vector type lane by lane; a CUDA function call it prints as is.
    return cuda_func_call(name, arg, source_code="", return_type=vector)


def _cast(cast: tirx.Cast):
    dst, lanes, vector = _lanes(cast.ty)
    src, _, _ = _lanes(cast.value.ty)
    if lanes == 1 and src in FP8 and dst in FP8 and src != dst:
        return tirx.Cast(dst, tirx.Cast("float32", cast.value))  # no C++ conversion between the formats
    if lanes == 1 or tvm_converts(src, dst, lanes) or dst not in LANE_TYPES or src not in LANE_TYPES:
        return cast
    return _call(f"tl::vec_cast<{LANE_TYPES[dst]}, {LANE_TYPES[src]}, {lanes}>", vector, cast.value)


def _broadcast(node: tirx.Broadcast):
    elem, lanes, vector = _lanes(node.ty)
    if elem not in FP8 or lanes <= 4:
        return node
    return _call(f"tl::vec_broadcast<{LANE_TYPES[elem]}, {lanes}>", vector, node.value)


def refuse_sub_byte_buffers(mod) -> None:
    """A UserError for a kernel with a buffer of 4-bit values (int4, ...; fp4 ones are bytes by now): TVM's code
    generator packs two to a byte when it reads them but stores each into a whole byte (clobbering
    its neighbour), and the host code generator has no type for them, so such kernels would
    compute wrong values or fail inside TVM."""
    for gv, func in mod.functions.items():
        if not isinstance(func, tirx.PrimFunc):
            continue
        found = []
        tvm_ffi.structural_walk(
            func.body, [(tirx.AllocBuffer, found.append), (tirx.DeclBuffer, found.append)], order="pre"
        )
        for node in found:
            dt = DataType(str(node.buffer.dtype))
            if dt.bits < 8 and str(dt) != "bool":
                name = func.attrs.get("global_symbol", gv.name_hint) if func.attrs is not None else gv.name_hint
                raise at_span(
                    f"kernel {name}: '{node.buffer.name}' holds {dt.with_lanes(1)} values; tilelang compiles "
                    "tensors and tiles of 4-bit values only as T.float4_e2m1fn. Keep other 4-bit data packed in a "
                    "uint8 tensor (two values per byte) and unpack it with bit operations (>>, &, T.reinterpret) "
                    "or a T.import_source helper, as the public dequantize_gemm examples do",
                    node.span or first_use_span(func.body, node.buffer),
                )


def spell(mod):
    """`mod` with each vector value TVM would print wrong spelled as a call of a `convert.h` helper."""
    funcs = {}
    for gv, func in mod.functions.items():
        if isinstance(func, tirx.PrimFunc):
            rules = [(tirx.Cast, _cast), (tirx.Broadcast, _broadcast)]
            func = func.with_body(tvm_ffi.structural_map(func.body, rules, order="post"))
        funcs[gv] = func
    return ir.IRModule(funcs, attrs=mod.attrs)

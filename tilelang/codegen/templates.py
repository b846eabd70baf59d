"""The C++ names of the device intrinsics (`tilelang/intrinsics.py`): the one place that spells them.

Lowering leaves each templated device call as an intrinsic whose template parameters are integer
arguments. Right before TVM's CUDA codegen, `spell` turns every such call into the plain extern
call TVM prints, and gathers what the code generator adds around the kernels:

    T.tl_device_wgmma_ss(128, 128, 64, 2, 1, 0, 1, ..., A, B, C, wg)
      -> tl::wgmma_ss<128, 128, 64, 2, 1, false, true, ...>(A, B, C, wg);
    T.tl_device_cluster_dims(2, 1, 1)
      -> tl::cluster_dims<2, 1, 1>();  and __cluster_dims__(2, 1, 1) on the kernel

A template's C++ name is `tl::<intrinsic name>`, its parameters in the intrinsic's order, flags
as `true`/`false`. What the generated source is read for afterwards (ptxas's register report
against the setmaxnreg calls, `register_counts.py`) uses `setmaxnreg_calls` here, the inverse of
this spelling.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

import tvm_ffi
from tvm import ir, tirx

from tilelang import intrinsics
from tilelang.codegen import wgmma_isa
from tilelang.errors import CompilerError


def name(intrinsic: intrinsics.Intrinsic, template: dict) -> str:
    """The C++ name of `intrinsic` instantiated with `template` ({parameter: value})."""
    if not intrinsic.params:
        return f"tl::{intrinsic.name}"
    values = [
        ("true" if template[p] else "false") if p in intrinsic.flags else str(int(template[p]))
        for p in intrinsic.params
    ]
    return f"tl::{intrinsic.name}<{', '.join(values)}>"


@dataclass
class Kernel:
    """What the code generator adds around one `__global__` function, from its intrinsics."""

    cluster_dims: tuple | None = None  # (x, y, z) of a kernel launched in clusters
    wgmma_forms: set = field(default_factory=set)  # wgmma_isa.Form of each wgmma instruction it issues
    setmaxnreg: list = field(default_factory=list)  # [("inc" | "dec", registers)]
    setmaxnreg_lines: list = field(default_factory=list)  # "file:line" of the user's T.set_max_nreg, or None


def spell(mod) -> tuple:
    """(`mod` with every intrinsic call spelled as an extern call, {kernel name: Kernel})."""
    kernels, funcs = {}, {}
    for gv, func in mod.functions.items():
        if not isinstance(func, tirx.PrimFunc):
            funcs[gv] = func
            continue
        facts = Kernel()
        symbol = func.attrs.get("global_symbol") if func.attrs is not None else None
        kernels[str(symbol) if symbol is not None else gv.name_hint] = facts

        def on_call(call, facts=facts):
            intrinsic = intrinsics.lookup(call)
            if intrinsic is None:
                return call
            template = intrinsic.template(call)
            _note(facts, intrinsic, template, intrinsic.args(call), call.span)
            return tirx.call_extern(str(call.ty.dtype), name(intrinsic, template), *intrinsic.args(call))

        funcs[gv] = func.with_body(tvm_ffi.structural_map(func.body, [(ir.Call, on_call)], order="post"))
    return ir.IRModule(funcs, attrs=mod.attrs), kernels


def _note(facts: Kernel, intrinsic, template: dict, args: list, span=None) -> None:
    if intrinsic is intrinsics.CLUSTER_DIMS:
        facts.cluster_dims = (template["x"], template["y"], template["z"])
    elif intrinsic in intrinsics.WGMMAS:
        # Arguments A, B, C, ...: B is always a shared tile; A has B's element type.
        n, b_dtype, c_dtype = template["N"] // template["wg_n"], _pointee(args[1]), _pointee(args[2])
        facts.wgmma_forms.add(wgmma_isa.Form(n, b_dtype, c_dtype, intrinsic is intrinsics.WGMMA_RS))
    elif intrinsic in intrinsics.SETMAXNREGS:
        facts.setmaxnreg.append((intrinsic.name.rsplit("_", 1)[1], template["registers"]))
        source, line = getattr(getattr(span, "source_name", None), "name", None), getattr(span, "line", 0)
        facts.setmaxnreg_lines.append(f"{source}:{line}" if source and line else None)


def _pointee(ptr) -> str:
    """The element type a pointer argument points to: &buffer[i] or tvm_access_ptr(type, ...)."""
    if isinstance(ptr, tirx.Call) and ptr.op.same_as(ir.Op.get("tirx.address_of")):
        return str(ptr.args[0].source.dtype)  # the load of the addressed element
    if isinstance(ptr, tirx.Call) and ptr.op.same_as(ir.Op.get("tirx.tvm_access_ptr")):
        return str(ptr.args[0].dtype)
    raise CompilerError(f"codegen: cannot tell the element type a wgmma operand points to: {ptr}")


_SETMAXNREG_LINE = re.compile(r"(tl::setmaxnreg_(?:inc|dec)<\d+>\(\);)[^\n]*")
_SETMAXNREG_SITE = re.compile(r"tl::setmaxnreg_(inc|dec)<(\d+)>(?:\(\);[ \t]*// T\.set_max_nreg at ([^\n]+):(\d+))?")


def mark_setmaxnreg_lines(body: str, facts: Kernel) -> str:
    """A kernel's source with each setmaxnreg call the user wrote followed by `// T.set_max_nreg at
    file:line` (for the register check after ptxas, `register_counts.py`, which sees only the source).
    Unchanged unless its calls are the ones `facts` noted, in order."""
    if setmaxnreg_calls(body) != facts.setmaxnreg or not any(facts.setmaxnreg_lines):
        return body
    lines = iter(facts.setmaxnreg_lines)

    def mark(m):
        where = next(lines)
        return m.group(1) + (f"  // T.set_max_nreg at {where}" if where else "")

    return _SETMAXNREG_LINE.sub(mark, body)


def setmaxnreg_sites(source: str) -> list:
    """[("inc" | "dec", registers, (file, line) of the user's T.set_max_nreg or None)] of the setmaxnreg
    calls in generated source, in order (the lines `mark_setmaxnreg_lines` wrote)."""
    return [(k, int(r), (f, int(n)) if f else None) for k, r, f, n in _SETMAXNREG_SITE.findall(source)]


def setmaxnreg_calls(source: str) -> list:
    """[("inc" | "dec", registers)] of the setmaxnreg calls in generated source, in order."""
    return [(kind, registers) for kind, registers, _ in setmaxnreg_sites(source)]

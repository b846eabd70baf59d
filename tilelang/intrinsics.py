"""Device intrinsics: the calls lowering leaves for the device templates (`src/tl_templates/cuda`),
with their template parameters as integer arguments of the call.

An intrinsic is a TVM op `tl.device.<name>`. Its first arguments are the template parameters, in
the order `params` names them (ints; flags 0 or 1), the rest are the device function's own:

    WGMMA_SS.stmt(dict(M=128, N=128, K=64, ...), a_ptr, b_ptr, c_ptr, warpgroup)
      IR:   T.tl_device_wgmma_ss(128, 128, 64, ..., a_ptr, b_ptr, c_ptr, warpgroup)
      CUDA: tl::wgmma_ss<128, 128, 64, ...>(a_ptr, b_ptr, c_ptr, warpgroup);

A pass that needs a decision made earlier reads it by name (`WGMMA_SS.param(call, "swz_a")`),
never from a C++ name. `codegen/templates.py` spells each call as the template it stands for,
just before TVM's CUDA codegen; no other module spells or parses template names.

Every layer may import this module (it imports only TVM).
"""

from __future__ import annotations

import re
from dataclasses import dataclass

import tvm
from tvm import ir, tirx

PREFIX = "tl.device."


@dataclass(frozen=True)
class Intrinsic:
    """A device function template: its name, its template parameters (in order), and which of
    them are flags (spelled true/false)."""

    name: str
    params: tuple = ()
    flags: frozenset = frozenset()

    @property
    def op_name(self) -> str:
        return PREFIX + self.name

    def call(self, template: dict, *args, dtype: str = "void") -> ir.Call:
        """The call with template parameters `template` (every name in `params`) and arguments `args`."""
        if set(template) != set(self.params):
            raise ValueError(f"intrinsic {self.name}: template parameters {sorted(template)}, want {self.params}")
        values = [tirx.const(int(template[p]), "int32") for p in self.params]
        return ir.Call(ir.Op.get(_register(self)), values + list(args), ret_ty=dtype)

    def stmt(self, template: dict | None = None, *args) -> tirx.Evaluate:
        """The call as a statement."""
        return tirx.Evaluate(self.call(template or {}, *args))

    def matches(self, node) -> bool:
        """Whether `node` (a call, or a statement evaluating one) calls this intrinsic."""
        call = _call_of(node)
        return call is not None and call.op.name == self.op_name

    def param(self, node, name: str) -> int:
        """The value of template parameter `name` of a call to this intrinsic."""
        return int(_call_of(node).args[self.params.index(name)].value)

    def template(self, node) -> dict:
        """{parameter: value} of a call to this intrinsic."""
        call = _call_of(node)
        return {p: int(a.value) for p, a in zip(self.params, call.args)}

    def args(self, node) -> list:
        """The device function's own arguments of a call to this intrinsic."""
        return list(_call_of(node).args[len(self.params) :])


_BY_OP: dict[str, Intrinsic] = {}


def _register(intrinsic: Intrinsic) -> str:
    full = intrinsic.op_name
    if full not in _BY_OP:
        tvm.ir.register_op_attr(full, "TCallEffectKind", tirx.CallEffectKind.Opaque.value)
        tvm.ir.register_op_attr(full, "TScriptPrinterName", full.replace(".", "_"))
        _BY_OP[full] = intrinsic
    return full


def _call_of(node):
    call = node.value if isinstance(node, tirx.Evaluate) else node
    if isinstance(call, ir.Call) and isinstance(call.op, ir.Op) and call.op.name.startswith(PREFIX):
        return call
    return None


def lookup(node) -> Intrinsic | None:
    """The intrinsic `node` (a call, or a statement evaluating one) calls, or None."""
    call = _call_of(node)
    return _BY_OP.get(call.op.name) if call is not None else None


def device_call(node):
    """(name, template parameters, arguments) of a device call (an `ir.Call`, or a statement
    evaluating one): an intrinsic read by its parameters ("tl::wgmma_ss", (64, 128, ...), args), or
    an extern call with its template parameters parsed ("tl::mbarrier_wait", (), args); None for
    anything else (a TVM builtin, an expression)."""
    call = node.value if isinstance(node, tirx.Evaluate) else node
    if not isinstance(call, ir.Call) or not isinstance(call.op, ir.Op):
        return None
    if call.op.name.startswith(PREFIX):
        intrinsic = lookup(call)
        return f"tl::{intrinsic.name}", tuple(intrinsic.template(call).values()), intrinsic.args(call)
    if call.op.name == "tirx.call_extern":
        name = str(call.args[0].value)
        base, _, template = name.partition("<")
        values = tuple(int(x) if x not in ("true", "false") else int(x == "true") for x in _TOKEN.findall(template))
        return base, values, list(call.args[1:])
    return None


def call_name(node) -> str | None:
    """The name of the device function `node` calls (without template parameters), or None."""
    found = device_call(node)
    return found[0] if found else None


_TOKEN = re.compile(r"-?\d+|true|false")


def _define(name: str, params: str = "", flags: str = "") -> Intrinsic:
    intrinsic = Intrinsic(name, tuple(params.split()), frozenset(flags.split()))
    _register(intrinsic)
    return intrinsic


# ---- gemm (op/gemm/mma.py, op/gemm/wgmma.py; gemm_mma.h, gemm_wgmma.h) ----------------------------

# mma.sync over WarpM x WarpN warps; lda/ldb the operand rows' lengths, swz_* their 16-byte-chunk
# swizzle bits, rows_* the rows of an operand stored in wgmma's panels (0: row-major). Arguments: A,
# B, C pointers (and a run-time clear flag).
_MMA = "M N K warp_m warp_n trans_a trans_b clear lda ldb swz_a swz_b rows_a rows_b"
GEMM_SS = _define("gemm_ss", _MMA, "trans_a trans_b clear")
GEMM_RS = _define("gemm_rs", _MMA, "trans_a trans_b clear")
GEMM_SR = _define("gemm_sr", _MMA, "trans_a trans_b clear")

# wgmma over WgM x WgN warpgroups; rows/ld/swz of each shared operand's gmma_panels tile (0 for an
# A in registers); wait: groups left running on return (-1: none waited for); fence: a proxy
# fence before reading shared operands. Arguments: A, B, C pointers, the warpgroup index (and a
# run-time clear flag).
_WGMMA = "M N K wg_m wg_n trans_a trans_b clear rows_a ld_a swz_a rows_b ld_b swz_b wait fence"
WGMMA_SS = _define("wgmma_ss", _WGMMA, "trans_a trans_b clear fence")
WGMMA_RS = _define("wgmma_rs", _WGMMA, "trans_a trans_b clear fence")
GEMMS = (GEMM_SS, GEMM_RS, GEMM_SR, WGMMA_SS, WGMMA_RS)
WGMMAS = (WGMMA_SS, WGMMA_RS)

# 2:4 sparse A (compressed) times dense B with mma.sp (op/gemm_sp.py, gemm_sp.h); lde is the metadata
# tile's row length and trans_e whether it is stored K-major, the rest as for mma.sync. Arguments: A, E,
# B, C pointers (and a run-time clear flag).
_MMA_SP = "M N K warp_m warp_n trans_a trans_b trans_e clear lda ldb lde swz_a swz_b"
GEMM_SP_SS = _define("gemm_sp_ss", _MMA_SP, "trans_a trans_b trans_e clear")
GEMM_SP_RS = _define("gemm_sp_rs", _MMA_SP, "trans_a trans_b trans_e clear")
GEMM_SP_SR = _define("gemm_sp_sr", _MMA_SP, "trans_a trans_b trans_e clear")
GEMM_SP_RR = _define("gemm_sp_rr", _MMA_SP, "trans_a trans_b trans_e clear")

# The per-warpgroup N the wgmma planner takes for every operand type (op/gemm/wgmma.py N_SIZES).
WGMMA_BASE_N = (8, 16, 32, 64, 96, 128, 192, 256)

# Wait until at most `pending` of this thread's wgmma groups still run.
WGMMA_WAIT = _define("wgmma_wait", "pending")
# The `count` registers of a fragment's array are read by the tensor cores only up to here (after a
# wgmma wait); argument: the array.
FENCE_REGISTERS = _define("fence_registers", "count")

# ---- pipelines (copy_async.h, tma.h) ---------------------------------------------------------------

# Copy `bytes` (4, 8 or 16) from global to shared memory asynchronously; arguments: destination,
# source, and whether the source is in bounds (else zeros).
CP_ASYNC = _define("cp_async", "bytes")
# Wait until at most `pending` cp.async groups of this thread are in flight.
CP_ASYNC_WAIT = _define("cp_async_wait", "pending")
# The kernel runs in clusters of x * y * z blocks (a statement of the kernel's prelude; the code
# generator also puts `__cluster_dims__` on the kernel).
CLUSTER_DIMS = _define("cluster_dims", "x y z")
# This warpgroup's registers per thread become `registers` (setmaxnreg.inc / .dec).
SETMAXNREG_INC = _define("setmaxnreg_inc", "registers")
SETMAXNREG_DEC = _define("setmaxnreg_dec", "registers")
SETMAXNREGS = (SETMAXNREG_INC, SETMAXNREG_DEC)
# `bar.sync id, threads`: a barrier over `threads` threads (ids: transform/barrier_ids.py).
NAMED_BARRIER_SYNC = _define("named_barrier_sync", "id threads")

# ---- per-warp tensor-core instructions of hand-written kernels (tilelang/cuda/intrinsics; warp_mma.h) ----

# ldmatrix of `num` 8x8 matrices of 16-bit words (transposed with `trans`); arguments: the thread's
# destination elements (a pointer), and the shared element this lane's row starts at, passed as a
# load of it (the template takes its address): barrier insertion then sees the read of shared memory,
# and a tile's layout re-indexes it like any other access.
LDMATRIX = _define("ldmatrix", "num trans", "trans")
# One mma.sync m16n8k<k> on a thread's registers, the element types picking the instruction;
# arguments: A, B and C element pointers.
MMA_SYNC = _define("mma_sync", "k")

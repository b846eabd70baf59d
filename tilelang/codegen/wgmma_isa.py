"""The wgmma instructions a kernel issues, written into its source by the code generator.

gemm_wgmma.h declares `tl::wgmma_detail::Instr<N, TA, TC>`, one `wgmma.mma_async` of shape
m64 x N x (32 bytes of A's row) for element types TA (A and B) and TC (the accumulator), and leaves
it undefined: the code generator defines the instances a kernel uses (`definitions`), from the
wgmma calls it spells (templates.Kernel.wgmma_forms). An instruction's accumulator is a list of
registers, N/2 of them for 32-bit accumulators, N/4 (pairs of halves) for f16, each its own asm
operand: a header holding every N and type would be ~10k lines for nvcc to read in every Hopper
kernel, where a kernel uses one to three.

PTX ISA, "Asynchronous Warpgroup Level Matrix Multiply-Accumulate Instructions" (wgmma.mma_async):
    wgmma.mma_async.sync.aligned.m64nNkK.<c>.<a>.<b>  d, a-desc | {a0..a3}, b-desc, scale-d
        [, imm-scale-a, imm-scale-b [, imm-trans-a (A from shared only), imm-trans-b]]
scale-d is a predicate (0: D = A*B, 1: D += A*B); the scales of A and B are +1 here; only .f16 and
.bf16 operands take the transpose immediates (1: the operand is MN-major in shared memory), the
other types read K-major operands only and integer types take no scale immediates either.

    Instr<64, half, float>::ss<TransA, TransB>(a_desc, b_desc, d, scale_d)
    Instr<64, half, float>::rs<TransB>(a_regs, b_desc, d, scale_d)   (A in four 32-bit registers)
"""

from __future__ import annotations

from dataclasses import dataclass

# element type name (TVM) -> (C++ type, PTX type, bytes)
_TYPES = {
    "float16": ("half", "f16", 2),
    "bfloat16": ("__nv_bfloat16", "bf16", 2),
    "float32": ("float", "tf32", 4),  # float operands run as tf32
    "float8_e4m3fn": ("__nv_fp8_e4m3", "e4m3", 1),
    "float8_e4m3": ("__nv_fp8_e4m3", "e4m3", 1),
    "float8_e5m2": ("__nv_fp8_e5m2", "e5m2", 1),
    "int8": ("int8_t", "s8", 1),
}
# accumulator type name -> (C++ type, PTX type, accumulator elements per 32-bit register)
_ACCUMULATORS = {"float32": ("float", "f32", 1), "float16": ("half", "f16", 2), "int32": ("int", "s32", 1)}


@dataclass(frozen=True)
class Form:
    """One instruction shape a kernel uses: a warpgroup's N, the operand and accumulator types, and
    whether A comes from registers."""

    n: int
    a_dtype: str
    c_dtype: str
    a_in_registers: bool = False

    def check(self) -> None:
        if self.a_dtype not in _TYPES or self.c_dtype not in _ACCUMULATORS:
            raise ValueError(f"wgmma has no form for {self.a_dtype} operands into {self.c_dtype}")
        if self.n % 8 or not 8 <= self.n <= 256:
            raise ValueError(f"wgmma's N is a multiple of 8 from 8 to 256, not {self.n}")


def _instruction(form: Form, a_in_registers: bool) -> str:
    """The asm statement of one wgmma.mma_async (a C++ statement, operands numbered from %0)."""
    _, a_ptx, a_bytes = _TYPES[form.a_dtype]
    c_cpp, c_ptx, per_reg = _ACCUMULATORS[form.c_dtype]
    k = 32 // a_bytes
    regs = form.n // 2 // per_reg  # accumulator registers per thread: 64 * N / 128 values
    d = ", ".join(f"%{i}" for i in range(regs))
    at = regs  # the operands after the accumulators
    a = f"{{%{at}, %{at + 1}, %{at + 2}, %{at + 3}}}" if a_in_registers else f"%{at}"
    b, scale = (at + 4, at + 5) if a_in_registers else (at + 1, at + 2)
    sixteen_bit = a_ptx in ("f16", "bf16")
    immediates = ""
    if c_ptx != "s32":
        immediates = ", 1, 1"
        if sixteen_bit:
            immediates += f", %{scale + 1}" if a_in_registers else f", %{scale + 1}, %{scale + 2}"
    name = f"wgmma.mma_async.sync.aligned.m64n{form.n}k{k}.{c_ptx}.{a_ptx}.{a_ptx}"
    text = (
        f'"{{\\n.reg .pred p;\\nsetp.ne.b32 p, %{scale}, 0;\\n"\n'
        f'        "{name} {{{d}}}, {a}, %{b}, p{immediates};\\n}}\\n"'
    )
    constraint = "+f" if c_cpp == "float" else "+r"
    outputs = ", ".join(f'"{constraint}"(d[{i}])' for i in range(regs))
    a_operands = ", ".join(f'"r"(a[{i}])' for i in range(4)) if a_in_registers else '"l"(a)'
    inputs = f'{a_operands}, "l"(b), "r"(scale_d)'
    if c_ptx != "s32" and sixteen_bit:
        inputs += ', "n"(int(TransB))' if a_in_registers else ', "n"(int(TransA)), "n"(int(TransB))'
    return f"    asm volatile({text}\n        : {outputs}\n        : {inputs});"


def definition(form: Form) -> str:
    """The C++ specialization of tl::wgmma_detail::Instr for `form` (with its A-in-registers
    member when the form has A in registers)."""
    form.check()
    a_cpp, a_ptx, _ = _TYPES[form.a_dtype]
    c_cpp, _, per_reg = _ACCUMULATORS[form.c_dtype]
    reg = "float" if c_cpp == "float" else "uint32_t"
    lines = [
        f"template <> struct Instr<{form.n}, {a_cpp}, {c_cpp}> {{",
        f"  using Reg = {reg};",
        "  template <bool TransA, bool TransB>",
        "  TL_DEVICE static void ss(uint64_t a, uint64_t b, Reg* d, int scale_d) {",
        _instruction(form, False),
        "  }",
    ]
    if form.a_in_registers:
        lines += [
            "  template <bool TransB>",
            "  TL_DEVICE static void rs(const uint32_t* a, uint64_t b, Reg* d, int scale_d) {",
            _instruction(form, True),
            "  }",
        ]
    return "\n".join(lines + ["};"])


def definitions(forms) -> str:
    """The Instr specializations for `forms` (an iterable of Form), inside tl::wgmma_detail; forms
    of the same (N, types) share one specialization, with `rs` if any of them has A in registers."""
    merged: dict = {}
    for f in forms:
        key = (f.n, _TYPES[f.a_dtype][0], _ACCUMULATORS[f.c_dtype][0])
        merged[key] = Form(f.n, f.a_dtype, f.c_dtype, f.a_in_registers or merged.get(key, f).a_in_registers)
    if not merged:
        return ""
    body = "\n".join(definition(f) for _, f in sorted(merged.items()))
    return f"namespace tl {{\nnamespace wgmma_detail {{\n{body}\n}}  // namespace wgmma_detail\n}}  // namespace tl\n"

"""The wgmma instructions the code generator writes into a kernel (codegen/wgmma_isa.py) against
CuTe's atoms for the same shapes: a kernel issuing one instruction through each is compiled to PTX by
nvcc, and the wgmma.mma_async lines (instruction, registers, immediates) must be the same. CuTe is
the reference here only; the generated kernels no longer include it."""

import os
import re
import subprocess

import pytest

from tilelang import env
from tilelang.codegen import wgmma_isa

# (N, operand type, accumulator type, A in registers, A MN-major, B MN-major), and CuTe's atom name.
CASES = [
    (64, "float16", "float32", False, False, False, "MMA_64x64x16_F32F16F16_SS<Major::K, Major::K>"),
    (128, "float16", "float32", False, True, True, "MMA_64x128x16_F32F16F16_SS<Major::MN, Major::MN>"),
    (256, "bfloat16", "float32", True, False, True, "MMA_64x256x16_F32BF16BF16_RS<Major::K, Major::MN>"),
    (176, "float16", "float32", False, False, True, "MMA_64x176x16_F32F16F16_SS<Major::K, Major::MN>"),
    (8, "float16", "float16", True, False, False, "MMA_64x8x16_F16F16F16_RS<Major::K, Major::K>"),
    (96, "float16", "float16", False, True, False, "MMA_64x96x16_F16F16F16_SS<Major::MN, Major::K>"),
    (128, "float32", "float32", False, False, False, "MMA_64x128x8_F32TF32TF32_SS_TN<>"),
    (64, "float32", "float32", True, False, False, "MMA_64x64x8_F32TF32TF32_RS_TN<>"),
    (128, "float8_e4m3fn", "float32", False, False, False, "MMA_64x128x32_F32E4M3E4M3_SS_TN<>"),
    (32, "float8_e5m2", "float32", False, False, False, "MMA_64x32x32_F32E5M2E5M2_SS_TN<>"),
    (192, "int8", "int32", False, False, False, "MMA_64x192x32_S32S8S8_SS_TN"),
]

_KERNEL = """
extern "C" __global__ void k(unsigned long long a, unsigned long long b, {reg}* out, int s, const uint32_t* ar) {{
  {reg} d[{regs}];
#pragma unroll
  for (int i = 0; i < {regs}; ++i) d[i] = out[i];
  uint32_t av[4] = {{ar[0], ar[1], ar[2], ar[3]}};
  {call};
#pragma unroll
  for (int i = 0; i < {regs}; ++i) out[i] = d[i];
}}
"""


def _wgmma_lines(source: str, tmp_path, name: str) -> list:
    cu = os.path.join(tmp_path, name + ".cu")
    with open(cu, "w") as f:
        f.write(source)
    flags = ["-std=c++17", "-O3", "-gencode=arch=compute_90a,code=sm_90a", "--expt-relaxed-constexpr", "-w"]
    flags += [f"-I{env.template_path()}", f"-I{env.cutlass_include()}"]
    subprocess.run([env.nvcc_path(), *flags, "-ptx", "-o", cu + ".ptx", cu], check=True, capture_output=True)
    with open(cu + ".ptx") as f:
        lines = [re.sub(r"\s*([,{}])\s*", r"\1", " ".join(line.split())) for line in f]
    return [line for line in lines if line.startswith("wgmma.mma_async")]


@pytest.mark.parametrize("n, a_dtype, c_dtype, a_regs, trans_a, trans_b, atom", CASES)
def test_an_instruction_is_cutes_atom(n, a_dtype, c_dtype, a_regs, trans_a, trans_b, atom, tmp_path):
    form = wgmma_isa.Form(n, a_dtype, c_dtype, a_regs)
    a_cpp, c_cpp = wgmma_isa._TYPES[a_dtype][0], wgmma_isa._ACCUMULATORS[c_dtype][0]
    reg = "float" if c_cpp == "float" else "uint32_t"
    regs = n // 2 // (2 if c_dtype == "float16" else 1)
    instr = f"tl::wgmma_detail::Instr<{n}, {a_cpp}, {c_cpp}>"
    ours = (f"{instr}::template rs<{str(trans_b).lower()}>(av, b, d, s)" if a_regs
            else f"{instr}::template ss<{str(trans_a).lower()}, {str(trans_b).lower()}>(a, b, d, s)")  # fmt: skip
    header = '#include "tl_templates/cuda/gemm_wgmma.h"\n' + wgmma_isa.definitions([form])
    mine = _wgmma_lines(header + _KERNEL.format(reg=reg, regs=regs, call=ours), tmp_path, "ours")

    operands = ", ".join(f"d[{i}]" for i in range(regs))
    a = "av[0], av[1], av[2], av[3]" if a_regs else "a"
    cute = f"cute::SM90::GMMA::{atom}::fma({a}, b, {operands}, cute::SM90::GMMA::ScaleOut(s))"
    include = "#include <cute/arch/mma_sm90_gmma.hpp>\n#include <cute/arch/mma_sm90_gmma_ext.hpp>\n"
    include += "#include <cstdint>\nusing cute::SM90::GMMA::Major;\n"
    theirs = _wgmma_lines(include + _KERNEL.format(reg=reg, regs=regs, call=cute), tmp_path, "cute")
    assert mine and mine == theirs


def test_one_definition_per_shape_with_rs_where_any_use_has_a_in_registers():
    forms = [wgmma_isa.Form(64, "float16", "float32"), wgmma_isa.Form(64, "float16", "float32", True),
             wgmma_isa.Form(128, "bfloat16", "float32")]  # fmt: skip
    text = wgmma_isa.definitions(forms)
    assert re.findall(r"struct Instr<[^>]*>", text) == ["struct Instr<64, half, float>",
                                                       "struct Instr<128, __nv_bfloat16, float>"]  # fmt: skip
    assert text.count("static void rs(") == 1 and text.count("static void ss(") == 2
    assert wgmma_isa.definitions([]) == ""


@pytest.mark.parametrize("n, a_dtype, c_dtype", [(12, "float16", "float32"), (264, "float16", "float32"),
                                                 (64, "float64", "float32")])  # fmt: skip
def test_shapes_and_types_wgmma_does_not_have_are_refused(n, a_dtype, c_dtype):
    with pytest.raises(ValueError):
        wgmma_isa.definition(wgmma_isa.Form(n, a_dtype, c_dtype))

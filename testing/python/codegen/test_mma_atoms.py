"""gemm_mma.h's mma.sync atoms, written out without CuTe's headers: each compiles to what CuTe's atom
of the same instruction compiles to. CuTe's headers also pull in libcu++, whose unused 1-byte
globals (cuda::std's customization-point objects) land in the PTX; without them the cubins are
byte-identical."""

import re
import shutil
import subprocess

import pytest

from tilelang import env

needs_nvcc = pytest.mark.skipif(shutil.which("nvcc") is None, reason="nvcc not installed")

# (kernel, element type, accumulator type, CuTe's atom, accumulator registers): every Atom<...>.
ATOMS = [
    ("k_f16", "half", "float", "SM80_16x8x16_F32F16F16F32_TN", 4),
    ("k_bf16", "__nv_bfloat16", "float", "SM80_16x8x16_F32BF16BF16F32_TN", 4),
    ("k_f16_f16", "half", "half", "SM80_16x8x16_F16F16F16F16_TN", 2),
    ("k_tf32", "float", "float", "SM80_16x8x8_F32TF32TF32F32_TN", 4),
    ("k_s8", "int8_t", "int", "SM80_16x8x32_S32S8S8S32_TN", 4),
    ("k_e4m3", "__nv_fp8_e4m3", "float", "SM89_16x8x32_F32E4M3E4M3F32_TN", 4),
    ("k_e5m2", "__nv_fp8_e5m2", "float", "SM89_16x8x32_F32E5M2E5M2F32_TN", 4),
]


def _unit(ours: bool) -> str:
    """Kernels issuing each atom twice (the second accumulating on the first), through gemm_mma.h's
    Atom or through CuTe's atom directly."""
    out = ['#include "tl_templates/cuda/gemm_mma.h"\n']
    if not ours:
        out.append("#include <cute/arch/mma_sm80.hpp>\n#include <cute/arch/mma_sm89.hpp>\n")
    for kernel, ta, tc, cute_atom, regs in ATOMS:
        ctype = "uint32_t" if tc != "float" else "float"  # CuTe's register types
        d = ", ".join(f"d[{i}]" for i in range(regs))
        body = []
        for k in range(2):
            a, b = f"a + threadIdx.x * 4 + {128 * k}", f"b + threadIdx.x * 2 + {64 * k}"
            if ours:
                body.append(f"  tl::mma_detail::Atom<{ta}, {ta}, {tc}>::fma(r, {a}, {b});")
            else:
                args = ", ".join([d] + [f"({a})[{i}]" for i in range(4)] + [f"({b})[{i}]" for i in range(2)] + [d])
                body.append(f"  cute::{cute_atom}::fma({args});")
        fp8 = "e4m3" in kernel or "e5m2" in kernel
        out.append(
            ("#if __CUDA_ARCH__ >= 890\n" if fp8 else "")
            + f'extern "C" __global__ void {kernel}(const uint32_t* a, const uint32_t* b, {tc}* c) {{\n'
            + f"  {tc} r[4];\n  for (int i = 0; i < 4; ++i) r[i] = c[i * 32 + threadIdx.x];\n"
            + f"  {ctype}* d = reinterpret_cast<{ctype}*>(r);\n"
            + "\n".join(body)
            + "\n  for (int i = 0; i < 4; ++i) c[i * 32 + threadIdx.x] = r[i];\n}\n"
            + ("#endif\n" if fp8 else "")
        )
    return "".join(out)


@needs_nvcc
@pytest.mark.parametrize("arch", ["sm_80", "sm_89", "sm_90a"])
def test_each_atom_compiles_to_cutes_cubin(tmp_path, arch):
    flags = ["-std=c++17", "-O3", f"-arch={arch}", "--expt-relaxed-constexpr", "-w"]
    flags += [f"-I{env.template_path()}", f"-I{env.cutlass_include()}"]
    ptxas = shutil.which("ptxas") or env.nvcc_path().replace("nvcc", "ptxas")
    cubins = []
    for ours in (False, True):
        cu = tmp_path / f"{'ours' if ours else 'cute'}.cu"
        cu.write_text(_unit(ours))
        ptx = tmp_path / f"{cu.stem}.ptx"
        out = subprocess.run([env.nvcc_path(), *flags, "-ptx", "-o", str(ptx), str(cu)], capture_output=True)
        assert out.returncode == 0, out.stderr.decode()[-3000:]
        text = ptx.read_text()
        assert text.count("mma.sync.aligned") == 2 * (len(ATOMS) if arch != "sm_80" else len(ATOMS) - 2)
        # libcu++'s unused globals (only in CuTe's unit): `.global .align 1 .b8 _ZN..cuda3std..[1];`
        ptx.write_text(re.sub(r"^\.global \.align 1 \.b8 _ZN\w*cuda3std\w*\[1\];\n", "", text, flags=re.M))
        cubin = tmp_path / f"{cu.stem}.cubin"
        out = subprocess.run([ptxas, "-O3", f"-arch={arch}", "-o", str(cubin), str(ptx)], capture_output=True)
        assert out.returncode == 0, out.stderr.decode()[-3000:]
        cubins.append(cubin.read_bytes())
    assert cubins[0] == cubins[1]

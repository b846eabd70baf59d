"""src/tl_templates/cuda/wgmma_atoms.h: the wgmma instructions of gemm_wgmma.h without CuTe's
headers. The header is what its generator writes, and each atom compiles to the same cubin as
CuTe's atom of the same name (every operand form and transposition, base and extended N)."""

import importlib.util
import os
import shutil
import subprocess

import pytest

from tilelang import env

CUDA_DIR = os.path.join(env.template_path(), "tl_templates", "cuda")
spec = importlib.util.spec_from_file_location("wgmma_atoms", os.path.join(CUDA_DIR, "wgmma_atoms.py"))
atoms = importlib.util.module_from_spec(spec)
spec.loader.exec_module(atoms)

needs_nvcc = pytest.mark.skipif(shutil.which("nvcc") is None, reason="nvcc not installed")


def test_the_header_is_the_generators_output():
    with open(atoms.PATH) as f:
        assert f.read() == atoms.header(), "run python src/tl_templates/cuda/wgmma_atoms.py"


def _kernels(ours: bool, ns, kinds) -> str:
    """One kernel per atom (per transposition of 16-bit operands) that loads the accumulators, issues
    the instruction and stores them; named alike in both units, so the cubins compare byte for byte."""
    out = []
    for n in ns:
        for name, _, k, ctype, _, per_reg, transposes, has_rs, _ in atoms.KINDS:
            if name not in kinds:
                continue
            regs = n // 2 // per_reg
            for rs in (False, True) if has_rs else (False,):
                majors = [("K", "K"), ("K", "MN"), ("MN", "K"), ("MN", "MN")] if transposes else [None]
                for major in majors:
                    if rs and major and major[0] == "MN":
                        continue
                    atom = f"MMA_64x{n}x{k}_{name}{'_RS' if rs else '_SS'}{'' if transposes else '_TN'}"
                    space = "tl::wgmma_atoms::" if ours else "cute::SM90::GMMA::"
                    targs = f"<{space}Major::{major[0]}, {space}Major::{major[1]}>" if major else ""
                    targs = targs or ("" if ours or name == "S32S8S8" else "<>")
                    a = "a[0], a[1], a[2], a[3]" if rs else "da[0]"
                    d = ", ".join(f"r[{i}]" for i in range(regs))
                    kernel = f"k_{atom}_{'_'.join(major or ())}"
                    params = f"const uint64_t* da, const uint32_t* a, {ctype}* c, int s"
                    out.append(
                        f'extern "C" __global__ void {kernel}({params}) {{\n'
                        f"  {ctype} r[{regs}];\n"
                        f"  for (int i = 0; i < {regs}; ++i) r[i] = c[i * 128 + threadIdx.x];\n"
                        f"  {space}{atom}{targs}::fma({a}, da[1], {d}, {space}ScaleOut(s));\n"
                        f"  for (int i = 0; i < {regs}; ++i) c[i * 128 + threadIdx.x] = r[i];\n}}\n"
                    )
    if ours:
        head = '#define TL_WGMMA_EXTENDED_N 1\n#include <cstdint>\n#include "tl_templates/cuda/wgmma_atoms.h"\n'
    else:
        head = "#include <cstdint>\n#include <cute/arch/mma_sm90_gmma.hpp>\n"
        head += "#include <cute/arch/mma_sm90_gmma_ext.hpp>\n"
    return head + "".join(out)


@needs_nvcc
@pytest.mark.parametrize(
    "ns, kinds",
    [
        ((8, 64, 256), [k[0] for k in atoms.KINDS]),  # every type, smallest, middle and largest N
        ((24, 248), atoms.EXTENDED_KINDS),  # CuTe's extended atoms (TL_WGMMA_EXTENDED_N)
    ],
)
def test_each_atom_compiles_to_cutes_cubin(tmp_path, ns, kinds):
    flags = ["-std=c++17", "-O3", "-gencode=arch=compute_90a,code=sm_90a", "-w"]
    flags += [f"-I{env.template_path()}", f"-I{env.cutlass_include()}"]
    cubins = []
    for ours in (False, True):
        cu = tmp_path / f"{'ours' if ours else 'cute'}.cu"
        cu.write_text(_kernels(ours, ns, kinds))
        out = subprocess.run([env.nvcc_path(), *flags, "-cubin", "-o", f"{cu}.cubin", str(cu)], capture_output=True)
        assert out.returncode == 0, out.stderr.decode()[-3000:]
        cubins.append((tmp_path / f"{cu.name}.cubin").read_bytes())
    assert cubins[0] == cubins[1]

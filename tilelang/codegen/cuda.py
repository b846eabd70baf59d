"""CUDA source for a lowered kernel, and its build into a loadable library.

Two translation units, compiled in parallel:
- the device unit: the project's device headers and the `__global__` kernels from TVM's CUDA
  codegen, compiled by `nvcc -cubin` (device code only: no host pass over the device headers);
- the host unit: the C++ launcher from TVM's `cuda_host` codegen (argument checks, grid sizes,
  launch on the stream torch is using, dynamic shared memory past 48 KB), compiled by the host
  C++ compiler. Its kernel references go through `tl_templates/host/launch.h`, which loads the
  cubin (linked into the library as bytes) with the CUDA runtime's library API.
The linked shared library is loaded by `tvm_ffi.load_module`; a call costs ~1 us of FFI.
"""

from __future__ import annotations

import concurrent.futures
import contextlib
import functools
import hashlib
import importlib
import logging
import os
import re
import subprocess
import tempfile
import time

import tvm_ffi

from tilelang import env
from tilelang.codegen import fp8_arith, host_pch, libraries, register_counts, templates, vectors, wgmma_isa, workspace
from tilelang.codegen.host_pch import host_flags  # noqa: F401  (cuda.host_flags: the host unit's flags)
from tilelang.utils.target import arch_of

logger = logging.getLogger("tilelang")
_build_utils = importlib.import_module("tvm.tirx.build")  # the module, not the function tvm.tirx.build

# Device headers and the function names that need them; common.h always comes first. Only the
# headers a kernel uses are included: nvcc reads each in every kernel. The wgmma instructions are
# written into the source for the shapes the kernel issues (wgmma_isa.py), not taken from a header.
_HEADERS = [
    ("tl::shfl_xor", "reduce.h"),
    ("tl::atomic_", "atomic.h"),
    ("tl::gemm_", "gemm_mma.h"),
    ("tl::gemm_sp_", "gemm_sp.h"),
    ("tl::wgmma_", "gemm_wgmma.h"),
    ("tl::ldmatrix", "warp_mma.h"),
    ("tl::mma_sync", "warp_mma.h"),
    ("tl::cp_async", "copy_async.h"),
    ("tl::mbarrier_", "tma.h"),
    ("tl::setmaxnreg_", "tma.h"),
    ("tl::sync_grid", "grid.h"),
    (vectors.HEADER_CALL, "convert.h"),
    ("tl::fp4_e2m1_", "convert.h"),
]


def _with_headers(code: str, kernels: dict) -> str:
    lines = ['#include "tl_templates/cuda/common.h"']
    needed = [h for name, h in _HEADERS if name in code]
    lines += [f'#include "tl_templates/cuda/{h}"' for h in dict.fromkeys(needed)]  # each once, in order
    # The wgmma instructions the kernels issue (gemm_wgmma.h's Instr, declared there).
    instructions = wgmma_isa.definitions(f for k in kernels.values() for f in k.wgmma_forms)
    return "\n".join(lines) + "\n" + instructions + code


@contextlib.contextmanager
def _source_only():
    """TVM's CUDA codegen compiles what it generates through the global `tvm_callback_cuda_compile`
    (NVRTC, without our headers) whenever the CUDA runtime is present. We compile with nvcc
    ourselves, so while our codegen runs that callback only hands the source back."""
    name = "tvm_callback_cuda_compile"
    original = tvm_ffi.get_global_func(name, allow_missing=True)
    tvm_ffi.register_global_func(name, lambda code, *_: code.encode(), override=True)
    try:
        yield
    finally:
        if original is not None:
            tvm_ffi.register_global_func(name, original, override=True)


# A user's function `(code, target) -> code` that rewrites the device source last, registered in
# TVM's function registry under the public TileLang's name (`tilelang.engine.callback`).
POSTPROC_HOOK = "tilelang_callback_cuda_postproc"


def postproc_hook():
    """The registered post-processing function, or None."""
    return tvm_ffi.get_global_func(POSTPROC_HOOK, allow_missing=True)


def device_source(lowered) -> str:
    """The device unit (what `kernel.get_kernel_source()` shows), after the user's post-processing
    hook if one is registered: it sees the complete source, last."""
    code = _generated_source(lowered)
    hook = postproc_hook()
    return code if hook is None else hook(code, lowered.target)


def _generated_source(lowered) -> str:
    vectors.refuse_sub_byte_buffers(lowered.device_mod)
    # Intrinsics become the template calls they stand for (`templates.py`), just before TVM's codegen.
    device_mod, kernels = templates.spell(lowered.device_mod)
    device_mod = fp8_arith.compute_in_float32(device_mod)  # CUDA has no fp8 operators
    device_mod = vectors.spell(device_mod)  # fp8 vector casts and broadcasts TVM would print wrong
    with _source_only():
        code = _build_utils.codegen_build(device_mod, lowered.target).inspect_source("cuda")
    # Swizzled tiles (wgmma descriptors, TMA boxes) sit at 1024-byte offsets of the shared block,
    # and the hardware swizzles absolute address bits: the block itself starts on 1024 bytes.
    code = re.sub(r"extern __shared__ __align__\(\d+\) ", "extern __shared__ __align__(1024) ", code)
    code = _with_setmaxnreg_lines(code, kernels)
    return _with_headers(_with_one_block_per_sm(_with_cluster_dims(code, kernels)), kernels)


def _with_setmaxnreg_lines(code: str, kernels: dict) -> str:
    """Each user's T.set_max_nreg call followed by a comment naming its line, for the register check
    after ptxas (`register_counts.check`, which reads only the source)."""
    for name, body in kernel_bodies(code).items():
        facts = kernels.get(name)
        if facts is not None and facts.setmaxnreg:
            code = code.replace(body, templates.mark_setmaxnreg_lines(body, facts))
    return code


def _with_cluster_dims(code: str, kernels: dict) -> str:
    """`__cluster_dims__(x, y, z)` on each kernel launched in clusters of blocks (its
    `cluster_dims` intrinsic, the pipeline planner's record)."""
    out, last = [], 0
    head = 'extern "C" __global__ void '
    for m in _KERNEL_DEF.finditer(code):
        facts = kernels.get(m.group(1))
        if facts is not None and facts.cluster_dims is not None:
            out.append(code[last : m.start() + len(head)])
            out.append(f"__cluster_dims__({', '.join(map(str, facts.cluster_dims))}) ")
            last = m.start() + len(head)
    return "".join(out) + code[last:]


def _with_one_block_per_sm(code: str) -> str:
    """`__launch_bounds__(threads, 1)` on each kernel whose body calls setmaxnreg. Without a minimum
    of blocks per SM, ptxas may not know the register count the kernel starts with, and then drops
    every setmaxnreg with only a remark (C7508): the warpgroups all run at the launch count and the
    consumers spill (seen: 1.2 KB of spills in a three-warpgroup MLA decode kernel, none with the
    bound). Such kernels run one block per SM anyway: the warpgroups share the whole register file."""
    for name, body in kernel_bodies(code).items():
        if register_counts.wanted(body):
            code = re.sub(rf"__launch_bounds__\((\d+)\) {name}\(", rf"__launch_bounds__(\1, 1) {name}(", code)
    return code


_KERNEL_DEF = re.compile(
    r'extern "C" __global__ void (?:__cluster_dims__\([^)]*\) )?(?:__launch_bounds__\([^)]*\) )?(\w+)\(([^)]*)\)\s*\{'
)


def kernel_signatures(device_src: str) -> dict[str, list[str]]:
    """The `__global__` functions of a device unit and their parameter types, pointers as `void*`
    (the host passes every pointer as one; only sizes matter to a launch)."""
    kernels = {}
    for name, params in _KERNEL_DEF.findall(device_src):
        types = []
        for p in filter(None, (q.strip() for q in params.split(","))):
            words = p.replace("__restrict__", "").replace("__grid_constant__", "").split()
            decl = " ".join(words[:-1])
            types.append("void*" if "*" in decl or "*" in words[-1] else decl)
        kernels[name] = types
    return kernels


def kernel_bodies(device_src: str) -> dict[str, str]:
    """Each `__global__` function's source, from its head to the next one's."""
    heads = list(_KERNEL_DEF.finditer(device_src))
    ends = [h.start() for h in heads[1:]] + [len(device_src)]
    return {h.group(1): device_src[h.start() : end] for h, end in zip(heads, ends)}


def host_source(lowered, device_src: str) -> str:
    """The host unit: TVM's launcher, its kernel references bound to the cubin's kernels."""
    host_mod, has_workspaces = workspace.rename_calls(lowered.host_mod)  # T.alloc_global buffers
    code = _build_utils.codegen_build(host_mod, lowered.target.host).inspect_source()
    # TMA descriptors are encoded through the driver, reached via the runtime (no -lcuda to link).
    code = code.replace("cuTensorMapEncodeTiled(", "tl_host::tensor_map_encode_tiled(")
    code = code.replace("cuGetErrorString(", "tl_host::driver_error_string(")
    code = workspace.bind(code) if has_workspaces else code
    lines = ['#include "tl_templates/host/launch.h"']
    bodies = kernel_bodies(device_src)
    for name, types in kernel_signatures(device_src).items():
        sig = f"tl_host::Kernel<void({', '.join(types)})>"
        lines.append(f'static const {sig}& tl_kernel_{name}() {{ static const {sig} k("{name}"); return k; }}')
        # A kernel with a grid barrier (T.sync_grid) needs every block resident: a cooperative launch.
        launch = "launch_cooperative" if "tl::sync_grid(" in bodies.get(name, "") else "launch"
        code = code.replace(f"tvm_cuda_host_launch(::{name},", f"tl_kernel_{name}().{launch}(")
        code = code.replace(f"cudaFuncSetAttribute(::{name},", f"tl_kernel_{name}().set_attribute(")
        if re.search(rf"::{name}\b", code):
            raise RuntimeError(f"the host launcher uses kernel {name} in a way tilelang does not bind")
    return "\n".join(lines) + "\n" + code


_ALLOC_ENTRY = """
// `{name}{suffix}`: the kernel with its last parameter, the output, allocated here through the
// environment's tensor allocator (torch's caching allocator when called with torch tensors), on
// the first input's device; returns the output. Saves the Python-side allocation per call.
extern "C" TVM_FFI_DLL_EXPORT int32_t __tvm_ffi_{name}{suffix}(void* self, void* args, int32_t num_args,
                                                               void* result) {{
  if (num_args != {n_in}) {{
    TVMFFIErrorSetRaisedFromCStr("TypeError", "{name}: wrong number of inputs");
    return -1;
  }}
  TVMFFIAny* in = static_cast<TVMFFIAny*>(args);
  const DLTensor* first = tl_host::dltensor_of(in[0]);
  if (first == nullptr) {{
    TVMFFIErrorSetRaisedFromCStr("TypeError", "{name}: the first argument is not a tensor");
    return -1;
  }}
  int64_t shape[{ndim}] = {{{shape}}};
  DLTensor prototype{{}};
  prototype.device = first->device;
  prototype.ndim = {ndim};
  prototype.dtype = DLDataType{{{code}, {bits}, {lanes}}};
  prototype.shape = shape;
  TVMFFIObjectHandle out = nullptr;
  if (TVMFFIEnvTensorAlloc(&prototype, &out) != 0) return -1;
  TVMFFIAny all[{n_in} + 1];
  for (int k = 0; k < {n_in}; ++k) all[k] = in[k];
  all[{n_in}].type_index = kTVMFFITensor;
  all[{n_in}].zero_padding = 0;
  all[{n_in}].v_obj = static_cast<TVMFFIObject*>(out);
  TVMFFIAny unused{{}};
  if (__tvm_ffi_{name}(self, all, {n_in} + 1, &unused) != 0) {{
    TVMFFIObjectDecRef(out);
    return -1;
  }}
  TVMFFIAny* ret = static_cast<TVMFFIAny*>(result);
  ret->type_index = kTVMFFITensor;
  ret->zero_padding = 0;
  ret->v_obj = static_cast<TVMFFIObject*>(out);  // the caller owns the reference
  return 0;
}}
"""
ALLOC_SUFFIX = "__alloc_out"


def alloc_entry(name: str, n_in: int, shape, dtype: str) -> str:
    """A host entry that allocates the kernel's one (last, static-shape) output itself."""
    dt = tvm_ffi.dtype(dtype)
    return _ALLOC_ENTRY.format(
        name=name,
        suffix=ALLOC_SUFFIX,
        n_in=n_in,
        ndim=len(shape),
        shape=", ".join(str(int(d)) for d in shape),
        code=dt.type_code,
        bits=dt.bits,
        lanes=dt.lanes,
    )


@functools.cache
def nvcc_version() -> str:
    out = subprocess.run([env.nvcc_path(), "--version"], capture_output=True, text=True, check=True).stdout
    return out.strip().splitlines()[-1]


def gencode(arch: str) -> str:
    """`-gencode` for an arch; sm_90a needs the compute_90a form so wgmma/setmaxnreg assemble."""
    num = arch.removeprefix("sm_")
    return f"-gencode=arch=compute_{num},code=sm_{num}"


def nvcc_flags(target, fast_math: bool = False, extra=()) -> list[str]:
    """Flags for the device unit (`nvcc -cubin`)."""
    flags = [
        "-std=c++17",
        "-O3",
        gencode(arch_of(target)),
        "--expt-relaxed-constexpr",
        "-w",
        f"-I{env.template_path()}",
        f"-I{env.cutlass_include()}",
    ]
    if fast_math:
        flags.append("--use_fast_math")
    return flags + list(extra)


def _ffi_dir(sub: str) -> str:
    return os.path.join(env.tvm_ffi_dir(), sub)


class CompileError(RuntimeError):
    """nvcc or the host compiler rejected the generated source (a compiler bug, or a template
    precondition)."""


# The cubin as bytes in the library: the assembler copies the file in, hidden so that several
# loaded kernel libraries do not see each other's.
_BLOB = """.section .rodata
.global tl_cubin
.hidden tl_cubin
.balign 64
tl_cubin:
.incbin "{path}"
.byte 0
.section .note.GNU-stack,"",@progbits
"""


def _run_all(commands: list[list[str]], what: list[str], times: dict | None = None) -> list[str]:
    """Run the commands concurrently; raise CompileError with the first failure's output. Each
    command's wall time goes to `times[what]`. Returns each command's stderr."""

    def run(command):
        start = time.perf_counter()
        proc = subprocess.run(command, capture_output=True, text=True)
        return proc, time.perf_counter() - start

    with concurrent.futures.ThreadPoolExecutor(len(commands)) as pool:
        results = list(pool.map(run, commands))
    for (_, seconds), name in zip(results, what):
        if times is not None:
            times[name] = seconds
    for (proc, _), name in zip(results, what):
        if proc.returncode != 0:
            raise CompileError(f"{name} failed:\n{proc.stderr[-6000:]}")
    return [proc.stderr for proc, _ in results]


def _device_command(flags, cu: str, cubin: str) -> list[str]:
    return [env.nvcc_path(), *flags, "-cubin", "-o", cubin, cu]


def _host_command(flags, cc: str) -> list[str]:
    """Compile the host unit to `cc + ".o"`, with its headers precompiled once built (`host_pch`)."""
    compiler = env.host_compiler()
    return [compiler, *flags, *host_pch.include_flags(compiler, flags), "-c", "-o", cc + ".o", cc]


def build_library(
    device_src: str,
    host_src: str,
    target,
    fast_math: bool = False,
    extra_flags=(),
    out_dir: str | None = None,
    times: dict | None = None,
) -> str:
    """Compile both units (in parallel) and link them into a shared library; returns its path.
    Reuses a library built from the same sources and flags (keyed by their hash and the nvcc
    version) when it matches its checksum (`libraries`); where the folder cannot be written, the
    library is built in a temporary folder, with a warning."""
    check_registers = register_counts.wanted(device_src)
    dflags = nvcc_flags(target, fast_math, [*extra_flags, *(register_counts.PTXAS_VERBOSE if check_registers else [])])
    hflags = host_flags()
    parts = [device_src, host_src, " ".join(dflags), " ".join(hflags), nvcc_version(), env.host_compiler()]
    key = hashlib.sha256("\n".join(parts).encode()).hexdigest()[:32]
    build = functools.partial(_build, device_src, host_src, dflags, hflags, check_registers, key, times)
    return libraries.reuse_or_build(key, build, out_dir)


def _build(device_src, host_src, dflags, hflags, check_registers, key, times, out_dir, publish) -> None:
    """Compile and link in a temporary folder of `out_dir`; `publish(path)` moves the library out."""
    with tempfile.TemporaryDirectory(dir=out_dir) as tmp:
        cu, cc, cubin = (os.path.join(tmp, n) for n in ("device.cu", "host.cc", "device.cubin"))
        for path, text in ((cu, device_src), (cc, host_src)):
            with open(path, "w") as f:
                f.write(text)
        try:
            logs = _run_all(
                [
                    _device_command(dflags, cu, cubin),
                    _host_command(hflags, cc),
                ],
                ["nvcc", "host c++"],
                times,
            )
        except CompileError as err:
            kept = os.path.join(out_dir, f"failed_{key}")
            os.makedirs(kept, exist_ok=True)
            for path in (cu, cc):
                os.replace(path, os.path.join(kept, os.path.basename(path)))
            raise CompileError(f"{err}\nsources kept in {kept}") from None
        if check_registers:
            register_counts.check(kernel_bodies(device_src), logs[0])
        blob = os.path.join(tmp, "cubin.S")
        with open(blob, "w") as f:
            f.write(_BLOB.format(path=cubin))
        _, libdir = env.cuda_paths()
        tmp_lib = os.path.join(tmp, "kernel.so")
        link = [env.host_compiler(), "-shared", "-o", tmp_lib, cc + ".o", blob, f"-L{libdir}", "-lcudart_static"]
        link += ["-ldl", "-lrt", "-lpthread", f"-L{_ffi_dir('lib')}", "-ltvm_ffi"]
        _run_all([link], ["link"], times)
        publish(tmp_lib)  # atomic: a concurrent reader sees the whole file or none


def compile_object(device_src: str, target, fast_math: bool = False, host_src: str | None = None) -> None:
    """Compile the units without linking (for tests on machines without a GPU)."""
    with tempfile.TemporaryDirectory() as tmp:
        cu, cc = os.path.join(tmp, "device.cu"), os.path.join(tmp, "host.cc")
        check_registers = register_counts.wanted(device_src)
        extra = register_counts.PTXAS_VERBOSE if check_registers else []
        commands = [_device_command(nvcc_flags(target, fast_math, extra), cu, cu + ".cubin")]
        what = [f"nvcc ({arch_of(target)})"]
        with open(cu, "w") as f:
            f.write(device_src)
        if host_src is not None:
            with open(cc, "w") as f:
                f.write(host_src)
            commands.append(_host_command(host_flags(), cc))
            what.append("host compiler")
        logs = _run_all(commands, what)
        if check_registers:
            register_counts.check(kernel_bodies(device_src), logs[0])

"""nvcc and compute-capability helpers, as the public TileLang's `tilelang.contrib.nvcc` has them:

    from tilelang.contrib import nvcc
    arch = nvcc.get_target_compute_version()        # "9.0" on an H100/H200 (the current GPU)
    major, minor = nvcc.parse_compute_version(arch)
    ptx = nvcc.compile_cuda(source, target_format="ptx", arch="sm_90a")

Compute versions are strings "major.minor". A target is a tvm Target or anything
`tilelang.utils.target.determine_target` reads ("sm_90a", {"kind": "cuda", "arch": "sm_80"});
without one, the current GPU (through torch). The compiler is the nvcc tilelang itself uses
(`tilelang.env`: $CUDA_HOME or the PATH).
"""

from __future__ import annotations

import os
import re
import subprocess
import tempfile

from tilelang import env
from tilelang.errors import UserError


def _arch_of(target) -> str | None:
    """The "sm_XX" of a target, or None for no target."""
    if target is None:
        return None
    from tilelang.utils.target import arch_of, determine_target

    return arch_of(determine_target(target))


def get_target_compute_version(target=None) -> str:
    """The compute capability ("8.0", "9.0", "12.0") of `target`, else of the current GPU.

    Raises: UserError when there is neither a target nor a GPU."""
    from tilelang.utils.target import detect_arch

    arch = _arch_of(target) if target is not None else detect_arch()  # detect_arch: the GPU, via torch
    if arch is not None:
        digits = re.match(r"sm_(\d+)", arch).group(1)
        return f"{digits[:-1]}.{digits[-1]}"
    raise UserError(
        "no CUDA architecture was given and no GPU is visible; pass a target such as 'sm_90a' "
        "or {'kind': 'cuda', 'arch': 'sm_90a'}"
    )


def parse_compute_version(compute_version: str) -> tuple[int, int]:
    """(major, minor) of "major.minor". Raises: UserError for another form."""
    try:
        major, minor = str(compute_version).split(".")[:2]
        return int(major), int(minor)
    except ValueError:
        raise UserError(f"compute version {compute_version!r} is not of the form 'major.minor'") from None


def get_target_arch(compute_version) -> str:
    """The arch number nvcc takes: "80" for (8, 0), "90a" for 9.0 and newer (their `a` features)."""
    major, minor = parse_compute_version(compute_version) if isinstance(compute_version, str) else compute_version
    return f"{major * 10 + minor}" + ("a" if major >= 9 else "")


def have_fp16(compute_version) -> bool:
    major, minor = parse_compute_version(compute_version)
    return major >= 6 or (major == 5 and minor >= 3)


def have_int8(compute_version) -> bool:
    return parse_compute_version(compute_version)[0] >= 6


def have_bf16(compute_version) -> bool:
    return parse_compute_version(compute_version)[0] >= 8


def have_fp8(compute_version) -> bool:
    return parse_compute_version(compute_version) >= (8, 9)


def have_tensorcore(compute_version=None, target=None) -> bool:
    """Tensor cores (sm_70 and newer), of `compute_version`, else `target`, else the current GPU;
    False when none of the three is known."""
    if compute_version is None:
        try:
            compute_version = get_target_compute_version(target)
        except UserError:
            return False
    return parse_compute_version(compute_version)[0] >= 7


def _target_version(target) -> tuple[int, int]:
    return parse_compute_version(get_target_compute_version(target))


def have_tma(target) -> bool:
    return _target_version(target)[0] >= 9


def is_hopper(target) -> bool:
    return _target_version(target) == (9, 0)


def have_pdl(target) -> bool:
    return _target_version(target)[0] >= 9


def have_mbarrier(target) -> bool:
    return _target_version(target)[0] >= 9


def find_cuda_path() -> str:
    """The CUDA toolkit's root folder."""
    return env.cuda_home()


def get_nvcc_compiler() -> str:
    return env.nvcc_path()


def get_cuda_version(cuda_path=None) -> tuple[int, ...]:
    """The toolkit's version, e.g. (13, 0, 88), from `nvcc --version` (of `cuda_path` if given)."""
    nvcc = os.path.join(cuda_path, "bin", "nvcc") if cuda_path else env.nvcc_path()
    out = subprocess.run([nvcc, "--version"], capture_output=True, text=True, check=True).stdout
    found = re.search(r"\bV(\d+(?:\.\d+)*)", out)
    if not found:
        raise RuntimeError(f"cannot read the CUDA version from `{nvcc} --version`:\n{out}")
    return tuple(int(x) for x in found.group(1).split("."))


def have_cudagraph() -> bool:
    try:
        return get_cuda_version() >= (10, 0)
    except (RuntimeError, OSError, subprocess.CalledProcessError):
        return False


def compile_cuda(code: str, target_format="ptx", arch=None, options=None, path_target=None, verbose=False):
    """Compile CUDA source with nvcc; returns the output file's bytes (a bytearray).

    Args:
        target_format: "ptx", "cubin" or "fatbin".
        arch: "sm_90a", "90a", or a list of nvcc arch flags; default the current GPU's.
        options: extra nvcc flags (a string or a list of strings).
        path_target: where to write the output (default: a temporary file).
        verbose: print nvcc's output.

    Raises: UserError for a bad format or options; RuntimeError with nvcc's output on failure.
    """
    if target_format not in ("ptx", "cubin", "fatbin"):
        raise UserError(f"compile_cuda: target_format must be 'ptx', 'cubin' or 'fatbin', got {target_format!r}")
    if arch is None:
        arch = "sm_" + get_target_arch(get_target_compute_version())
    if isinstance(arch, str):
        arch_flags = ["-arch", arch if arch.startswith(("sm_", "compute_")) else f"sm_{arch}"]
    else:
        arch_flags = list(arch)
    if options is None:
        extra = []
    elif isinstance(options, str):
        extra = [options]
    elif isinstance(options, (list, tuple)):
        extra = list(options)
    else:
        raise UserError(f"compile_cuda: options must be a string or a list of strings, got {options!r}")
    with tempfile.TemporaryDirectory() as tmp:
        src = os.path.join(tmp, "kernels.cu")
        out = path_target or os.path.join(tmp, f"kernels.{target_format}")
        with open(src, "w") as f:
            f.write(code)
        cmd = [env.nvcc_path(), f"--{target_format}", "-O3", "-lineinfo", *arch_flags, *extra, "-o", out, src]
        proc = subprocess.run(cmd, capture_output=True, text=True)
        if verbose:
            print(proc.stdout + proc.stderr)
        if proc.returncode != 0:
            raise RuntimeError(f"nvcc failed:\n{proc.stdout}{proc.stderr}\ncommand: {' '.join(cmd)}")
        with open(out, "rb") as f:
            data = bytearray(f.read())
    if not data:
        raise RuntimeError("nvcc produced an empty output")
    return data

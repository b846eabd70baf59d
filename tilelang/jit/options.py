"""The options `@tilelang.jit` and `tilelang.compile` take besides the kernel, checked once.

Every option the public TileLang documents either does what it says here or is refused with a
`UserError` naming it and what to do instead:

- `compile_flags`: extra nvcc flags for the device code (a string or a list; each string is split
  like a shell command line, as TileLang does). They are part of every cache key.
- `execution_backend`: how the compiled kernel is called from Python. Ours is one C++ launcher called
  through tvm-ffi, which is TileLang's "tvm_ffi" backend; "auto" means it, and "cython" (TileLang's
  older compiled C++ launcher, called with the same torch tensors) is accepted as meaning the same.
  Backends that work differently ("nvrtc", "cutedsl", "torch", "ctypes", "dlpack") are refused.
- `target_host`: where the launcher runs. It is always C++ compiled for the machine running Python,
  so only the targets meaning that ("c", "llvm" without a cross-compilation triple) are accepted.
- `verbose`: the compile is logged at INFO (what is compiled, for which target and options, cache
  hits, the time of each phase) even where the `tilelang` logger shows only warnings.
- `debug_root_path`: each kernel compiled writes its sources there (see `write_debug_sources`).
"""

from __future__ import annotations

import dataclasses
import logging
import os
import shlex
import sys

from tilelang.errors import UserError

logger = logging.getLogger("tilelang")

# Backend names that mean our launcher: TileLang's current default and its older compiled C++ one.
EXECUTION_BACKENDS = ("auto", "tvm_ffi", "cython")
# The public TileLang's other backends, which work differently (told apart from a misspelling).
_OTHER_BACKENDS = ("nvrtc", "cutedsl", "torch", "ctypes", "dlpack")
# Host targets that mean "the machine running Python", which is where our launcher runs.
_HOST_TARGETS = ("c", "llvm", "cuda_host")


def check_execution_backend(value, where: str) -> None:
    """Raise UserError unless `value` (None or a name) means our tvm-ffi launcher."""
    if value is None or value in EXECUTION_BACKENDS:
        return
    have = ", ".join(repr(b) for b in EXECUTION_BACKENDS)
    if value in _OTHER_BACKENDS:
        raise UserError(
            f"{where}: execution_backend={value!r} is not available; kernels here are called through one "
            f"C++ launcher over tvm-ffi (TileLang's 'tvm_ffi' backend). Use one of {have}, or leave it out"
        )
    raise UserError(f"{where}: unknown execution_backend {value!r}; the backends are {have}")


def check_target_host(value, where: str) -> None:
    """Raise UserError unless `value` (None, a string, a dict or a tvm Target) is the local CPU."""
    if value is None:
        return
    kind, attrs = _host_kind(value)
    if kind in _HOST_TARGETS and not attrs:
        return
    raise UserError(
        f"{where}: target_host={value!r} is not supported; the host launcher is always C++ compiled for the "
        f"machine running Python (cross-compiling it is not supported). Leave target_host out, or use 'c' or 'llvm'"
    )


def _host_kind(value) -> tuple[str | None, dict]:
    """The kind of a host target and its attributes other than the defaults (empty: plain local CPU)."""
    if isinstance(value, str):
        words = value.split()
        return (words[0] if words else None), {w: True for w in words[1:]}
    if isinstance(value, dict):
        attrs = {k: v for k, v in value.items() if k != "kind"}
        return value.get("kind"), attrs
    kind = getattr(getattr(value, "kind", None), "name", None)
    if kind is None:
        return None, {}
    attrs = {k: v for k, v in dict(getattr(value, "attrs", {}) or {}).items() if k in ("mtriple", "mcpu", "mattr")}
    if kind == "llvm" and attrs.get("mtriple") == _local_triple():
        del attrs["mtriple"]  # a tvm Target("llvm") names this machine's triple
    return kind, attrs


def _local_triple() -> str:
    from tvm.target import Target

    return str(Target("llvm").attrs.get("mtriple", ""))


def normalize_compile_flags(flags, where: str) -> tuple[str, ...]:
    """`compile_flags` as the nvcc arguments they are: each string split like a shell command line."""
    if flags is None:
        return ()
    items = [flags] if isinstance(flags, str) else flags
    try:
        items = list(items)
    except TypeError:
        raise UserError(f"{where}: compile_flags takes a string or a list of strings, got {flags!r}") from None
    out = []
    for item in items:
        if not isinstance(item, str):
            raise UserError(f"{where}: compile_flags takes a string or a list of strings, got {item!r} in it")
        out += shlex.split(item)
    return tuple(out)


@dataclasses.dataclass(frozen=True)
class JITOptions:
    """How kernels are compiled, as the user gave it to `@tilelang.jit` or `tilelang.compile`."""

    out_idx: object = None
    target: object = "auto"
    pass_configs: dict | None = None
    compile_flags: tuple = ()
    verbose: bool = False
    debug_root_path: str | None = None
    execution_backend: str | None = None  # checked: it means our launcher whatever its value
    target_host: object = None  # checked: the machine running Python

    @classmethod
    def make(
        cls,
        where: str,
        out_idx=None,
        target="auto",
        target_host=None,
        execution_backend=None,
        verbose=None,
        pass_configs=None,
        debug_root_path=None,
        compile_flags=None,
    ) -> JITOptions:
        """Check every option (UserError naming a refused one) and keep what compiling needs."""
        check_execution_backend(execution_backend, where)
        check_target_host(target_host, where)
        if pass_configs is not None and not isinstance(pass_configs, dict):
            raise UserError(f"{where}: pass_configs takes a dict such as {{'tl.enable_fast_math': True}}")
        if debug_root_path is not None:
            if not isinstance(debug_root_path, (str, os.PathLike)):
                raise UserError(f"{where}: debug_root_path takes a folder name, got {debug_root_path!r}")
            # TileLang resolves a relative folder against its own install location; here it is the
            # current directory, where the user looks for it.
            debug_root_path = os.path.abspath(os.fspath(debug_root_path))
        return cls(
            out_idx=out_idx,
            target="auto" if target is None else target,
            pass_configs=pass_configs,
            compile_flags=normalize_compile_flags(compile_flags, where),
            verbose=bool(verbose),
            debug_root_path=debug_root_path,
            execution_backend=execution_backend,
            target_host=target_host,
        )


def log_compile(verbose: bool, message: str, *args) -> None:
    """Log at INFO on the `tilelang` logger; with `verbose`, shown even where it shows only warnings."""
    if logger.isEnabledFor(logging.INFO):
        logger.info(message, *args)
    elif verbose:
        record = logger.makeRecord(logger.name, logging.INFO, __file__, 0, message, args, None)
        handler = logging.StreamHandler(sys.stderr)
        handler.setFormatter(logging.Formatter("tilelang %(levelname)s: %(message)s"))
        handler.handle(record)


def write_debug_sources(folder: str, name: str, kernel, prim_func) -> None:
    """The sources of a kernel compiled with `debug_root_path`: TileLang's two files (the device code,
    named .c as TileLang names it, and the kernel's TIR script) and the host launcher."""
    os.makedirs(folder, exist_ok=True)
    files = {
        f"tilelang_jit_kernel_{name}.c": kernel.get_kernel_source(),
        f"tilelang_jit_host_{name}.cc": kernel.get_host_source(),
    }
    if prim_func is not None:
        files[f"tilelang_jit_program_{name}.py"] = prim_func.script()
    for file, text in files.items():
        with open(os.path.join(folder, file), "w", encoding="utf-8") as f:
            f.write(text)

"""`JITKernel`: a compiled kernel, callable with torch tensors.

Compiling runs the pass pipeline, generates the CUDA source and builds it with nvcc; calling
allocates the outputs named by `out_idx` and launches on torch's current stream.
"""

from __future__ import annotations

import time

from tilelang.jit.outputs import check_outputs
from tilelang.jit.params import (
    FP4,
    as_launched,
    as_pointer,
    bind_symbols,
    diagnose,
    params_of,
    resolve_shape,
    storage_shape,
)
from tilelang.log import report, timed
from tilelang.options import CompileOptions


def normalize_out_idx(out_idx, n_params: int) -> list[int]:
    if out_idx is None:
        return []
    idx = [out_idx] if isinstance(out_idx, int) else list(out_idx)
    out = []
    for i in idx:
        if not -n_params <= i < n_params:
            raise ValueError(f"out_idx {i} is out of range for a kernel with {n_params} parameters")
        out.append(i % n_params)
    return sorted(set(out))


class JITKernel:
    """A kernel compiled for one target; call it with torch tensors.

    `kernel(*inputs)` takes the parameters not in `out_idx`, allocates the others, launches, and
    returns the allocated outputs (one tensor, or a list when there are several).
    """

    # Set on the kernel `@tilelang.autotune` returns: the chosen configuration (a dict of the
    # factory's keyword arguments), its latency and the reference program's, in milliseconds.
    config = None
    latency = None
    ref_latency = None

    def __init__(
        self,
        func,
        out_idx=None,
        execution_backend=None,
        target=None,
        target_host=None,
        verbose=False,
        pass_configs=None,
        compile_flags=None,
        name: str | None = None,
        times=None,
    ):
        """Compile `func` (passes and code generation; nvcc runs at the first call). The keywords
        are those of `tilelang.compile` (see tilelang/jit/options.py for what each does)."""
        from tilelang.codegen import cpu, cuda
        from tilelang.engine.pipeline import lower
        from tilelang.jit.options import check_execution_backend, check_target_host, normalize_compile_flags
        from tilelang.utils.target import determine_target, is_cpu

        check_execution_backend(execution_backend, "JITKernel")
        check_target_host(target_host, "JITKernel")
        self.prim_func = func
        self.target = determine_target(target)
        self.pass_configs = dict(pass_configs or {})
        self.compile_flags = normalize_compile_flags(compile_flags, "JITKernel")
        self.verbose = bool(verbose)
        self.options = CompileOptions.from_pass_configs(self.pass_configs)
        # The name shown in errors and given to the host function: the factory's, or the prim_func's.
        self.name = name or str(func.attrs.get("global_symbol", "main") if func.attrs else "main")
        self.params = params_of(func)
        self.out_idx = normalize_out_idx(out_idx, len(self.params))
        check_outputs(func, self.out_idx, self.name)
        self._in_idx = [k for k in range(len(self.params)) if k not in self.out_idx]
        # Seconds per compile phase (parse, passes, codegen, nvcc, host compiler, link, load).
        self.compile_times = dict(times or {})
        with timed(self.compile_times, "passes"):
            lowered = lower(func, self.target, self.options, name=self.name)
        self._lib_path = None
        self._func = None
        self._on_built = None  # called once the library exists (the disk cache stores the kernel then)
        if is_cpu(self.target):  # the loops as TVMScript; LLVM builds the library now (a fraction of a second)
            self.kernel_source, self.host_source = cpu.source(lowered), ""
            self._lib_path = cpu.build_library(lowered, self.compile_times)
            return
        with timed(self.compile_times, "codegen"):
            self.kernel_source = cuda.device_source(lowered)
            self.host_source = cuda.host_source(lowered, self.kernel_source)
            if self._can_alloc_in_launcher():
                out = self.params[self.out_idx[0]]
                self.host_source += cuda.alloc_entry(self.name, len(self._in_idx), out.shape, out.dtype)

    @classmethod
    def from_cache(cls, meta: dict, kernel_source: str, host_source: str, lib_path: str) -> JITKernel:
        """A kernel rebuilt from a cache entry: no tracing, no passes, no nvcc."""
        from tilelang.jit.params import Param
        from tilelang.utils.target import determine_target

        self = cls.__new__(cls)
        self.prim_func = None
        self.target = determine_target(meta["arch"])
        self.pass_configs = dict(meta["pass_configs"])
        self.compile_flags = tuple(meta.get("compile_flags", ()))
        self.verbose = False
        self.name = meta["name"]
        self.params = [Param.from_json(p) for p in meta["params"]]
        self.out_idx = list(meta["out_idx"])
        self._in_idx = [k for k in range(len(self.params)) if k not in self.out_idx]
        self.kernel_source, self.host_source = kernel_source, host_source
        self._lib_path, self._func, self._on_built = lib_path, None, None
        self.compile_times = {}
        return self

    def describe(self) -> dict:
        """What a cache entry records to rebuild this kernel (JSON-serializable)."""
        from tilelang.utils.target import arch_of

        return {
            "name": self.name,
            "arch": arch_of(self.target),
            "pass_configs": {k: v for k, v in self.pass_configs.items() if isinstance(v, (bool, int, float, str))},
            "compile_flags": list(self.compile_flags),
            "params": [p.to_json() for p in self.params],
            "out_idx": self.out_idx,
        }

    def _can_alloc_in_launcher(self) -> bool:
        """One static-shape output, the last parameter, inputs all static: the launcher allocates it."""
        return (
            len(self.out_idx) == 1
            and self.out_idx[0] == len(self.params) - 1
            and all(p.is_static for p in self.params)
            and not self._pointers()
            and self.params[0].kind == "tensor"  # the output goes on the first input's device
            and not self._fp4()  # (its torch shape and dtype differ from the kernel's bytes)
        )

    def _fp4(self) -> list[int]:
        """Positions of the fp4 tensors: passed as their bytes (`params.as_launched`)."""
        return [k for k, p in enumerate(self.params) if p.kind == "tensor" and p.dtype == FP4]

    def _pointers(self) -> list[int]:
        """Positions of the pointer parameters (`T.ptr`): their arguments are converted per call."""
        return [k for k, p in enumerate(self.params) if getattr(p, "kind", "tensor") == "pointer"]

    # Building the library is separate so tests can inspect sources without nvcc.
    def _ensure_built(self):
        if self._func is None:
            from tilelang.codegen import cuda

            built_here = self._lib_path is None
            start = time.perf_counter()
            if built_here:
                fast_math = CompileOptions.from_pass_configs(self.pass_configs).fast_math
                self._lib_path = cuda.build_library(
                    self.kernel_source,
                    self.host_source,
                    self.target,
                    fast_math=fast_math,
                    extra_flags=self.compile_flags,
                    times=self.compile_times,
                )
                if self._on_built is not None:
                    self._on_built(self)
            with timed(self.compile_times, "load"):
                self._module = self._load_library()
                self._func = self._module[self.name]
                entry = self.name + cuda.ALLOC_SUFFIX  # in libraries whose launcher allocates the output
                self._alloc_func = self._module[entry] if entry in self.host_source else None
            if built_here:
                front = sum(self.compile_times.get(k, 0.0) for k in ("parse", "passes", "codegen"))
                self.compile_times["wall"] = front + time.perf_counter() - start
                if self.verbose:
                    from tilelang.jit.options import log_compile

                    phases = ", ".join(f"{k} {v:.2f}" for k, v in self.compile_times.items() if k != "wall")
                    log_compile(True, "built %s in %.2f s: %s (seconds)", self.name, self.compile_times["wall"], phases)
                else:
                    report(self.name, self.compile_times)
        return self._func

    def _load_library(self):
        import tvm_ffi

        from tilelang.utils.target import is_cpu

        if is_cpu(self.target):
            from tilelang.codegen import cpu

            return cpu.load(self._lib_path)
        return tvm_ffi.load_module(self._lib_path)

    @property
    def device_type(self) -> str:
        """Where the kernel runs and its tensors live: "cuda" or "cpu"."""
        from tilelang.utils.target import is_cpu

        return "cpu" if is_cpu(self.target) else "cuda"

    def get_profiler(self, tensor_supply_type=None):
        """A `tilelang.profiler.Profiler` for this kernel: random inputs drawn per
        `tensor_supply_type` (default `TensorSupplyType.Auto`), `assert_allclose`, `do_bench`."""
        from tilelang.profiler import Profiler, TensorSupplyType

        return Profiler(self, TensorSupplyType.Auto if tensor_supply_type is None else tensor_supply_type)

    def export_library(self, path: str) -> None:
        """Write the built library to `path` and its metadata to `<path>.json`; load it elsewhere with
        `tilelang.load_library(path)`, which needs only torch and tvm_ffi. Builds first if needed."""
        from tilelang.jit.exported import write_library

        self._ensure_built()
        meta = self.describe()
        del meta["pass_configs"]  # how it was compiled; nothing a caller of the library needs
        write_library(path, self._lib_path, meta)

    def get_kernel_source(self, kernel_only: bool = True) -> str:
        """The CUDA source of the device kernels; with `kernel_only=False`, followed by the host launcher."""
        return self.kernel_source if kernel_only else self.kernel_source + "\n" + self.host_source

    def get_host_source(self) -> str:
        """The C++ source of the host launcher."""
        return self.host_source

    def __call__(self, *args):
        fast = self.__dict__.get("_fast")
        if fast is not None and len(args) == fast[0]:
            alloc = fast[4]
            if alloc is not None:
                # One static output: the launcher allocates it (torch's allocator, through tvm-ffi).
                try:
                    return alloc(*args)
                except Exception:  # noqa: BLE001 (the path below raises the clear error, or works)
                    return self._call_fast_python(args, fast, from_alloc=True)
            return self._call_fast_python(args, fast)
        return self._call(args)

    def _call_fast_python(self, args, fast, from_alloc=False):
        """Static shapes, the outputs last: outputs made with `new_empty` on the first input (its
        device, no torch.device object)."""
        _, shapes, dtypes, fn, _ = fast
        try:
            first = args[0].new_empty
        except AttributeError:
            return self._call(args)
        outs = [first(s, dtype=d) for s, d in zip(shapes, dtypes)]
        self._launch(fn, [*args, *outs])
        if from_alloc:  # the arguments were fine, so allocation is what failed: no allocator here
            self._fast = fast[:4] + (None,)
        return outs[0] if len(outs) == 1 else outs

    def _prepare_fast_call(self, fn) -> None:
        """Precompute the common case of `__call__`: every shape static, the outputs the last params."""
        n_in = len(self._in_idx)
        if self._has_symbols() or not self.out_idx or self._in_idx != list(range(n_in)) or self._pointers():
            return
        if self._fp4():
            return
        shapes = [tuple(self.params[k].shape) for k in self.out_idx]
        dtypes = [_torch_dtype(self.params[k].dtype) for k in self.out_idx]
        self._fast = (n_in, shapes, dtypes, fn, self.__dict__.get("_alloc_func"))

    def _call(self, args):
        import torch

        fn = self._ensure_built()
        if "_fast" not in self.__dict__:
            self._fast = None
            self._prepare_fast_call(fn)
        if not self.out_idx:
            self._launch(fn, args)
            return None
        if len(args) != len(self._in_idx):
            names = ", ".join(self.params[k].name for k in self._in_idx)
            raise ValueError(
                f"{self.name} takes {len(self._in_idx)} input tensors ({names}); "
                f"outputs {[self.params[k].name for k in self.out_idx]} are allocated, got {len(args)}"
            )
        device = next((a.device for a in args if isinstance(a, torch.Tensor)), None)
        if device is None:  # no tensor among the inputs (none at all, or scalars and addresses)
            first = self._in_idx[0] if self._in_idx else None
            if first is not None and self.params[first].kind == "tensor":
                from tilelang.jit.params import check_argument

                check_argument(self.params[first], args[0], first, self.name, self.device_type)  # what came
            cpu = self.device_type == "cpu"
            device = torch.device("cpu") if cpu else torch.device("cuda", torch.cuda.current_device())
        bindings = None
        if self._has_symbols():  # dynamic dimensions: their sizes come from the inputs
            bindings = bind_symbols([self.params[k] for k in self._in_idx], args, self.name)
        full, it = [], iter(args)
        outs = []
        for k, p in enumerate(self.params):
            if k in self.out_idx:
                shape = p.shape if bindings is None else resolve_shape(p, bindings)
                t = torch.empty(storage_shape(p, shape), dtype=_torch_dtype(p.dtype), device=device)
                outs.append(t)
                full.append(t)
            else:
                full.append(next(it))
        self._launch(fn, full)
        return outs[0] if len(outs) == 1 else outs

    def _has_symbols(self) -> bool:
        return not all(p.is_static for p in self.params)

    def _launch(self, fn, args):
        given = args
        pointers = self._pointers()
        if pointers:  # a tensor or an int for a T.ptr parameter: pass the address
            args = list(args)
            for k in pointers:
                if k < len(args) and isinstance(args[k], (int, _tensor_type())) and not isinstance(args[k], bool):
                    args[k] = as_pointer(args[k])
        fp4 = self._fp4()
        if fp4:
            args = list(args)
            for k in fp4:
                if k < len(args):
                    args[k] = as_launched(self.params[k], args[k])
        try:
            fn(*args)
        except (ValueError, TypeError):
            diagnose(self.params, given, self.name, self.device_type)  # raises a clearer error when it can
            raise


_TORCH_DTYPES = {}


def _tensor_type():
    import torch

    return torch.Tensor


def _torch_dtype(name: str):
    if name not in _TORCH_DTYPES:
        from tilelang.dtypes import to_torch

        _TORCH_DTYPES[name] = to_torch(name)
    return _TORCH_DTYPES[name]

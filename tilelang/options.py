"""Compiler options: one `CompileOptions` object per compile, built from the kernel's `pass_configs`
and the environment, and passed as an argument to each pass that needs it.

Users spell options as pass-config keys, as in the public TileLang:

    @tilelang.jit(out_idx=[3], pass_configs={tilelang.PassConfigKey.TL_ENABLE_FAST_MATH: True})

`PassConfigKey` names every key; each is either an option here (a field of `CompileOptions`), a key
handed to TVM's PassContext (`tirx.*`), or refused with a `UserError` that says why. A key that is
not known at all is refused too: a misspelt option must not be silently ignored.

The keys are strings (the enum is a `str` subclass whose str/repr is the plain value), so
`{"tl.enable_fast_math": True}` means the same and hashes the same in the kernel cache.
"""

from __future__ import annotations

import dataclasses
import enum

from tilelang import env
from tilelang.errors import UserError


class PassConfigKey(str, enum.Enum):
    TL_ENABLE_FAST_MATH = "tl.enable_fast_math"  # nvcc --use_fast_math for the whole kernel
    TL_DISABLE_TMA_LOWER = "tl.disable_tma_lower"  # keep global->shared copies off TMA (sm_90a)
    TL_DISABLE_WARP_SPECIALIZED = "tl.disable_warp_specialized"  # no producer/consumer split (sm_90a)
    TL_DISABLE_WGMMA = "tl.disable_wgmma"  # T.gemm through mma.sync even on sm_90a
    TL_DISABLE_FRAGMENT_STORE_STAGING = "tl.disable_fragment_store_staging"  # fragment -> global stores direct
    TL_ENABLE_TMA_MULTICAST = "tl.enable_tma_multicast"  # 2-block clusters sharing tile loads (sm_90a)
    TL_DUMP_IR = "tl.dump_ir"  # a folder: the IR after every pass, numbered in pipeline order
    TL_CHECK_BARRIER_PROTOCOL = "tl.check_barrier_protocol"  # run tilelang.analysis.barrier_protocol (debug)
    TIR_DISABLE_VECTORIZE = "tirx.disable_vectorize"  # TVM's VectorizeLoop leaves vector loops serial

    def __str__(self) -> str:
        return self.value

    def __repr__(self) -> str:
        return repr(self.value)


@dataclasses.dataclass(frozen=True)
class CompileOptions:
    """What the passes and the code generator may be told; every field has the default a kernel
    without `pass_configs` gets."""

    fast_math: bool = False
    disable_tma_lower: bool = False
    disable_warp_specialized: bool = False
    disable_wgmma: bool = False
    disable_fragment_store_staging: bool = False
    enable_tma_multicast: bool = False
    disable_vectorize: bool = False
    dump_ir: str | None = None  # folder for the IR after every pass (also TILELANG_DUMP_IR)
    check_barrier_protocol: bool = False  # lower() interprets mbarrier kernels (also TILELANG_CHECK_BARRIER_PROTOCOL)

    @classmethod
    def from_pass_configs(cls, pass_configs: dict | None) -> CompileOptions:
        """The options of `pass_configs` (keys as strings or PassConfigKey), over the environment's.

        Raises: UserError for a key that is not known, or a value of the wrong type.
        """
        values = {"dump_ir": env.dump_ir_dir(), "check_barrier_protocol": env.check_barrier_protocol()}
        for key, value in (pass_configs or {}).items():
            name = str(key)
            field = _FIELDS.get(name)
            if field is None:
                raise UserError(f"pass_configs: unknown key '{name}'; the keys are: " + ", ".join(sorted(_FIELDS)))
            default = next(f.default for f in dataclasses.fields(cls) if f.name == field)
            if field == "dump_ir":
                if value is not None and not isinstance(value, str):
                    raise UserError(f"pass_configs: '{name}' takes a folder name (a string), got {value!r}")
            elif not isinstance(value, (bool, int)) and value is not None:
                raise UserError(f"pass_configs: '{name}' takes True or False, got {value!r}")
            values[field] = default if value is None else (value if field == "dump_ir" else bool(value))
        return cls(**values)

    def replace(self, **changes) -> CompileOptions:
        return dataclasses.replace(self, **changes)

    def tvm_pass_config(self) -> dict:
        """The part of the options TVM's own passes read from their PassContext."""
        return {"tirx.disable_vectorize": True} if self.disable_vectorize else {}


_FIELDS = {
    str(PassConfigKey.TL_ENABLE_FAST_MATH): "fast_math",
    str(PassConfigKey.TL_DISABLE_TMA_LOWER): "disable_tma_lower",
    str(PassConfigKey.TL_DISABLE_WARP_SPECIALIZED): "disable_warp_specialized",
    str(PassConfigKey.TL_DISABLE_WGMMA): "disable_wgmma",
    str(PassConfigKey.TL_DISABLE_FRAGMENT_STORE_STAGING): "disable_fragment_store_staging",
    str(PassConfigKey.TL_ENABLE_TMA_MULTICAST): "enable_tma_multicast",
    str(PassConfigKey.TL_DUMP_IR): "dump_ir",
    str(PassConfigKey.TL_CHECK_BARRIER_PROTOCOL): "check_barrier_protocol",
    str(PassConfigKey.TIR_DISABLE_VECTORIZE): "disable_vectorize",
}

# What a kernel without pass_configs gets: the default of every pass's `options` argument.
DEFAULT_OPTIONS = CompileOptions()

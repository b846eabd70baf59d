"""Compiler options: one `CompileOptions` object per compile, built from the kernel's `pass_configs`
and the environment, and passed as an argument to each pass that needs it.

Users spell options as pass-config keys, as in the public TileLang:

    @tilelang.jit(out_idx=[3], pass_configs={tilelang.PassConfigKey.TL_ENABLE_FAST_MATH: True})

`PassConfigKey` names every key, the public TileLang's included; each is either an option here (a
field of `CompileOptions`, some handed on to TVM's PassContext), a hint that only tunes or debugs
the public TileLang's own passes (accepted, logged once at INFO: ignoring it cannot change results),
or refused with a `UserError` that says why for the values tilelang cannot honour. A key that is
not known at all is refused too: a misspelt option must not be silently ignored.

The keys are strings (the enum is a `str` subclass whose str/repr is the plain value), so
`{"tl.enable_fast_math": True}` means the same and hashes the same in the kernel cache.
"""

from __future__ import annotations

import dataclasses
import enum
import logging

from tilelang import env
from tilelang.errors import UserError

logger = logging.getLogger("tilelang")


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

    # The public TileLang's other keys (v0.1.13, and two older ones its examples still use). Each is
    # an option here (in _FIELDS), a hint that cannot change results (in _HINTS: accepted, logged
    # once at INFO), or refused for the values it cannot honour (in _REFUSED).
    TL_ENABLE_DUMP_IR = "tl.enable_dump_ir"  # with TL_DUMP_IR_DIR: the IR after every pass (= tl.dump_ir)
    TL_DUMP_IR_DIR = "tl.dump_ir_path"  # the folder for TL_ENABLE_DUMP_IR (default ./dump_ir)
    TL_DISABLE_FAST_MATH = "tl.disable_fast_math"  # T.exp2 as exact exp2f, not the SFU's ex2.approx
    TL_DEVICE_COMPILE_FLAGS = "tl.device_compile_flags"  # extra nvcc flags (a string or a list of strings)
    TL_SIMPLIFY = "tl.Simplify"
    # Sub-keys of the tl.Simplify dict (the public enum lists them beside the keys).
    TL_SIMPLIFY_TRANSITIVELY_PROVE_INEQUALITIES = "transitively_prove_inequalities"
    TL_SIMPLIFY_CONVERT_BOOLEAN_TO_AND_OF_ORS = "convert_boolean_to_and_of_ors"
    TL_SIMPLIFY_APPLY_CONSTRAINTS_TO_BOOLEAN_BRANCHES = "apply_constraints_to_boolean_branches"
    TL_SIMPLIFY_PROPAGATE_KNOWNS_TO_PROVE_CONDITIONAL = "propagate_knowns_to_prove_conditional"
    TL_SIMPLIFY_PROPAGATE_KNOWNS_TO_SIMPLIFY_EXPRESSIONS = "propagate_knowns_to_simplify_expressions"
    TL_SIMPLIFY_ENABLE_LET_INLINE = "enable_simplify_let_inline"
    TL_DISABLE_DATA_RACE_CHECK = "tl.disable_data_race_check"
    TL_DISABLE_PRELOWER_SEMANTIC_CHECK = "tl.disable_prelower_semantic_check"
    TL_PTXAS_REGISTER_USAGE_LEVEL = "tl.ptxas_register_usage_level"
    TL_ENABLE_PTXAS_VERBOSE_OUTPUT = "tl.enable_ptxas_verbose_output"
    TL_CONFIG_INDEX_BITWIDTH = "tl.config_index_bitwidth"
    TL_DISABLE_SAFE_MEMORY_ACCESS = "tl.disable_safe_memory_legalize"
    TL_DISABLE_VECTORIZE_256 = "tl.disable_vectorize_256"
    TL_ENABLE_ASYNC_COPY = "tl.enable_async_copy"
    TL_ENABLE_LOWER_LDGSTG = "tl.enable_lower_ldgstg"
    TL_ENABLE_LOWER_LDGSTG_PREDICATED = "tl.enable_lower_ldgstg_predicated"
    TL_ENABLE_VECTORIZE_PLANNER_VERBOSE = "tl.enable_vectorize_planner_verbose"
    TL_DEBUG_MERGE_SHARED_MEMORY_ALLOCATIONS = "tl.debug_merge_shared_memory_allocations"
    TL_ENABLE_AGGRESSIVE_SHARED_MEMORY_MERGE = "tl.enable_aggressive_shared_memory_merge"
    TL_DISABLE_SHARED_MEMORY_REUSE = "tl.disable_shared_memory_reuse"
    TL_DISABLE_SHUFFLE_ELECT = "tl.disable_shuffle_elect"
    TL_DISABLE_LOOP_UNSWITCHING = "tl.disable_loop_unswitching"
    TL_LOOP_UNSWITCHING_ALLOW_NON_TRIVIAL_ELSE = "tl.loop_unswitching_allow_non_trivial_else"
    TL_IF_STMT_BINDING_INLINE_REPLAYABLE_BINDS = "tl.if_stmt_binding_inline_replayable_binds"
    # No automatic barriers for shared memory (the kernel's own T.sync_threads stay), as in TileLang.
    TL_DISABLE_THREAD_STORAGE_SYNC = "tl.disable_thread_storage_sync"
    TL_FORCE_LET_INLINE = "tl.force_let_inline"
    TL_AST_PRINT_ENABLE = "tl.ast_print_enable"
    TL_LAYOUT_VISUALIZATION_ENABLE = "tl.layout_visualization_enable"
    TL_LAYOUT_VISUALIZATION_FORMATS = "tl.layout_visualization_formats"
    TL_STORAGE_REWRITE_DETECT_INPLACE = "tl.storage_rewrite_detect_inplace"
    TL_DISABLE_OUT_OF_BOUND_WARNING = "tl.disable_out_of_bound_warning"
    TL_PASS_PROFILE = "tl.pass_profile"
    TL_PASS_PROFILE_THRESHOLD_MS = "tl.pass_profile_threshold_ms"
    # "tir." (not "tirx."): the public TileLang spells this one so.
    TIR_ENABLE_EQUIV_TERMS_IN_CSE = "tir.enable_equiv_terms_in_cse_tir"
    TIR_DISABLE_CSE = "tirx.disable_cse_tir"
    TIR_SIMPLIFY = "tirx.Simplify"
    TIR_DISABLE_STORAGE_REWRITE = "tirx.disable_storage_rewrite"
    TIR_USE_ASYNC_COPY = "tirx.use_async_copy"
    TIR_ENABLE_DEBUG = "tirx.enable_debug"
    TIR_MERGE_STATIC_SMEM = "tirx.merge_static_smem"
    TIR_ADD_LOWER_PASS = "tirx.add_lower_pass"
    TIR_NOALIAS = "tirx.noalias"
    CUDA_KERNELS_OUTPUT_DIR = "cuda.kernels_output_dir"

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
    precise_exp2: bool = False  # T.exp2 of float32 as exp2f rather than ex2.approx (transform/use_fast_exp2.py)
    # No barriers inserted for shared memory: the kernel synchronizes its threads itself.
    disable_thread_storage_sync: bool = False

    @classmethod
    def from_pass_configs(cls, pass_configs: dict | None) -> CompileOptions:
        """The options of `pass_configs` (keys as strings or PassConfigKey), over the environment's.

        Raises: UserError for a key that is not known, or a value of the wrong type.
        """
        values = {"dump_ir": env.dump_ir_dir(), "check_barrier_protocol": env.check_barrier_protocol()}
        pass_configs = _public_dump_ir(_public_fast_math(dict(pass_configs or {})))
        for key, value in pass_configs.items():
            name = str(key)
            if _accepted_without_field(name, value):
                continue
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
    str(PassConfigKey.TL_DISABLE_FAST_MATH): "precise_exp2",
    str(PassConfigKey.TL_DISABLE_THREAD_STORAGE_SYNC): "disable_thread_storage_sync",
}

# The public TileLang's keys that only tune or debug what its own passes do: ignoring them cannot
# change a kernel's results. Accepted, and logged once at INFO with what tilelang does instead.
_HINTS = {
    "tl.Simplify": "its simplifier settings have no counterpart; TVM's simplifier runs with its defaults",
    "tl.disable_data_race_check": "there is no separate data-race check to disable",
    "tl.disable_prelower_semantic_check": "kernels are still checked when traced (mistakes are UserErrors)",
    "tl.ptxas_register_usage_level": "ptxas runs with its default register usage level",
    "tl.enable_ptxas_verbose_output": "ptxas reports are not printed (kernels calling setmaxnreg are checked)",
    "tl.disable_safe_memory_legalize": "accesses past a tensor's end stay guarded",
    "tl.disable_vectorize_256": "vector widths are chosen by the compiler",
    "tl.enable_async_copy": "the pipeline planner decides where cp.async is used",
    "tl.enable_lower_ldgstg": "global loads and stores stay plain C++ accesses",
    "tl.enable_lower_ldgstg_predicated": "global loads and stores stay plain C++ accesses",
    "tl.enable_vectorize_planner_verbose": "there is no verbose vectorization report",
    "tl.debug_merge_shared_memory_allocations": "each shared block's layout is logged at DEBUG level",
    "tl.enable_aggressive_shared_memory_merge": "shared tiles always share bytes where their lifetimes allow",
    "tl.disable_shared_memory_reuse": "shared tiles share bytes where their lifetimes allow (merge_shared_tiles)",
    "tl.disable_shuffle_elect": "leader election is chosen by the compiler",
    "tl.disable_loop_unswitching": "there is no loop-unswitching pass",
    "tl.loop_unswitching_allow_non_trivial_else": "there is no loop-unswitching pass",
    "tl.if_stmt_binding_inline_replayable_binds": "there is no if-statement binding pass",
    "tl.force_let_inline": "let bindings are inlined as TVM's simplifier decides",
    "tl.ast_print_enable": "use tl.dump_ir (or TILELANG_DUMP_IR) to see the IR after every pass",
    "tl.layout_visualization_enable": "plot a layout with tilelang.tools.plot_layout",
    "tl.layout_visualization_formats": "plot a layout with tilelang.tools.plot_layout",
    "tl.storage_rewrite_detect_inplace": "TVM's StorageRewrite runs with its defaults",
    "tl.disable_out_of_bound_warning": "there is no out-of-bound warning to disable",
    "tl.pass_profile": "compile-phase times are logged at INFO (TILELANG_LOG_LEVEL=INFO), per kernel",
    "tl.pass_profile_threshold_ms": "compile-phase times are logged at INFO (TILELANG_LOG_LEVEL=INFO), per kernel",
    "tir.enable_equiv_terms_in_cse_tir": "no common-subexpression pass runs (nvcc does its own)",
    "tirx.disable_cse_tir": "no common-subexpression pass runs (nvcc does its own)",
    "tirx.Simplify": "TVM's simplifier runs with its defaults",
    "tirx.disable_storage_rewrite": "TVM's StorageRewrite runs with its defaults",
    "tirx.use_async_copy": "the pipeline planner decides where cp.async is used",
    "tirx.enable_debug": "no debug information is added; see tl.dump_ir for the IR",
    "tirx.merge_static_smem": "shared tiles are always merged into one dynamic allocation",
    "cuda.kernels_output_dir": "the source is kernel.get_kernel_source(); tl.dump_ir keeps the IR too",
}

# Keys inside the tl.Simplify dict, not keys of their own.
_SIMPLIFY_SUB_KEYS = {str(k) for k in PassConfigKey if k.name.startswith("TL_SIMPLIFY_")}


def _refuse_simplify_sub_key(value) -> str | None:
    if value is None:
        return None
    return "it is a setting inside the 'tl.Simplify' dict, not a key of its own"


def _refuse_index_bitwidth(value) -> str | None:
    if value in (None, 32):
        return None  # what tilelang does
    return (
        "indices have the dtype of the tensor sizes here (int32, or int64 for a size declared "
        "T.dynamic(name, 'int64')); declare sizes of 2**31 or more that way"
    )


def _refuse_noalias(value) -> str | None:
    if value is None or bool(value):
        return None  # what tilelang does
    return "kernels here assume their tensors do not overlap; pass separate tensors"


def _refuse_lower_passes(value) -> str | None:
    if not value:
        return None
    return "extra TVM lowering passes cannot be added here; transform the prim_func before compiling it"


def _refuse_device_flags(value) -> str | None:
    if not value:
        return None
    return "pass the flags as compile_flags= of tilelang.jit or tilelang.compile"


# Keys refused for the values tilelang cannot honour (the function says why, or None to accept).
_REFUSED = {
    "tl.config_index_bitwidth": _refuse_index_bitwidth,
    "tirx.noalias": _refuse_noalias,
    "tirx.add_lower_pass": _refuse_lower_passes,
    "tl.device_compile_flags": _refuse_device_flags,
    **{key: _refuse_simplify_sub_key for key in _SIMPLIFY_SUB_KEYS},
}

_HINTS_LOGGED: set = set()


def _accepted_without_field(name: str, value) -> bool:
    """True for a hint (logged once) or an accepted value of a refusable key; raises UserError for
    a refused value; False for any other key."""
    if name in _HINTS:
        if name not in _HINTS_LOGGED:
            _HINTS_LOGGED.add(name)
            logger.info("pass_configs: '%s' is accepted and not applied here: %s", name, _HINTS[name])
        return True
    refuse = _REFUSED.get(name)
    if refuse is None:
        return False
    why = refuse(value)
    if why is not None:
        raise UserError(f"pass_configs: '{name}' = {value!r} is not supported here: {why}")
    return True


def _public_dump_ir(pass_configs: dict) -> dict:
    """The public TileLang's pair `tl.enable_dump_ir` + `tl.dump_ir_path` as this tilelang's `tl.dump_ir`."""
    enable = pass_configs.pop(str(PassConfigKey.TL_ENABLE_DUMP_IR), None)
    path = pass_configs.pop(str(PassConfigKey.TL_DUMP_IR_DIR), None)
    if path is not None and not isinstance(path, str):
        raise UserError(f"pass_configs: 'tl.dump_ir_path' takes a folder name (a string), got {path!r}")
    if enable:
        pass_configs.setdefault(str(PassConfigKey.TL_DUMP_IR), path or "./dump_ir")
    return pass_configs


def _public_fast_math(pass_configs: dict) -> dict:
    """`tl.disable_fast_math` (the option `precise_exp2`) contradicts `tl.enable_fast_math`."""
    disable = pass_configs.get(str(PassConfigKey.TL_DISABLE_FAST_MATH), None)
    if disable and pass_configs.get(str(PassConfigKey.TL_ENABLE_FAST_MATH)):
        raise UserError("pass_configs: 'tl.disable_fast_math' and 'tl.enable_fast_math' are both set")
    return pass_configs


# What a kernel without pass_configs gets: the default of every pass's `options` argument.
DEFAULT_OPTIONS = CompileOptions()

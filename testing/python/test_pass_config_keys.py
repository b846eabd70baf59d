"""The public TileLang's pass-config keys: each one is an option here, a hint that is accepted and
logged once (it cannot change results), or refused with a UserError naming it for the values that
cannot be honoured."""

import logging

import pytest

from tilelang import options
from tilelang.errors import UserError
from tilelang.options import CompileOptions, PassConfigKey

# Every key of the public TileLang's PassConfigKey (v0.1.13), by value.
PUBLIC_KEYS = [
    "tl.Simplify", "transitively_prove_inequalities", "convert_boolean_to_and_of_ors",
    "apply_constraints_to_boolean_branches", "propagate_knowns_to_prove_conditional",
    "propagate_knowns_to_simplify_expressions", "enable_simplify_let_inline", "tl.disable_data_race_check",
    "tl.disable_prelower_semantic_check", "tl.disable_warp_specialized", "tl.enable_fast_math",
    "tl.ptxas_register_usage_level", "tl.device_compile_flags", "tl.config_index_bitwidth", "tl.disable_tma_lower",
    "tl.disable_safe_memory_legalize", "tl.disable_vectorize_256", "tl.enable_async_copy", "tl.enable_lower_ldgstg",
    "tl.enable_lower_ldgstg_predicated", "tl.enable_vectorize_planner_verbose", "tl.disable_wgmma",
    "tl.debug_merge_shared_memory_allocations", "tl.enable_aggressive_shared_memory_merge",
    "tl.disable_shared_memory_reuse", "tl.disable_shuffle_elect", "tl.disable_loop_unswitching",
    "tl.loop_unswitching_allow_non_trivial_else", "tl.if_stmt_binding_inline_replayable_binds",
    "tl.disable_thread_storage_sync", "tl.force_let_inline", "tl.ast_print_enable", "tl.layout_visualization_enable",
    "tl.layout_visualization_formats", "tl.storage_rewrite_detect_inplace", "tir.enable_equiv_terms_in_cse_tir",
    "tirx.disable_cse_tir", "tirx.Simplify", "tirx.disable_storage_rewrite", "tirx.disable_vectorize",
    "tirx.use_async_copy", "tirx.enable_debug", "tirx.merge_static_smem", "tirx.add_lower_pass", "tirx.noalias",
    "cuda.kernels_output_dir", "tl.disable_out_of_bound_warning", "tl.enable_dump_ir", "tl.dump_ir_path",
    "tl.pass_profile", "tl.pass_profile_threshold_ms",
]  # fmt: skip


def test_every_public_key_is_named():
    values = {str(k) for k in PassConfigKey}
    assert [k for k in PUBLIC_KEYS if k not in values] == []


def test_implemented_keys():
    opts = CompileOptions.from_pass_configs(
        {PassConfigKey.TL_ENABLE_FAST_MATH: True, PassConfigKey.TL_DISABLE_WARP_SPECIALIZED: True}
    )
    assert opts.fast_math and opts.disable_warp_specialized
    # Honoured as in TileLang: no barriers inserted for shared memory (transform/test_sync_thread_branches.py).
    assert CompileOptions.from_pass_configs({"tl.disable_thread_storage_sync": True}).disable_thread_storage_sync
    assert not options.DEFAULT_OPTIONS.disable_thread_storage_sync
    assert CompileOptions.from_pass_configs({"tl.disable_fast_math": True}).fast_math is False
    with pytest.raises(UserError, match="both set"):  # raised at the call: the traceback shows the user's line
        CompileOptions.from_pass_configs({"tl.disable_fast_math": True, "tl.enable_fast_math": True})


def test_public_dump_ir_pair(monkeypatch):
    monkeypatch.delenv("TILELANG_DUMP_IR", raising=False)
    assert CompileOptions.from_pass_configs({"tl.enable_dump_ir": True}).dump_ir == "./dump_ir"
    opts = CompileOptions.from_pass_configs({"tl.enable_dump_ir": True, "tl.dump_ir_path": "/tmp/ir"})
    assert opts.dump_ir == "/tmp/ir"
    assert CompileOptions.from_pass_configs({"tl.dump_ir_path": "/tmp/ir"}).dump_ir is None  # not enabled
    # raised at the call: the traceback shows the user's line
    with pytest.raises(UserError, match="'tl.dump_ir_path' takes a folder name"):
        CompileOptions.from_pass_configs({"tl.enable_dump_ir": True, "tl.dump_ir_path": 3})


def test_hints_are_accepted_and_logged_once(monkeypatch, caplog):
    monkeypatch.setattr(options, "_HINTS_LOGGED", set())
    with caplog.at_level(logging.INFO, logger="tilelang"):
        for _ in range(2):
            opts = CompileOptions.from_pass_configs({PassConfigKey.TL_DISABLE_SHUFFLE_ELECT: True})
    assert opts == options.DEFAULT_OPTIONS  # nothing changes
    lines = [r.getMessage() for r in caplog.records if "tl.disable_shuffle_elect" in r.getMessage()]
    assert len(lines) == 1 and "leader election is chosen by the compiler" in lines[0]


@pytest.mark.parametrize(
    "key, accepted, refused, why",
    [
        ("tl.config_index_bitwidth", 32, 64, "T.dynamic"),
        ("tirx.noalias", True, False, "do not overlap"),
        ("tirx.add_lower_pass", [], ["my_pass"], "transform the prim_func before compiling"),
        ("tl.device_compile_flags", None, "-O1", "compile_flags="),
        ("enable_simplify_let_inline", None, True, "inside the 'tl.Simplify' dict"),
    ],
)
def test_refused_values_name_the_key(key, accepted, refused, why):
    assert CompileOptions.from_pass_configs({key: accepted}) == CompileOptions.from_pass_configs({})
    # raised at the call: the traceback shows the user's line
    with pytest.raises(UserError, match=f"'{key}' = .* is not supported here: .*{why}"):
        CompileOptions.from_pass_configs({key: refused})

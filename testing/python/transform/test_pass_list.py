"""The pass list (engine/pipeline.py): the Hopper pipeline's steps in order, and the target gates
that keep them off other targets."""

from tilelang.engine.pipeline import _tile_passes, _tvm_passes
from tilelang.options import CompileOptions
from tilelang.utils.target import determine_target, has_tma, has_wgmma

HOPPER_ONLY = [
    "lower_tma_copies",
    "inject_tma_pipelines",
    "place_wgmma_waits",
    "stage_fragment_stores",
    "warp_specialize",
    "set_register_budgets",
    "align_shared_tiles",
]


def _names(arch):
    target, options = determine_target(arch), CompileOptions()
    return [name for name, _ in _tile_passes(options, target) + _tvm_passes(options, target)]


def test_the_hopper_pipeline_is_its_steps_in_order():
    names = _names("sm_90a")
    steps = [
        "select_gemm_instructions",
        "lower_tma_copies",
        "plan_pipelines",
        "inject_cp_async_pipelines",
        "inject_tma_pipelines",
        "place_wgmma_waits",
        "infer_layout",
        "lower_tile_ops",
        "warp_specialize",
        "set_register_budgets",
    ]
    assert [n for n in names if n in steps] == steps
    assert "check_hopper_primitives" not in names


def test_fp4_tensors_become_bytes_after_every_tile_pass():
    # (pack_fp4_tensors needs per-thread loops with their vector widths; TVM's passes see only bytes)
    for arch in ("sm_80", "sm_90a"):
        target, options = determine_target(arch), CompileOptions()
        assert [name for name, _ in _tile_passes(options, target)][-1] == "pack_fp4_tensors"


def test_other_targets_get_no_hopper_steps():
    for arch in ("sm_80", "sm_89"):
        names = _names(arch)
        assert not set(HOPPER_ONLY) & set(names)
        assert names[0] == "check_hopper_primitives" and "plan_pipelines" in names


def test_target_predicates():
    assert has_tma(determine_target("sm_90a")) and has_wgmma(determine_target("sm_90"))
    assert not has_tma(determine_target("sm_89")) and not has_wgmma(determine_target("sm_80"))
    assert not has_tma(None)

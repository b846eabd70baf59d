"""tilelang.carver.template: MatmulTemplate as the public TileLang's autotuning examples use it
(example_gemm_autotune.py, example_gemm_advanced_autotune.py), on a described sm_90 (no GPU)."""

import importlib

import pytest
from tvm import tirx

import tilelang.language as T
from tilelang.carver.arch import CUDA
from tilelang.carver.template import MatmulTemplate
from tilelang.errors import UserError

H100 = CUDA.from_arch("sm_90a", sm_count=132)


def _template(M=8192, N=8192, K=8192, **kw):
    return MatmulTemplate(M=M, N=N, K=K, in_dtype=T.float16, out_dtype=T.float16, accum_dtype=T.float32, **kw)


def test_public_import_paths():
    for module in (
        "tilelang.carver.template",
        "tilelang.carver.roller",
        "tilelang.carver.roller.rasterization",
        "tilelang.carver.roller.hint",
    ):
        importlib.import_module(module)
    from tilelang.carver import MatmulTemplate as exported
    from tilelang.carver.roller.rasterization import NoRasterization  # noqa: F401

    assert exported is MatmulTemplate


def test_example_config_loop_runs_on_the_hints():
    """The public example's get_configs(with_roller=True), written for this test."""
    from tilelang.carver.roller.rasterization import NoRasterization

    template = _template(4096, 4096, 4096).with_arch(H100)
    assert template.equivalent_function() is not None
    configs = []
    for hint in template.recommend_hints(topk=20):
        block_m, block_n = hint.block
        warp_m, warp_n = hint.warp
        configs.append(
            {
                "block_M": block_m,
                "block_N": block_n,
                "block_K": hint.rstep[0],
                "num_stages": hint.pipeline_stage if hint.pipeline_stage > 1 else 0,
                "thread_num": (block_m // warp_m) * (block_n // warp_n) * 32,
                "enable_rasteration": not isinstance(hint.rasterization_plan, NoRasterization),
            }
        )
    assert len(configs) == 20
    assert configs[0] == {
        "block_M": 128,
        "block_N": 256,
        "block_K": 64,
        "num_stages": 3,
        "thread_num": 256,
        "enable_rasteration": True,
    }
    assert all(c["thread_num"] in (128, 256) and c["num_stages"] >= 2 for c in configs)


def _signature(func):
    return [(p.name, tuple(int(s) for s in p.ty.shape), str(p.ty.dtype)) for p in func.params]


def test_equivalent_function_is_c_equals_a_times_b_transposed():
    func = _template(256, 128, 64).equivalent_function()
    assert isinstance(func, tirx.PrimFunc)
    assert _signature(func) == [("A", (256, 64), "float16"), ("B", (128, 64), "float16"), ("C", (256, 128), "float16")]
    assert "float32" in func.script()  # accumulated in float32, then cast
    plain = MatmulTemplate(M=256, N=128, K=64, trans_B=False, with_bias=True, accum_dtype="float16")
    assert [shape for _, shape, _ in _signature(plain.equivalent_function())] == [
        (256, 64),
        (64, 128),
        (128,),
        (256, 128),
    ]


def test_recommend_hints_without_an_arch_says_so():
    # raised at the call: the traceback shows the user's line
    with pytest.raises(UserError, match=r"MatmulTemplate.recommend_hints: no arch is set; call .with_arch"):
        _template().recommend_hints(topk=20)


def test_bad_parameters_are_user_errors():
    # raised at the call: the traceback shows the user's line
    with pytest.raises(UserError, match="with_arch: expected a device such as CUDA"):
        _template().with_arch("sm_90a")
    # raised at the call: the traceback shows the user's line
    with pytest.raises(UserError, match="M must be a positive int, got None"):
        MatmulTemplate(N=128, K=128)
    # raised at the call: the traceback shows the user's line
    with pytest.raises(UserError, match="K must be a positive int, got 0"):
        MatmulTemplate(M=128, N=128, K=0)


def test_hints_follow_the_arch():
    a100 = _template().with_arch(CUDA.from_arch("sm_80", sm_count=108)).recommend_hints(topk=1)[0]
    assert a100.block == [128, 256] and a100.rasterization_plan.panel_width == 10  # isqrt(108)

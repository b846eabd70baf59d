"""Every keyword the tile ops and loops accept does what it says, or is refused at the user's line;
keywords that only tune are accepted and logged once at INFO. None is silently dropped."""

import logging

import pytest

import tilelang
import tilelang.language as T
from tilelang import log
from tilelang.errors import UserError
from tilelang.testing import assert_points_at

M = N = K = 256


def _copy_kernel(**copy_kwargs):
    @T.prim_func
    def main(A: T.Tensor((128, 64), "float16"), B: T.Tensor((128, 64), "float16")):
        with T.Kernel(1, threads=128):
            s = T.alloc_shared((128, 64), "float16")
            T.copy(A, s, **copy_kwargs)
            T.copy(s, B)

    return main


def _gemm_kernel(stages=3, **copy_kwargs):
    @T.prim_func
    def main(A: T.Tensor((M, K), "float16"), B: T.Tensor((K, N), "float16"), C: T.Tensor((M, N), "float16")):
        with T.Kernel(N // 128, M // 128, threads=256) as (bx, by):
            A_s = T.alloc_shared((128, 32), "float16")
            B_s = T.alloc_shared((32, 128), "float16")
            C_f = T.alloc_fragment((128, 128), "float32")
            T.clear(C_f)
            for k in T.Pipelined(K // 32, num_stages=stages):
                T.copy(A[by * 128, k * 32], A_s, **copy_kwargs)
                T.copy(B[k * 32, bx * 128], B_s)
                T.gemm(A_s, B_s, C_f)
            T.copy(C_f, C[by * 128, bx * 128])

    return main


def _source(func, target="sm_90a"):
    return tilelang.compile(func, out_idx=[-1], target=target).get_kernel_source()


@pytest.fixture
def fresh_hints(monkeypatch):
    """Each test sees the hint logs again (they are logged once per process)."""
    monkeypatch.setattr(log, "_HINTS_LOGGED", set())


# ---- T.copy ----------------------------------------------------------------------------------------


def test_copy_disable_tma_keeps_a_copy_off_tma():
    assert "tl::tma_load" in _source(_copy_kernel())
    src = _source(_copy_kernel(disable_tma=True))
    assert "tl::tma_load" not in src and "mbarrier" not in src


def test_copy_disable_tma_in_a_pipelined_loop_loads_with_cp_async():
    assert "tl::tma_load(A" in _source(_gemm_kernel())
    src = _source(_gemm_kernel(disable_tma=True))
    assert "tl::tma_load" not in src and "cp_async" in src


def test_copy_annotations_take_the_keywords_and_win_over_them():
    src = _source(_copy_kernel(disable_tma=False, annotations={"disable_tma": True}))
    assert "tl::tma_load" not in src


def test_copy_unknown_annotation_is_refused_at_the_line():
    with pytest.raises(Exception, match="(?s)unknown annotation 'tma'.*T.copy\\(A, s, \\*\\*copy_kwargs\\)"):
        _copy_kernel(annotations={"tma": False})


@pytest.mark.parametrize(
    "kwargs, message",
    [
        ({"eviction_policy": "evict_sometimes"}, "eviction_policy must be one of"),
        ({"prefer_instruction": "ldg"}, "prefer_instruction must be one of"),
        ({"loop_layout": T.Fragment((128, 64), forward_thread_fn=lambda i, j: i)}, "loop_layout is not supported"),
    ],
)
def test_copy_bad_values_are_refused(kwargs, message):
    with pytest.raises(Exception, match=message):
        _copy_kernel(**kwargs)


def test_copy_cache_hints_are_accepted_and_logged_once(caplog, fresh_hints):
    caplog.set_level(logging.INFO, logger="tilelang")
    plain = _source(_copy_kernel())
    assert _source(_copy_kernel(eviction_policy="evict_first", prefer_instruction="sync")) == plain
    _copy_kernel(eviction_policy="evict_last")
    hints = [r.getMessage() for r in caplog.records if "eviction_policy" in r.getMessage()]
    assert len(hints) == 1 and "does not apply" in hints[0]
    assert any("prefer_instruction='sync'" in r.getMessage() for r in caplog.records)


# ---- T.gemm ----------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "kwargs, message",
    [({"mbar": 0}, "mbar is the completion barrier of sm_100"), ({"annotations": {"use_2cta": 1}}, "use_2cta")],
)
def test_gemm_sm100_arguments_are_refused_at_the_line(kwargs, message):
    with pytest.raises(Exception, match=f"(?s){message}.*T.gemm\\(A_s, A_s, C_f, \\*\\*kwargs\\)"):

        @T.prim_func
        def main(A: T.Tensor((64, 64), "float16")):
            with T.Kernel(1, threads=128):
                A_s = T.alloc_shared((64, 64), "float16")
                C_f = T.alloc_fragment((64, 64), "float32")
                T.gemm(A_s, A_s, C_f, **kwargs)


# ---- T.Parallel and T.Pipelined ---------------------------------------------------------------------


def _parallel_kernel(**kwargs):
    @T.prim_func
    def main(A: T.Tensor((64, 64), "float32"), B: T.Tensor((64, 64), "float32")):
        with T.Kernel(1, threads=128):
            for i, j in T.Parallel(64, 64, **kwargs):
                B[i, j] = A[i, j]

    return main


def test_parallel_annotations_by_their_public_names():
    assert "float4" in _source(_parallel_kernel(), "sm_80")
    narrow = _source(_parallel_kernel(annotations={"coalesced_width": 2}), "sm_80")
    assert "float2" in narrow and "float4" not in narrow
    assert _source(_parallel_kernel(coalesced_width=2), "sm_80") == narrow


def test_parallel_unknown_annotation_is_refused():
    with pytest.raises(Exception, match="unknown annotation 'unroll'"):
        _parallel_kernel(annotations={"unroll": True})


def test_parallel_prefer_async_is_a_logged_hint(caplog, fresh_hints):
    caplog.set_level(logging.INFO, logger="tilelang")
    annotations = {"parallel_async_without_async_commit_wait": True}
    assert _source(_parallel_kernel(prefer_async=True, annotations=annotations), "sm_80") == _source(
        _parallel_kernel(), "sm_80"
    )
    assert any("prefer_async" in r.getMessage() for r in caplog.records)


def test_pipelined_sync_is_checked_and_logged(caplog, fresh_hints):
    caplog.set_level(logging.INFO, logger="tilelang")

    def kernel(sync):
        @T.prim_func
        def main(A: T.Tensor((64,), "float32")):
            with T.Kernel(1, threads=32):
                for k in T.Pipelined(8, num_stages=2, sync=sync):
                    A[k] = 1.0

        return main

    kernel([[0, 1]])
    assert any("places the pipeline's barriers itself" in r.getMessage() for r in caplog.records)
    with pytest.raises(Exception, match="`sync` must be lists of statement indices"):
        kernel([0, 1])


@pytest.mark.parametrize("stages", [-1, 2.5, True])
def test_pipelined_num_stages_must_be_a_nonnegative_int(stages):
    with pytest.raises(UserError, match=r"(?s)num_stages must be a constant int >= 0.*T.Pipelined\(K // 32") as err:
        _gemm_kernel(stages=stages)
    assert_points_at(err, "for k in T.Pipelined(K // 32, num_stages=stages):")


def test_pipelined_more_stages_than_iterations_is_warned(caplog):
    caplog.set_level(logging.WARNING, logger="tilelang")
    _gemm_kernel(stages=K // 32 + 1)
    (record,) = [r for r in caplog.records if "num_stages" in r.getMessage()]
    assert record.levelno == logging.WARNING
    assert f"num_stages={K // 32 + 1} but the loop runs {K // 32} iterations" in record.getMessage()
    caplog.clear()
    _gemm_kernel(stages=0)  # 0: not pipelined, as in TileLang; no word
    assert not [r for r in caplog.records if "num_stages" in r.getMessage()]

"""Parameters with dynamic dimensions: what a kernel records, how a call binds its symbols, the errors
a wrong call gets, output shapes, and the disk cache keeping symbols (CPU-only)."""

import json
import os

import pytest
import torch

import tilelang
import tilelang.language as T
from tilelang import cache
from tilelang.jit.kernel import JITKernel
from tilelang.jit.params import (
    Param,
    bind_symbols,
    check_argument,
    diagnose,
    evaluate_dim,
    params_of,
    resolve_shape,
)


def rows_plus(block_M=128, dtype="float32", symbol_dtype="int32"):
    """C = A + B[:m] + B[m:] with A, C (m, 64) and B (2m, 64): a symbol, and an expression of it."""
    M = T.dynamic("m", symbol_dtype)

    @T.prim_func
    def main(
        A: T.Tensor((M, 64), dtype),
        B: T.Tensor((M * 2, 64), dtype),
        C: T.Tensor((M, 64), dtype),
    ):
        with T.Kernel(T.ceildiv(M, block_M), threads=128) as bx:
            for i, j in T.Parallel(block_M, 64):
                C[bx * block_M + i, j] = A[bx * block_M + i, j] + B[bx * block_M + i, j] + B[M + bx * block_M + i, j]

    return main


@pytest.fixture(scope="module")
def params():
    return params_of(rows_plus())


def test_params_record_symbols_and_expressions(params):
    a, b, c = params
    assert a == Param("A", ("m", 64), "float32", (("m", "int32"),))
    assert b.shape == ("m * 2", 64) and c.shape == ("m", 64)
    assert a.symbol_dims == ((0, "m"),) and b.symbol_dims == () and b.expression_dims == ((0, "m * 2"),)
    assert a.describe() == "a CUDA tensor of shape [m, 64] and dtype float32"
    assert not a.is_static and Param("X", (4, 8), "float16").is_static
    assert params_of(rows_plus(symbol_dtype="int64"))[0].symbols == (("m", "int64"),)


def test_params_survive_json(params):
    for p in params:
        assert Param.from_json(json.loads(json.dumps(p.to_json()))) == p
    # An entry written without symbol dtypes (JITKernel.describe's plain form) still loads.
    old = json.loads(json.dumps({"name": "A", "shape": ["m", 64], "dtype": "float32"}))
    assert Param.from_json(old) == Param("A", ("m", 64), "float32")


def test_kernel_describe_and_from_cache_keep_symbols():
    kernel = tilelang.compile(rows_plus(), out_idx=[-1], target="sm_80")
    meta = json.loads(json.dumps(kernel.describe()))  # what the disk cache writes and reads back
    again = JITKernel.from_cache(meta, kernel.get_kernel_source(), kernel.get_host_source(), "unused.so")
    assert [p.shape for p in again.params] == [("m", 64), ("m * 2", 64), ("m", 64)]
    bindings = bind_symbols([again.params[k] for k in again._in_idx], [torch.empty(5, 64), torch.empty(10, 64)])
    assert resolve_shape(again.params[2], bindings) == (5, 64)


def test_bind_symbols_and_resolve_output_shape(params):
    a, b, c = params
    bindings = bind_symbols(params, [torch.empty(100, 64), torch.empty(200, 64), None], "rows_plus")
    assert bindings == {"m": 100}
    assert resolve_shape(c, bindings) == (100, 64)
    assert resolve_shape(Param("S", (3, 4), "float32"), {}) == (3, 4)
    assert resolve_shape(Param("D", ("(m + 127) // 128", "max(m, 4)"), "int32"), {"m": 300}) == (3, 300)
    # A size of zero is a size: the kernel runs no iteration of its predicated tile.
    assert bind_symbols(params, [torch.empty(0, 64), torch.empty(0, 64), None]) == {"m": 0}


def test_tensors_sharing_a_symbol_must_agree(params):
    with pytest.raises(ValueError) as info:
        bind_symbols(params, [torch.empty(100, 64), torch.empty(200, 64), torch.empty(99, 64)], "rows_plus")
    text = str(info.value)
    assert "rows_plus: parameters 'A' and 'C' share the dynamic dimension 'm'" in text
    assert "'A' (argument #0, shape [100, 64]) has m = 100" in text
    assert "'C' (argument #2, shape [99, 64]) has m = 99" in text


def test_a_dimension_computed_from_a_symbol_must_match(params):
    with pytest.raises(ValueError) as info:
        bind_symbols(params, [torch.empty(100, 64), torch.empty(201, 64), None], "rows_plus")
    text = str(info.value)
    assert "parameter 'B' (argument #1) has size 201 in dimension 0" in text
    assert "that dimension is m * 2 = 200 with m = 100" in text


def test_an_int32_symbol_cannot_hold_2_to_the_31(params):
    huge = torch.empty(2**31, 0)  # no storage: only the shape matters
    p = Param("A", ("m", 0), "float32", (("m", "int32"),))
    with pytest.raises(ValueError, match=r"size 2147483648 in dimension 0.*T.dynamic\('m', 'int64'\)"):
        bind_symbols([p], [huge])
    wide = Param("A", ("m", 0), "float32", (("m", "int64"),))
    assert bind_symbols([wide], [huge]) == {"m": 2**31}


def test_a_tensor_of_2_to_the_31_elements_needs_an_int64_symbol():
    # A packed varlen Q of 600K tokens x 32 heads x 128: each dimension fits int32, the element count does
    # not, and the kernel's offsets (q_start * 4096 + ...) were int32: they wrapped past 524,288 tokens.
    packed = torch.empty(1, 1, 1).expand(600_000, 32, 128)  # no storage: only the shape matters
    p = Param("Q", ("total_q", 32, 128), "float16", (("total_q", "int32"),))
    message = r"'Q' \(argument #0\) has 2457600000 elements.*int32 offsets.*T.dynamic\('total_q', 'int64'\)"
    with pytest.raises(ValueError, match=message):
        bind_symbols([p], [packed])
    wide = Param("Q", ("total_q", 32, 128), "float16", (("total_q", "int64"),))
    assert bind_symbols([wide], [packed]) == {"total_q": 600_000}
    assert bind_symbols([p], [packed[:524_287]]) == {"total_q": 524_287}  # under 2**31 elements (bounds too)


def test_binding_reports_a_wrong_rank_or_a_non_tensor(params):
    with pytest.raises(ValueError, match=r"parameter 'A' \(argument #0\).*3 dimensions instead of 2"):
        bind_symbols(params, [torch.empty(2, 64, 1), torch.empty(4, 64), None], "rows_plus")
    with pytest.raises(ValueError, match=r"parameter 'A' \(argument #0\).*got float 1.5"):
        bind_symbols(params, [1.5, torch.empty(4, 64), None], "rows_plus")


def test_output_whose_symbol_no_input_has_cannot_be_allocated():
    out = Param("C", ("n", 64), "float32", (("n", "int32"),))
    with pytest.raises(ValueError) as info:
        resolve_shape(out, {"m": 3})
    text = str(info.value)
    assert "cannot allocate output 'C' of shape [n, 64]" in text and "'n'" in text and "out_idx" in text


def test_check_argument_accepts_any_size_for_a_symbol_but_checks_fixed_dims(params):
    a = params[0]
    check_argument(a, torch.empty(7, 64), 0, "k", device=False)
    with pytest.raises(ValueError, match=r"shape \[7, 65\] instead of \[m, 64\]"):
        check_argument(a, torch.empty(7, 65), 0, "k", device=False)


def test_diagnose_reports_a_symbol_mismatch_before_the_device(params):
    # CPU tensors: the device is wrong too, but the mismatch is what the user must fix first.
    with pytest.raises(ValueError, match="share the dynamic dimension 'm'"):
        diagnose(params, [torch.empty(8, 64), torch.empty(16, 64), torch.empty(9, 64)], "rows_plus")
    with pytest.raises(ValueError, match="instead of a CUDA device"):
        diagnose(params, [torch.empty(8, 64), torch.empty(16, 64), torch.empty(8, 64)], "rows_plus")


def test_dimension_expressions_evaluate_integer_arithmetic_only():
    assert evaluate_dim("m * 2 + n // 3 - m % 4", {"m": 10, "n": 9}) == 21
    assert evaluate_dim(64, {}) == 64
    with pytest.raises(KeyError):
        evaluate_dim("m + k", {"m": 1})
    with pytest.raises(ValueError, match="unsupported dimension expression"):
        evaluate_dim("__import__('os').getpid()", {})


def test_disk_cache_round_trip_keeps_symbols(tmp_path, monkeypatch):
    monkeypatch.setenv("TILELANG_CACHE_DIR", str(tmp_path))
    cache.enable()
    first = tilelang.jit(out_idx=[-1], target="sm_80")(rows_plus)(64)
    first._ensure_built()  # nvcc once; the entry is stored now
    assert len(os.listdir(tmp_path / "kernels")) == 1
    again = tilelang.jit(out_idx=[-1], target="sm_80")(rows_plus)(64)  # a fresh factory: loaded from disk
    assert again.prim_func is None
    assert [p.shape for p in again.params] == [("m", 64), ("m * 2", 64), ("m", 64)]
    assert "int m" in again.get_kernel_source()

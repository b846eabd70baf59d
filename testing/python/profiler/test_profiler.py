"""The profiler without a GPU: input generation per dtype and supply type (on the CPU), and the
comparison of assert_allclose against fake kernels that compute on the CPU."""

import pytest
import torch

import tilelang
import tilelang.language as T
from tilelang.jit.params import Param
from tilelang.profiler import Profiler, TensorSupplyType, check_close, supply_tensor

DTYPES = ["float16", "bfloat16", "float32", "float64", "float8_e4m3fn", "float8_e5m2"]
DTYPES += ["int8", "int32", "int64", "uint8", "bool"]


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("kind", list(TensorSupplyType))
def test_supply_every_dtype_and_kind(dtype, kind):
    t = supply_tensor(Param("A", (64, 48), dtype), kind, device="cpu")
    assert t.shape == (64, 48) and t.dtype == getattr(torch, dtype) and t.device.type == "cpu"
    values = t.to(torch.float64)
    if kind is TensorSupplyType.Zero:
        assert not values.any()
        return
    if kind is TensorSupplyType.One:
        assert (values == 1).all()
        return
    # Every random kind gives varied values, never a constant tensor that would hide bugs.
    assert values.unique().numel() > 1
    if dtype == "bool":
        return
    if dtype.startswith(("int", "uint")) or kind is TensorSupplyType.Integer:
        assert (values == values.round()).all(), "integer draws are whole numbers"
        low = 0 if dtype.startswith("uint") else -2
        assert values.min() >= low and values.max() <= 2
    elif kind is TensorSupplyType.Uniform:
        assert values.abs().max() <= 1
    else:  # Normal, Randn, Auto: N(0, 1)
        assert values.abs().mean() == pytest.approx(0.8, abs=0.15)


def test_dynamic_dimension_asks_for_input_tensors():
    with pytest.raises(ValueError, match=r"parameter 'A' has shape \['m', 64\].*input_tensors"):
        supply_tensor(Param("A", ("m", 64), "float16"), TensorSupplyType.Randn, device="cpu")


def test_unsupported_dtype_is_named():
    with pytest.raises(ValueError, match="float4_e2m1fn"):
        supply_tensor(Param("A", (4,), "float4_e2m1fn"), TensorSupplyType.Randn, device="cpu")


class FakeKernel:
    """What the profiler needs of a kernel: params, out_idx, name, and a call that returns the outputs."""

    def __init__(self, params, out_idx, fn, name="fake"):
        self.params, self.out_idx, self.fn, self.name = params, out_idx, fn, name

    def __call__(self, *inputs):
        return self.fn(*inputs)


def add_kernel(fn, dtype="float16", n=1000):
    params = [Param("A", (n,), dtype), Param("B", (n,), dtype), Param("C", (n,), dtype)]
    return FakeKernel(params, [2], fn, name="add")


def test_assert_allclose_passes_for_a_correct_kernel():
    kernel = add_kernel(lambda a, b: a + b)
    # The reference computes in float32; the comparison accepts the float16 kernel output.
    Profiler(kernel, TensorSupplyType.Randn, device="cpu").assert_allclose(lambda a, b: a.float() + b.float())


def test_assert_allclose_reports_output_count_and_worst_element():
    kernel = add_kernel(lambda a, b: a - b)
    with pytest.raises(AssertionError) as info:
        Profiler(kernel, TensorSupplyType.Randn, device="cpu").assert_allclose(lambda a, b: a + b)
    text = str(info.value)
    assert "add: output 'C' differs from the reference in" in text and "of 1000 elements" in text
    assert "worst at index [" in text and "got" in text and "expected" in text


def test_inputs_are_fresh_for_every_check():
    """A kernel that keeps returning its first result (as a recycled output buffer would) must fail."""
    first = []

    def stale(a, b):
        if not first:
            first.append(a + b)
        return first[0]

    profiler = Profiler(add_kernel(stale), TensorSupplyType.Randn, device="cpu")
    profiler.assert_allclose(lambda a, b: a + b)
    with pytest.raises(AssertionError, match="differs from the reference"):
        profiler.assert_allclose(lambda a, b: a + b)


def test_a_few_mismatches_are_allowed_by_ratio():
    def one_off(a, b):
        c = a + b
        c[7] += 100
        return c

    profiler = Profiler(add_kernel(one_off, dtype="float32"), TensorSupplyType.Randn, device="cpu")
    profiler.assert_allclose(lambda a, b: a + b)  # 1 of 1000 is within the default 1%
    with pytest.raises(AssertionError, match=r"in 1 of 1000 elements .*worst at index \[7\]"):
        profiler.assert_allclose(lambda a, b: a + b, max_mismatched_ratio=0.0)


def test_several_outputs_and_given_inputs():
    params = [Param("X", (8, 4), "float32"), Param("S", (8,), "float32"), Param("M", (8,), "float32")]
    kernel = FakeKernel(params, [1, 2], lambda x: [x.sum(1), x.max(1).values])
    profiler = Profiler(kernel, device="cpu")
    x = torch.arange(32.0).reshape(8, 4)
    profiler.assert_allclose(lambda x: (x.sum(1), x.max(1).values), input_tensors=[x])
    with pytest.raises(AssertionError, match="output 'M' differs"):
        profiler.assert_allclose(lambda x: (x.sum(1), x.min(1).values), input_tensors=[x])
    with pytest.raises(AssertionError, match=r"returns 2 outputs \(S, M\), the reference returned 1"):
        profiler.assert_allclose(lambda x: x.sum(1), input_tensors=[x])


@pytest.mark.parametrize("dtype", ["float8_e4m3fn", "bool", "int8", "uint8", "int64", "bfloat16"])
def test_outputs_of_every_dtype_compare_against_a_float_reference(dtype):
    kernel = add_kernel(lambda a, b: a.float().add(b.float()).to(getattr(torch, dtype)), dtype=dtype, n=256)
    reference = {"bool": lambda a, b: a | b}.get(dtype, lambda a, b: (a.float() + b.float()).to(a.dtype).float())
    Profiler(kernel, TensorSupplyType.Integer, device="cpu").assert_allclose(reference)


def test_check_close_shapes_and_nans():
    nan = float("nan")
    check_close("out", torch.tensor([1.0, nan]), torch.tensor([1.0, nan]), 1e-2, 1e-2)
    with pytest.raises(AssertionError, match="1 of 2 elements"):
        check_close("out", torch.tensor([1.0, nan]), torch.tensor([1.0, 2.0]), 1e-2, 1e-2)
    with pytest.raises(AssertionError, match=r"out has shape \[2\], the reference \[2, 1\]"):
        check_close("out", torch.ones(2), torch.ones(2, 1), 1e-2, 1e-2)


def test_kernel_without_outputs_is_a_clear_error():
    kernel = FakeKernel([Param("A", (4,), "float32")], [], lambda a: None, name="inplace")
    with pytest.raises(ValueError, match="inplace: assert_allclose .* out_idx"):
        Profiler(kernel, device="cpu").assert_allclose(lambda a: a)


@tilelang.jit(out_idx=[-1], target="sm_80")
def axpy(N, alpha=2.0):
    @T.prim_func
    def main(X: T.Tensor((N,), "float16"), Y: T.Tensor((N,), "float16"), Z: T.Tensor((N,), "float16")):
        with T.Kernel(T.ceildiv(N, 128), threads=128) as bx:
            for i in T.Parallel(128):
                Z[bx * 128 + i] = X[bx * 128 + i] * alpha + Y[bx * 128 + i]

    return main


def test_jit_kernel_gives_a_profiler_over_its_inputs():
    kernel = axpy(512)  # traced and lowered for sm_80: no GPU needed to build the profiler
    profiler = kernel.get_profiler(tilelang.TensorSupplyType.Randn)
    assert isinstance(profiler, Profiler) and profiler.kernel is kernel
    assert profiler.supply_type is TensorSupplyType.Randn and profiler.device == "cuda"
    assert [p.name for p in profiler.input_params] == ["X", "Y"]
    assert kernel.get_profiler().supply_type is TensorSupplyType.Auto
    assert tilelang.TensorSupplyType is TensorSupplyType


def test_do_bench_in_turn_times_the_functions_in_turn_and_takes_medians(monkeypatch):
    from tilelang.profiler import bench

    calls = []
    fake = {"a": iter([3.0, 1.0, 2.0]), "b": iter([5.0, 9.0, 4.0])}

    def timed(fn, **kwargs):
        calls.append(fn())
        return next(fake[calls[-1]])

    monkeypatch.setattr(bench, "do_bench", timed)
    got = bench.do_bench_in_turn({"a": lambda: "a", "b": lambda: "b", "missing": None}, rounds=3, rep=5)
    assert calls == ["a", "b"] * 3  # one of each per round, not all of a first
    assert got["a"] == 2.0 and got["b"] == 5.0 and got["missing"] != got["missing"]  # nan

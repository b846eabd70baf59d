"""tilelang.utils.tensor: dtype names to torch, the input supply, and torch_assert_close's
tolerance of a few mismatches."""

import pytest
import torch

import tilelang
from tilelang.jit.params import Param
from tilelang.utils.tensor import TensorSupplyType, get_tensor_supply, map_torch_type, torch_assert_close


def test_map_torch_type():
    assert map_torch_type("float16") is torch.float16
    assert map_torch_type("float8_e4m3") is torch.float8_e4m3fn
    assert map_torch_type("float8_e5m2") is torch.float8_e5m2
    assert map_torch_type("float") is torch.float32


def test_tensor_supply_type_is_one_class():
    assert TensorSupplyType is tilelang.TensorSupplyType


def test_get_tensor_supply_draws_per_kind():
    param = Param("A", (64, 32), "float16")
    ones = get_tensor_supply(TensorSupplyType.One)(param)
    assert ones.shape == (64, 32) and ones.dtype == torch.float16 and bool((ones == 1).all())
    ints = get_tensor_supply(TensorSupplyType.Integer)(Param("B", (1000,), "int32"))
    assert ints.dtype == torch.int32 and int(ints.min()) >= -2 and int(ints.max()) <= 2 and len(ints.unique()) > 1
    with pytest.raises(ValueError, match="not fixed"):
        get_tensor_supply(TensorSupplyType.Randn)(Param("C", ("m", 4), "float32"))


def test_close_within_the_mismatch_ratio():
    a = torch.ones(1000)
    b = a.clone()
    b[0] = 5.0
    assert torch_assert_close(a, b, max_mismatched_ratio=0.001) is True  # 1 of 1000 allowed
    b[1] = 5.0
    with pytest.raises(AssertionError, match=r"(?s)Too many mismatched elements: 2 > 1.*First mismatch at index \[0\]"):
        torch_assert_close(a, b, max_mismatched_ratio=0.001)


def test_tolerances():
    a = torch.tensor([1.0, 2.0])
    torch_assert_close(a, a + 0.005, rtol=0, atol=0.01, max_mismatched_ratio=0)
    with pytest.raises(AssertionError):
        torch_assert_close(a, a + 0.05, rtol=0, atol=0.01, max_mismatched_ratio=0)


def test_attribute_checks():
    a = torch.ones(4)
    with pytest.raises(AssertionError, match="differ in shape"):
        torch_assert_close(a, torch.ones(5))
    with pytest.raises(AssertionError, match="differ in dtype"):
        torch_assert_close(a, torch.ones(4, dtype=torch.float16))
    # Without the dtype check, values compare in the promoted dtype.
    assert torch_assert_close(a, torch.ones(4, dtype=torch.float16), check_dtype=False)
    assert torch_assert_close(torch.ones(4, dtype=torch.uint16), torch.ones(4, dtype=torch.int8), check_dtype=False)

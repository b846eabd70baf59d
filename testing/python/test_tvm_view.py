"""tilelang.tvm: TVM 0.27 seen as the public TileLang's fork (tvm.tir, tvm.tirx, PrimExpr), every
name being TVM's own object, and TVM itself left unchanged."""

import pytest
import tvm as real_tvm

import tilelang.language as T
from tilelang import tvm


def test_tir_and_tirx_are_views_onto_tirx():
    assert tvm.tir.PrimFunc is real_tvm.tirx.PrimFunc and tvm.tirx.Var is real_tvm.tirx.Var
    n = tvm.tir.IntImm("int32", 128)
    assert isinstance(n, tvm.tir.PrimExpr) and int(n) == 128
    assert isinstance(tvm.tirx.const(3, "int32"), tvm.tirx.PrimExpr)
    assert tvm.tir.Call is real_tvm.ir.Call and tvm.tir.StringImm is real_tvm.ir.StringImm


def test_a_prim_func_is_a_tir_prim_func():
    @T.prim_func
    def main(A: T.Tensor((128,), "float32")):
        with T.Kernel(1, threads=128):
            for i in T.Parallel(128):
                A[i] = 0.0

    assert isinstance(main, tvm.tir.PrimFunc)


def test_top_level_and_ir_names_are_tvms():
    assert tvm.DataType("float16").bits == 16
    assert tvm.ir.Range is real_tvm.ir.Range and tvm.IRModule is real_tvm.IRModule
    assert tvm.target.Target is real_tvm.target.Target
    a, b = real_tvm.tirx.Var("x", "int32"), real_tvm.tirx.Var("x", "int32")
    assert tvm.ir.structural_equal(a + 1, a + 1) and not tvm.ir.structural_equal(a + 1, b + 2)
    assert tvm.__version__ == real_tvm.__version__


def test_imports_through_the_view():
    from tilelang.tvm.tir import PrimFunc

    assert PrimFunc is real_tvm.tirx.PrimFunc


def test_testing_view_has_the_requirements():
    import tilelang.testing

    assert tvm.testing.requires_package is tilelang.testing.requires_package
    assert tvm.testing.requires_cuda is tilelang.testing.requires_cuda


def test_tvm_itself_only_gains_the_forks_tirx_aliases():
    # Code written for the public TileLang does `from tvm import tirx` and annotates with tirx.PrimExpr.
    from tvm import tirx

    assert tirx.PrimExpr is real_tvm.ir.Expr and tirx.Call is real_tvm.ir.Call
    assert not hasattr(real_tvm, "tir")


def test_names_0_27_moved_say_where():
    with pytest.raises(AttributeError, match="structural_walk"):
        tvm.tir.stmt_functor  # noqa: B018

"""use_fast_exp2: float32 T.exp2 becomes tl::fast_exp2 (ex2.approx.ftz.f32) by default, one call per
vector lane after vectorization; other types keep theirs; `tl.disable_fast_math` keeps exp2f."""

import tvm

import tilelang
import tilelang.language as T
from tilelang.codegen import cuda
from tilelang.transform.use_fast_exp2 import use_fast_exp2
from tilelang.utils.ir import collect


def _kernel(dtype="float32"):
    @T.prim_func
    def main(A: T.Tensor((1024,), dtype), B: T.Tensor((1024,), dtype)):
        with T.Kernel(4, threads=64) as bx:
            for i in T.Parallel(256):
                B[bx * 256 + i] = T.exp2(A[bx * 256 + i]) + T.exp(A[bx * 256 + i])

    return main


def _calls(func):
    return [c for c in collect(func.body, tvm.ir.Call) if isinstance(c.op, tvm.ir.Op)]


def test_float32_exp2_becomes_the_approximate_instruction():
    after = use_fast_exp2(_kernel())
    names = [str(c.args[0]) for c in _calls(after) if c.op.name == "tirx.call_pure_extern"]
    assert names == ['"tl::fast_exp2"'] or names == ["tl::fast_exp2"]
    assert not [c for c in _calls(after) if c.op.name == "tirx.exp2"]
    assert [c for c in _calls(after) if c.op.name == "tirx.exp"]  # only exp2 changes


def test_other_types_keep_their_exp2():
    func = _kernel("float16")
    assert use_fast_exp2(func).same_as(func)


def test_generated_code_by_default_and_with_disable_fast_math():
    k = tilelang.compile(_kernel(), target="sm_90a")
    src = k.get_kernel_source()
    # The loop stays vectorized (float4 loads), each lane one call.
    assert "float4 v_ = *(float4*)(A_ptr" in src and src.count("tl::fast_exp2(v_.") == 4 and "exp2f" not in src
    cuda.compile_object(src, k.target)
    precise = tilelang.compile(_kernel(), target="sm_90a", pass_configs={"tl.disable_fast_math": True})
    assert "tl::fast_exp2" not in precise.get_kernel_source() and "exp2f" in precise.get_kernel_source()


def test_the_pass_leaves_kernels_without_exp2_alone():
    @T.prim_func
    def copy(A: T.Tensor((64,), "float32"), B: T.Tensor((64,), "float32")):
        with T.Kernel(1, threads=64):
            for i in T.Parallel(64):
                B[i] = A[i]

    assert use_fast_exp2(copy).same_as(copy)

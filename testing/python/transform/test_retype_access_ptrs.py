"""retype_access_ptrs: a tvm_access_ptr whose element type differs from the tile it points into (TVM's
StorageRewrite gave a bfloat16 tile the bytes of a float32 one and re-pointed the pointer there) gets
a view of the tile in its own type; TVM's LowerIntrin stopped on it with "tvm_access_ptr element
type must match the source buffer"."""

import pytest
from ir_testing import assert_ir_equal
from tvm.script import tirx as T

import tilelang
import tilelang.language as TL
from tilelang.codegen import cuda
from tilelang.transform.retype_access_ptrs import retype_access_ptrs


def test_a_pointer_of_another_type_gets_a_view_of_its_type():
    @T.prim_func
    def before(A: T.Buffer((4096,), "bfloat16")):
        tx = T.launch_thread("threadIdx.x", 128)
        W = T.alloc_buffer((2048,), "float32", scope="shared.dyn")
        W[tx] = T.float32(0)
        T.evaluate(T.call_extern("void", "use", T.tvm_access_ptr(T.type_annotation("bfloat16"), W, 64, 4032, 1)))
        T.evaluate(T.call_extern("void", "use", T.tvm_access_ptr(T.type_annotation("bfloat16"), W, 0, 4096, 1)))
        T.evaluate(T.call_extern("void", "use", T.tvm_access_ptr(T.type_annotation("float32"), W, 0, 2048, 1)))

    @T.prim_func
    def expected(A: T.Buffer((4096,), "bfloat16")):
        tx = T.launch_thread("threadIdx.x", 128)
        W = T.alloc_buffer((2048,), "float32", scope="shared.dyn")
        W_1 = T.decl_buffer((4096,), "bfloat16", data=W.data, scope="shared.dyn")  # one view per type
        W[tx] = T.float32(0)
        T.evaluate(T.call_extern("void", "use", T.tvm_access_ptr(T.type_annotation("bfloat16"), W_1, 64, 4032, 1)))
        T.evaluate(T.call_extern("void", "use", T.tvm_access_ptr(T.type_annotation("bfloat16"), W_1, 0, 4096, 1)))
        T.evaluate(T.call_extern("void", "use", T.tvm_access_ptr(T.type_annotation("float32"), W, 0, 2048, 1)))

    assert_ir_equal(retype_access_ptrs(before), expected)


def test_pointers_of_the_tiles_own_type_are_left_alone():
    @T.prim_func
    def plain(A: T.Buffer((4096,), "bfloat16")):
        tx = T.launch_thread("threadIdx.x", 128)
        S = T.alloc_buffer((4096,), "bfloat16", scope="shared.dyn")
        S[tx] = A[tx]
        T.evaluate(T.call_extern("void", "use", T.tvm_access_ptr(T.type_annotation("bfloat16"), S, 0, 4096, 1)))

    assert retype_access_ptrs(plain).same_as(plain)


def _workspace_then_gemm():
    """A float32 tile used first, then two bfloat16 gemm operands of the same bytes: StorageRewrite
    gives A_s W_s's allocation (their lifetimes do not overlap)."""

    @TL.prim_func
    def main(
        X: TL.Tensor((64, 32), "float32"),
        Y: TL.Tensor((64, 32), "float32"),
        A: TL.Tensor((64, 64), "bfloat16"),
        B: TL.Tensor((64, 64), "bfloat16"),
        C: TL.Tensor((64, 64), "float32"),
    ):
        with TL.Kernel(1, threads=128):
            W_s = TL.alloc_shared((64, 32), "float32")
            A_s = TL.alloc_shared((64, 64), "bfloat16")
            B_s = TL.alloc_shared((64, 64), "bfloat16")
            C_f = TL.alloc_fragment((64, 64), "float32")
            TL.copy(X, W_s)
            for i, j in TL.Parallel(64, 32):
                Y[i, j] = W_s[i, j] * 2
            TL.copy(A, A_s)
            TL.copy(B, B_s)
            TL.gemm(A_s, B_s, C_f, clear_accum=True)
            TL.copy(C_f, C)

    return main


@pytest.mark.parametrize("target", ["sm_80", "sm_90a"])
def test_a_gemm_operand_in_a_float32_tiles_bytes_compiles(target):
    k = tilelang.compile(_workspace_then_gemm(), target=target)
    src = k.get_kernel_source()
    # A_s starts where W_s did, read as bfloat16.
    assert "(&(((nv_bfloat16*)buf_dyn_shmem_ptr)[0]))" in src
    cuda.compile_object(src, k.target)

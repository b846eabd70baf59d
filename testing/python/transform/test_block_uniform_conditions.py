"""Conditions every thread of a block evaluates alike may hold barriers: block indices and loop
counters, and reads of global tensors the kernel never writes at such indices (a block-sparse
mask). A condition reading memory the kernel writes stays an error at the user's `if`."""

import pytest

import tilelang
import tilelang.language as T
from tilelang.codegen import cuda
from tilelang.errors import UserError
from tilelang.testing import assert_points_at

M = N = K = 512


def _blocksparse(write_mask=False):
    @T.prim_func
    def main(
        A: T.Tensor((M, K), "float16"),
        B: T.Tensor((K, N), "float16"),
        Mask: T.Tensor((M // 128, N // 128, K // 32), "bool"),
        C: T.Tensor((M, N), "float16"),
    ):
        with T.Kernel(N // 128, M // 128, threads=128) as (bx, by):
            A_s = T.alloc_shared((128, 32), "float16")
            B_s = T.alloc_shared((32, 128), "float16")
            C_f = T.alloc_fragment((128, 128), "float32")
            T.clear(C_f)
            for k in T.Pipelined(K // 32, num_stages=2):
                if Mask[by, bx, k]:
                    T.copy(A[by * 128, k * 32], A_s)
                    T.copy(B[k * 32, bx * 128], B_s)
                    T.gemm(A_s, B_s, C_f)
            if write_mask:
                Mask[by, bx, 0] = False
            T.copy(C_f, C[by * 128, bx * 128])

    return main


@pytest.mark.parametrize("target", ["sm_80", "sm_90a"])
def test_a_block_sparse_mask_guards_tile_ops(target):
    kernel = tilelang.compile(_blocksparse(), out_idx=[-1], target=target)
    src = kernel.get_kernel_source()
    assert "Mask" in src and "__syncthreads" in src
    cuda.compile_object(src, kernel.target)


def test_a_mask_the_kernel_writes_is_not_uniform():
    with pytest.raises(UserError, match="(?s)may differ between the threads.*if Mask\\[by, bx, k\\]") as err:
        tilelang.compile(_blocksparse(write_mask=True), out_idx=[-1], target="sm_80")
    assert_points_at(err, "if Mask[by, bx, k]:")


def test_pure_calls_keep_a_condition_uniform():
    # A dynamic number of blocks: the mask's reads are bounds-checked with if_then_else, and the
    # split's start picks with T.min and T.if_then_else (the public varlen decode examples).
    num_blocks = T.dynamic("num_blocks")

    @T.prim_func
    def main(
        A: T.Tensor((M, K), "float16"),
        B: T.Tensor((K, N), "float16"),
        Mask: T.Tensor((M // 128, N // 128, num_blocks), "bool"),
        C: T.Tensor((M, N), "float16"),
    ):
        with T.Kernel(N // 128, M // 128, threads=128) as (bx, by):
            A_s = T.alloc_shared((128, 32), "float16")
            B_s = T.alloc_shared((32, 128), "float16")
            C_f = T.alloc_fragment((128, 128), "float32")
            T.clear(C_f)
            start = T.min(bx, 2) + T.if_then_else(by < 2, 1, 0)
            for k in T.Pipelined(K // 32 - 4, num_stages=2):
                if Mask[by, bx, start + k]:
                    T.copy(A[by * 128, k * 32], A_s)
                    T.copy(B[k * 32, bx * 128], B_s)
                    T.gemm(A_s, B_s, C_f)
            T.copy(C_f, C[by * 128, bx * 128])

    kernel = tilelang.compile(main, out_idx=[-1], target="sm_80")
    assert "__syncthreads" in kernel.get_kernel_source()


def _table_from_an_earlier_kernel():
    """A tile table the function's first kernel fills, read in the second kernel's condition: the
    launches run in order, so the table is read-only there and the condition is block-uniform."""

    @T.prim_func
    def main(x: T.Tensor((4, 128), "float16"), given: T.Tensor((4,), "int32"), y: T.Tensor((4, 128), "float16")):
        table = T.alloc_global((4,), "int32")
        with T.Kernel(1, threads=32):
            for i in T.Parallel(4):
                table[i] = given[i]
        with T.Kernel(4, threads=128) as bx:
            s = T.alloc_shared((128,), "float16")
            if table[bx] >= 0:
                T.copy(x[bx, 0], s)
                for i in T.Parallel(128):
                    y[bx, i] = s[127 - i]  # what another thread wrote: a barrier inside the if

    return main


@pytest.mark.parametrize("target", ["sm_80", "sm_90a"])
def test_a_table_an_earlier_kernel_wrote_is_uniform(target):
    kernel = tilelang.compile(_table_from_an_earlier_kernel(), target=target)
    src = kernel.get_kernel_source()
    body = src[src.index("if (0 <= table") :]
    assert "__syncthreads();" in body[: body.index("y_ptr[")]
    cuda.compile_object(src, kernel.target, host_src=kernel.host_source)


def gather_under_table_guard(n=8):
    """`if idx[k] >= 0:` around a copy gathered by idx[k] (the table read inside the copy's address)
    and work needing barriers inside the `if` (a row max across the warps of a FullCol gemm)."""

    @T.prim_func
    def main(A: T.Tensor([n * 64, 64], "float16"), idx: T.Tensor([n], "int32"), C: T.Tensor([64, 64], "float")):
        with T.Kernel(1, threads=128):
            A_s = T.alloc_shared([64, 64], "float16")
            P_s = T.alloc_shared([64, 64], "float16")
            s = T.alloc_fragment([64, 64], "float")
            acc = T.alloc_fragment([64, 64], "float")
            m = T.alloc_fragment([64], "float")
            T.fill(m, 0)
            T.clear(acc)
            for k in T.Pipelined(n, num_stages=2):
                if idx[k] >= 0:
                    T.copy(A[idx[k] * 64 : idx[k] * 64 + 64, :], A_s)
                    T.gemm(A_s, A_s, s, transpose_B=True, clear_accum=True, policy=T.GemmWarpPolicy.FullCol)
                    T.reduce_max(s, m, dim=1, clear=False)
                    T.copy(s, P_s)
                    T.gemm(P_s, A_s, acc, policy=T.GemmWarpPolicy.FullCol)
            T.copy(acc, C)

    return main


@pytest.mark.parametrize("target", ["sm_80", "sm_90a"])
def test_a_table_read_inside_a_copys_address_is_still_read_only(target):
    # The cp.async / TMA source address &A[idx[k] * 4096 + ...] loads idx: only A is what the call
    # addresses. Before, idx counted as written there, and the guard as not block-uniform (an error).
    src = tilelang.compile(gather_under_table_guard(), out_idx=[2], target=target).get_kernel_source()
    cuda.compile_object(src, tilelang.utils.target.determine_target(target))

"""hoist_shared_reads: an `if` condition or a loop bound that reads shared memory is bound just
before its statement, where TVM's barrier insertion sees the read (it stopped with "Check failed:
(allow_append_) is false" on such reads, as in a top-k kernel's `if s_histogram[tx] >= k:`)."""

from ir_testing import assert_ir_equal
from tvm.script import tirx as T

import tilelang
import tilelang.language as TL
from tilelang.transform.hoist_shared_reads import hoist_shared_reads


def test_conditions_and_bounds_reading_shared_memory_are_bound_before():
    @T.prim_func
    def before(A: T.Buffer((128,), "int32"), B: T.Buffer((128,), "int32")):
        tx = T.launch_thread("threadIdx.x", 128)
        S = T.alloc_buffer((128,), "int32", scope="shared.dyn")
        S[tx] = A[tx]
        if S[127 - tx] > 0:
            B[tx] = 1
        for i in range(S[0]):
            B[tx] = B[tx] + i
        if A[tx] > 0:  # global memory: TVM's barrier insertion does not look at it
            B[tx] = 3

    @T.prim_func
    def expected(A: T.Buffer((128,), "int32"), B: T.Buffer((128,), "int32")):
        tx = T.launch_thread("threadIdx.x", 128)
        S = T.alloc_buffer((128,), "int32", scope="shared.dyn")
        S[tx] = A[tx]
        cond: T.let[T.bool] = S[127 - tx] > 0
        if cond:
            B[tx] = 1
        i_extent: T.let[T.int32] = S[0]
        for i in range(i_extent):
            B[tx] = B[tx] + i
        if A[tx] > 0:
            B[tx] = 3

    assert_ir_equal(hoist_shared_reads(before), expected)


def test_a_kernel_without_such_reads_is_left_alone():
    @T.prim_func
    def plain(A: T.Buffer((128,), "int32"), B: T.Buffer((128,), "int32")):
        tx = T.launch_thread("threadIdx.x", 128)
        if A[tx] > 0:
            B[tx] = 1

    assert hoist_shared_reads(plain).same_as(plain)


@TL.prim_func
def branch_on_shared(A: TL.Tensor((128,), "int32"), B: TL.Tensor((128,), "int32")):
    with TL.Kernel(1, threads=128):
        S = TL.alloc_shared((128,), "int32")
        n = TL.alloc_shared((1,), "int32")
        tx = TL.get_thread_binding()
        S[tx] = A[tx]
        if tx == 0:
            n[0] = A[0] % 8
        B[tx] = 0
        if S[127 - tx] > 0:  # reads what another thread wrote
            B[tx] = 1
        for i in range(n[0]):  # a bound thread 0 wrote
            B[tx] = B[tx] + S[i]


def test_barriers_order_the_reads_after_the_writes():
    src = tilelang.compile(branch_on_shared, target="sm_80").get_kernel_source()
    body = src[src.index("__global__ void __launch_bounds__") :]
    # One barrier after the writes (S by every thread, n by thread 0), before the first read.
    sync, cond, loop = (body.index(s) for s in ("__syncthreads();", "bool cond =", "for (int i = 0; i < i_extent;"))
    assert body.count("__syncthreads();") == 1 and sync < cond < loop

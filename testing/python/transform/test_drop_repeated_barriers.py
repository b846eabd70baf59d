"""drop_repeated_barriers: a block barrier right after another goes (TVM's insertion runs once per
shared scope and may put one each at the same point); named barriers and barriers with any statement
between them stay."""

from tvm.script import tirx as T

import tilelang
import tilelang.language as TL
from tilelang.transform.drop_repeated_barriers import drop_repeated_barriers


@T.prim_func
def two_scopes(A: T.Buffer((128,), "float32")):
    _bx = T.launch_thread("blockIdx.x", 1)
    tx = T.launch_thread("threadIdx.x", 128)
    A_s = T.alloc_buffer((128,), "float32", scope="shared")
    B_s = T.alloc_buffer((128,), "float32", scope="shared.dyn")
    A_s[tx] = A[tx]
    B_s[tx] = A[tx]
    for r in range(4):
        T.tvm_storage_sync("shared")
        T.tvm_storage_sync("shared.dyn")
        A[tx] = A_s[127 - tx] + B_s[(tx + r) % 128]
        T.tvm_storage_sync("shared.dyn")
        T.evaluate(T.call_extern("int32", "__syncthreads"))
        T.evaluate(T.call_extern("int32", "tl::named_barrier_sync<1, 128>"))
        A_s[tx] = A[tx]


def test_a_barrier_next_to_another_goes_and_the_rest_stay():
    after = drop_repeated_barriers(two_scopes).script()
    assert after.count("tvm_storage_sync") == 2 and "__syncthreads" not in after
    # the first of each pair stays, in place; the named barrier is not a block barrier
    assert after.index("tvm_storage_sync(\"shared\",") < after.index("A[tx] = A_s[127 - tx]")
    assert "named_barrier_sync" in after


@T.prim_func
def nothing_repeated(A: T.Buffer((128,), "float32")):
    _bx = T.launch_thread("blockIdx.x", 1)
    tx = T.launch_thread("threadIdx.x", 128)
    A_s = T.alloc_buffer((128,), "float32", scope="shared")
    A_s[tx] = A[tx]
    T.tvm_storage_sync("shared")
    A[tx] = A_s[127 - tx]
    T.tvm_storage_sync("shared")
    A_s[tx] = A[tx]


def test_a_kernel_without_repeated_barriers_is_returned_as_is():
    assert drop_repeated_barriers(nothing_repeated).same_as(nothing_repeated)


def test_a_dynamic_shape_gemm_waits_once_per_iteration():
    # Its pipelined loop used to start with two __syncthreads in a row (one per shared scope).
    m, n, k = TL.dynamic("m"), TL.dynamic("n"), TL.dynamic("k")

    @TL.prim_func
    def main(A: TL.Tensor((m, k), "float16"), B: TL.Tensor((k, n), "float16"), C: TL.Tensor((m, n), "float32")):
        with TL.Kernel(TL.ceildiv(n, 128), TL.ceildiv(m, 128), threads=128) as (bx, by):
            A_s = TL.alloc_shared((128, 32), "float16")
            B_s = TL.alloc_shared((32, 128), "float16")
            C_f = TL.alloc_fragment((128, 128), "float32")
            TL.clear(C_f)
            for kk in TL.Pipelined(TL.ceildiv(k, 32), num_stages=3):
                TL.copy(A[by * 128, kk * 32], A_s)
                TL.copy(B[kk * 32, bx * 128], B_s)
                TL.gemm(A_s, B_s, C_f)
            TL.copy(C_f, C[by * 128, bx * 128])

    src = tilelang.compile(main, target="sm_80").get_kernel_source()
    lines = [line.strip() for line in src.splitlines() if line.strip()]
    assert "__syncthreads();" in lines
    assert not [a for a, b in zip(lines, lines[1:]) if a == b == "__syncthreads();"]

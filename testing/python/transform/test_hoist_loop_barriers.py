"""hoist_loop_barriers: the barrier TVM puts first in a loop moves before it when no shared tile is
both read and written in the loop (a T.Parallel transposing one tile into another: one barrier, not
one per iteration); a loop reading and writing one tile, or reaching a tile through a pointer, keeps
it."""

import re

import tvm_ffi
from tvm import tirx
from tvm.script import tirx as T

import tilelang
import tilelang.language as TL
from tilelang.transform.hoist_loop_barriers import hoist_loop_barriers


@T.prim_func
def transpose_loop(A: T.Buffer((4096,), "float16")):
    _bx = T.launch_thread("blockIdx.x", 1)
    tx = T.launch_thread("threadIdx.x", 128)
    A_s = T.alloc_buffer((4096,), "float16", scope="shared.dyn")
    B_s = T.alloc_buffer((4096,), "float16", scope="shared.dyn")
    A_s[tx] = A[tx]
    for r in range(32):
        T.tvm_storage_sync("shared.dyn")
        B_s[tx % 64 * 64 + r * 2 + tx // 64] = A_s[r * 128 + tx]
    T.tvm_storage_sync("shared.dyn")
    A[tx] = B_s[tx]


def test_a_loop_carrying_nothing_gets_one_barrier_before_it():
    after = hoist_loop_barriers(transpose_loop).script()
    assert re.search(r'T.tvm_storage_sync\("shared.dyn".*\n\s*for r in range\(32\):\n\s*B_s\[', after)
    assert after.count("tvm_storage_sync") == 2


@T.prim_func
def accumulate_in_place(A: T.Buffer((128,), "float32")):
    _bx = T.launch_thread("blockIdx.x", 1)
    tx = T.launch_thread("threadIdx.x", 128)
    S = T.alloc_buffer((128,), "float32", scope="shared.dyn")
    S[tx] = A[tx]
    for r in range(4):
        T.tvm_storage_sync("shared.dyn")
        S[tx] = S[(tx + r) % 128] + T.float32(1)  # iteration r reads what r - 1 wrote: the barrier stays


@T.prim_func
def through_a_pointer(A: T.Buffer((128,), "float32")):
    _bx = T.launch_thread("blockIdx.x", 1)
    tx = T.launch_thread("threadIdx.x", 128)
    S = T.alloc_buffer((128,), "float32", scope="shared.dyn")
    R = T.alloc_buffer((128,), "float32", scope="shared.dyn")
    S[tx] = A[tx]
    for r in range(4):
        T.tvm_storage_sync("shared.dyn")
        R[tx] = S[(tx + r) % 128]
        T.call_extern("void", "load_async", T.address_of(S[0]), A.data)  # writes S, say


def test_an_unrolled_loop_too():
    unrolled = transpose_loop.with_body(
        tvm_ffi.structural_map(
            transpose_loop.body,
            [(tirx.For, lambda f: tirx.For(f.loop_var, f.min, f.extent, tirx.ForKind.UNROLLED, f.body))],
        )
    )
    after = hoist_loop_barriers(unrolled).script()
    assert re.search(r'T.tvm_storage_sync\("shared.dyn".*\n\s*for r in T.unroll\(32\):\n\s*B_s\[', after)


def test_loops_carrying_a_tile_keep_their_barrier():
    assert hoist_loop_barriers(accumulate_in_place).same_as(accumulate_in_place)
    assert hoist_loop_barriers(through_a_pointer).same_as(through_a_pointer)


@TL.prim_func
def transpose(A: TL.Tensor((64, 64), "float16"), B: TL.Tensor((64, 64), "float16")):
    with TL.Kernel(1, threads=128):
        A_s = TL.alloc_shared((64, 64), "float16")
        B_s = TL.alloc_shared((64, 64), "float16")
        TL.copy(A, A_s)
        for i, j in TL.Parallel(64, 64):
            B_s[j, i] = A_s[i, j] * 2
        TL.copy(B_s, B)


def test_a_transpose_through_shared_memory_syncs_twice():
    src = tilelang.compile(transpose, target="sm_80").get_kernel_source()
    assert src.count("__syncthreads()") == 2
    loop = src[src.index("for (int r_1") :]
    assert "__syncthreads" not in loop[: loop.index("}")]

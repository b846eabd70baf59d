"""expose_to_merge / restore_after_merge: around TVM's shared-memory merge, a binding that reads
memory is a statement and a statement touching two tiles is a scope of its own. The merge then takes
a binding at the kernel's top that reads a T.alloc_var (it stopped with "Load memory in places other
than store"), and never gives a tile the bytes of another that the same statement reads."""

import re

from ir_testing import assert_ir_equal
from tvm import s_tir
from tvm.script import tirx as T

import tilelang
import tilelang.language as TL
from tilelang.transform.expose_to_merge import expose_to_merge, restore_after_merge


@T.prim_func
def flat_kernel(A: T.Buffer((4,), "int32"), B: T.Buffer((128,), "float32")):
    _bx = T.launch_thread("blockIdx.x", 1)
    tx = T.launch_thread("threadIdx.x", 128)
    n = T.alloc_buffer((1,), "int32", scope="local")
    S = T.alloc_buffer((128,), "float32", scope="shared.dyn")
    R = T.alloc_buffer((128,), "float32", scope="shared.dyn")
    n[0] = A[0]
    off: T.let[T.int32] = n[0] * 2  # a binding at the allocations' level reading n
    S[tx] = T.Cast("float32", off)
    R[tx] = S[127 - tx]  # S dies and R is born in this one statement
    B[tx] = R[tx]


def test_the_two_shapes_are_marked_and_put_back():
    exposed = expose_to_merge(flat_kernel).script()
    assert "T.tl_binding(off, n * 2)" in exposed  # (n, a one-element local array, prints as a scalar)
    assert re.search(r'with T.attr\("tl.merge_scope", "extern_scope", 0\):\s*\n\s*R_1\[tx\] = S\[127 - tx\]', exposed)
    assert exposed.count("extern_scope") == 1  # the statements touching one tile are left alone
    assert_ir_equal(restore_after_merge(expose_to_merge(flat_kernel)), flat_kernel)


def _merged(func):
    merge = s_tir.transform.MergeSharedMemoryAllocations()
    return merge(tilelang.tvm.IRModule({"main": func}))["main"]


def test_the_merge_takes_the_binding_and_keeps_the_two_tiles_apart():
    after = restore_after_merge(_merged(expose_to_merge(flat_kernel))).script()
    assert "off: T.let[T.int32] = n * 2" in after
    # S at byte 0, R after it: the statement reading S while writing R never writes what it reads.
    assert "R_1[tx + 128] = S[127 - tx]" in after


def test_kernels_without_either_shape_are_left_alone():
    @T.prim_func
    def plain(B: T.Buffer((128,), "float32")):
        _bx = T.launch_thread("blockIdx.x", 1)
        tx = T.launch_thread("threadIdx.x", 128)
        S = T.alloc_buffer((128,), "float32", scope="shared.dyn")
        S[tx] = T.float32(1)
        B[tx] = S[127 - tx]

    assert expose_to_merge(plain).same_as(plain)


@TL.prim_func
def group_offset_then_tiles(
    A: TL.Tensor((4,), "int32"), X: TL.Tensor((256,), "float32"), B: TL.Tensor((128,), "float32")
):
    with TL.Kernel(1, threads=128):
        S = TL.alloc_shared((128,), "float32")
        R = TL.alloc_shared((128,), "float32")
        n = TL.alloc_var("int32")
        n = 0
        for k in range(4):
            n = n + A[k]
        off = n * 2  # a binding at the kernel's top reading the T.alloc_var
        for i in TL.Parallel(128):
            S[i] = X[i + off]
        for i in TL.Parallel(128):
            R[i] = S[127 - i] + S[i]
        for i in TL.Parallel(128):
            B[i] = R[i]


def test_a_kernel_binding_an_alloc_var_compiles_with_its_tiles_apart():
    src = tilelang.compile(group_offset_then_tiles, target="sm_80").get_kernel_source()
    assert "int off = (n_ptr[0] * 2);" in src
    store = next(line for line in src.splitlines() if "[(127 - ((int)threadIdx.x))]" in line)
    assert store.strip().startswith("((float*)buf_dyn_shmem_ptr)[(((int)threadIdx.x) + 128)] =")


@TL.prim_func
def count_beside_a_tile(A: TL.Tensor((128,), "int32"), B: TL.Tensor((128,), "int32")):
    with TL.Kernel(1, threads=128):
        S = TL.alloc_shared((128,), "int32")
        n = TL.alloc_shared((1,), "int32")  # 32 bits: TVM's merge gave it no offset
        tx = TL.get_thread_binding()
        S[tx] = A[tx]
        if tx == 0:
            n[0] = A[0] % 8
        B[tx] = S[127 - tx] + n[0]


def test_a_tile_of_32_bits_is_merged_with_the_others():
    src = tilelang.compile(count_beside_a_tile, target="sm_80").get_kernel_source()
    # n at byte 0 (allocated 64 bits), S after it on its alignment.
    assert "((int*)buf_dyn_shmem_ptr)[0] = (A_ptr[0] & 7);" in src
    assert "((int*)buf_dyn_shmem_ptr)[(((int)threadIdx.x) + 16)] = A_ptr[((int)threadIdx.x)];" in src

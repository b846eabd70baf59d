"""expose_to_merge / restore_after_merge: around TVM's shared-memory merge, a binding that reads
memory is a statement, a statement touching two tiles is a scope of its own, and a pointer into a
tile (address_of) names the tile. The merge then takes a binding at the kernel's top that reads a
T.alloc_var (it stopped with "Load memory in places other than store"), never gives a tile the bytes
of another that the same statement reads, and keeps a tile written through a pointer (a TMA load)
apart from every tile used while it holds its values."""

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


@T.prim_func
def written_through_a_pointer(A: T.Buffer((64,), "float32"), B: T.Buffer((128,), "float32")):
    _bx = T.launch_thread("blockIdx.x", 1)
    tx = T.launch_thread("threadIdx.x", 128)
    S = T.alloc_buffer((64,), "float32", scope="shared.dyn")
    W = T.alloc_buffer((64,), "float32", scope="shared.dyn")
    if tx == 0:
        T.call_extern("void", "load_async", T.address_of(S[0]), A.data)  # as tl::tma_load names its destination
    for _ in range(2):
        W[tx % 64] = T.float32(2)
        B[tx] = W[63 - tx % 64]
    B[tx] = S[tx % 64]  # S's only plain access, after the loop using W


def test_a_pointer_into_a_tile_names_it_and_is_put_back():
    exposed = expose_to_merge(written_through_a_pointer).script()
    assert 'T.call_extern("void", "load_async", T.tl_exposed_address(T.address_of(S[0]), S), A.data)' in exposed
    assert_ir_equal(restore_after_merge(expose_to_merge(written_through_a_pointer)), written_through_a_pointer)


def test_a_tile_written_through_a_pointer_keeps_its_bytes_through_the_loop():
    # Without the pass the merge sees S born at its read after the loop and gives it W's bytes.
    assert "T.address_of(S[0])" in _merged(written_through_a_pointer).script()
    after = restore_after_merge(_merged(expose_to_merge(written_through_a_pointer))).script()
    # W in floats [0, 64), S in [64, 128): written before the loop and read after it, apart from W.
    assert "W[tx % 64] = T.float32(2.0)" in after
    assert 'T.call_extern("void", "load_async", T.address_of(S[64]), A.data)' in after
    assert "B[tx] = S[tx % 64 + 64]" in after
    assert "tl_exposed_address" not in after


@T.prim_func
def read_through_an_access_ptr(A: T.Buffer((64,), "float32"), B: T.Buffer((128,), "float32")):
    _bx = T.launch_thread("blockIdx.x", 1)
    tx = T.launch_thread("threadIdx.x", 128)
    S = T.alloc_buffer((64,), "float32", scope="shared.dyn")
    W = T.alloc_buffer((64,), "float32", scope="shared.dyn")
    S[tx % 64] = A[tx % 64]
    for _ in range(2):
        W[tx % 64] = T.float32(2)
        B[tx] = W[63 - tx % 64]
    T.call_extern("void", "store", T.tvm_access_ptr(T.type_annotation("float32"), S, 0, 64, 1))  # as a gemm's operand


def test_a_tile_read_through_an_access_ptr_is_left_to_the_merge():
    # tvm_access_ptr names S plainly: the merge counts it as it is and keeps S apart from W.
    assert expose_to_merge(read_through_an_access_ptr).same_as(read_through_an_access_ptr)
    after = _merged(read_through_an_access_ptr).script()
    assert "W[tx % 64] = T.float32(2.0)" in after
    assert 'T.tvm_access_ptr(T.type_annotation("float32"), S.data, 64, 64, 1)' in after


@T.prim_func
def pointer_bound_then_used(B: T.Buffer((128,), "float32")):
    _bx = T.launch_thread("blockIdx.x", 1)
    tx = T.launch_thread("threadIdx.x", 128)
    S = T.alloc_buffer((64,), "float32", scope="shared.dyn")
    W = T.alloc_buffer((64,), "float32", scope="shared.dyn")
    p = T.address_of(S[0])  # a pointer bound at the kernel's top
    W[tx % 64] = T.float32(1)
    B[tx] = W[63 - tx % 64]
    for _ in range(2):
        T.call_extern("void", "use", p)  # S used through p only


def test_a_use_of_a_bound_pointer_is_a_use_of_its_tile():
    exposed = expose_to_merge(pointer_bound_then_used).script()
    assert "T.tl_binding(p, T.tl_exposed_address(T.address_of(S[0]), S))" in exposed
    assert 'T.call_extern("void", "use", T.tl_exposed_address(p, S))' in exposed
    after = restore_after_merge(_merged(expose_to_merge(pointer_bound_then_used))).script()
    # (The merge alone stops: the binding reads S at the allocations' level and S gets no offset.)
    assert "= T.address_of(S[64])" in after and "W[tx % 64] = T.float32(1.0)" in after
    assert 'T.call_extern("void", "use", p)' in after
    assert_ir_equal(restore_after_merge(expose_to_merge(pointer_bound_then_used)), pointer_bound_then_used)


@TL.prim_func
def sink_after_loop(X: TL.Tensor((4, 1024), "float32"), Sk: TL.Tensor((64,), "float16"), Y: TL.Tensor((4,), "float32")):
    """The shape of the public DeepSeek-V4 sparse attention's sink: a tile loaded once by TMA, read
    after a loop whose reductions across warps use a shared workspace."""
    with TL.Kernel(1, threads=256):
        s = TL.alloc_shared((64,), "float16")
        a = TL.alloc_fragment((4, 1024), "float32")
        m = TL.alloc_fragment((4,), "float32")
        TL.copy(Sk, s)  # once per kernel: a TMA load on sm_90a
        TL.fill(m, 0)
        for _ in TL.serial(2):
            TL.copy(X, a)
            TL.reduce_max(a, m, dim=1, clear=False)  # across warps: a shared workspace
        for i in TL.Parallel(4):
            Y[i] = m[i] + s[i]


def _bytes(index: str, elem_bytes: int) -> set:
    """The bytes of the merged block that `((T*)buf_dyn_shmem_ptr)[index]` touches over 256 threads."""
    expr = index.replace("((int)threadIdx.x)", "tx").replace("/", "//")
    found = set()
    for tx in range(256):
        start = eval(expr, {"tx": tx}) * elem_bytes
        found.update(range(start, start + elem_bytes))
    return found


def test_the_sink_tile_and_the_reduce_workspace_do_not_share_bytes():
    src = tilelang.compile(sink_after_loop, target="sm_90a").get_kernel_source()
    dst = re.search(r"tl::tma_load\(.*\(\(half\*\)buf_dyn_shmem_ptr\)\[(\d+)\]", src)
    assert dst, "the sink tile is a TMA load's destination in the merged block"
    sink = set(range(int(dst.group(1)) * 2, int(dst.group(1)) * 2 + 64 * 2))
    read = re.search(r"Y_ptr\[(\w+)\] = .*\(\(half\*\)buf_dyn_shmem_ptr\)\[(.*?)\]\)\);", src)
    assert read and read.group(2) == (read.group(1) if dst.group(1) == "0" else f"({read.group(1)} + {dst.group(1)})")
    workspace = re.findall(r"\(\(float\*\)buf_dyn_shmem_ptr\)\[([^\]]+)\]", src)
    assert len(workspace) >= 8  # each reduce_max writes and reads it
    for index in workspace:
        assert not _bytes(index, 4) & sink, index

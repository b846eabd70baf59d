"""merge_shared_tiles: each kernel's dynamic shared tiles laid out in one block, tiles live at the
same statement never sharing a byte. Lifetimes see a binding at the kernel's top that reads memory, a
statement reading one tile while writing another, a pointer into a tile (address_of: how a TMA load
names its destination) and a pointer variable bound to one; a tile of 32 bits gets an offset like any
other; and a kernel whose freed small tile was reused by a larger one keeps its concurrently live
tiles apart (TVM's planner, which this pass replaces, put them at the same offset)."""

import re

from tvm import tirx
from tvm.script import tirx as T

import tilelang
import tilelang.language as TL
from tilelang.transform.common import kernels
from tilelang.transform.merge_shared_tiles import merge_shared_tiles, plan


def _placements(func, reuse=True) -> dict:
    """name -> Placement of each dynamic shared tile of the function's one kernel."""
    (kernel,) = kernels(func.body)
    allocs = [a.buffer for a in tilelang.utils.ir.collect(kernel, tirx.AllocBuffer)]
    tiles = [b for b in allocs if b.scope() == "shared.dyn"]
    return {t.name: p for t, p in plan(kernel, tiles, reuse).items()}


def _apart(placements, a: str, b: str) -> bool:
    pa, pb = placements[a], placements[b]
    return pa.offset + pa.size <= pb.offset or pb.offset + pb.size <= pa.offset


def _check_invariant(placements) -> None:
    """Two tiles live at one statement share no byte."""
    for a, pa in placements.items():
        for b, pb in placements.items():
            if a < b and not (pa.last < pb.first or pb.last < pa.first):
                assert _apart(placements, a, b), (a, pa, b, pb)


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


def test_a_binding_at_the_top_and_a_statement_reading_one_tile_while_writing_another():
    placements = _placements(flat_kernel)
    # S dies and R is born at the statement R[tx] = S[127 - tx]: both live there, never the same bytes.
    assert placements["S"].last == placements["R"].first and _apart(placements, "S", "R")
    after = merge_shared_tiles(flat_kernel).script()
    assert "off: T.let[T.int32] = n * 2" in after  # (n, a one-element local array, prints as a scalar)
    assert 'buf_dyn_shmem = T.alloc_buffer((1024,), "uint8", scope="shared.dyn")' in after
    assert re.search(r"R(_1)?\[tx \+ 128\] = S\[127 - tx\]", after)


def test_a_kernel_with_one_tile_is_left_alone():
    @T.prim_func
    def plain(B: T.Buffer((128,), "float32")):
        _bx = T.launch_thread("blockIdx.x", 1)
        tx = T.launch_thread("threadIdx.x", 128)
        S = T.alloc_buffer((128,), "float32", scope="shared.dyn")
        S[tx] = T.float32(1)
        B[tx] = S[127 - tx]

    assert merge_shared_tiles(plain).same_as(plain)


@T.prim_func
def one_after_another(B: T.Buffer((128,), "float32")):
    _bx = T.launch_thread("blockIdx.x", 1)
    tx = T.launch_thread("threadIdx.x", 128)
    S = T.alloc_buffer((128,), "float32", scope="shared.dyn")
    R = T.alloc_buffer((256,), "float32", scope="shared.dyn")
    S[tx] = T.float32(1)
    B[tx] = S[127 - tx]
    R[tx * 2] = T.float32(2)
    B[tx] = R[255 - tx * 2]


def test_tiles_live_one_after_the_other_share_bytes_unless_reuse_is_off():
    placements = _placements(one_after_another)
    assert placements["R"].offset == placements["S"].offset == 0
    after = merge_shared_tiles(one_after_another).script()
    assert 'T.alloc_buffer((1024,), "uint8"' in after
    # Every thread is done reading S before any writes R over it.
    assert re.search(r'B\[tx\] = S\[127 - tx\]\n\s*T.tvm_storage_sync\("shared.dyn"\)\n\s*R(_1)?\[tx \* 2\]', after)
    assert _apart(_placements(one_after_another, reuse=False), "S", "R")
    assert 'T.alloc_buffer((1536,), "uint8"' in merge_shared_tiles(one_after_another, reuse=False).script()


@T.prim_func
def one_after_another_synced(B: T.Buffer((128,), "float32")):
    _bx = T.launch_thread("blockIdx.x", 1)
    tx = T.launch_thread("threadIdx.x", 128)
    S = T.alloc_buffer((128,), "float32", scope="shared.dyn")
    R = T.alloc_buffer((256,), "float32", scope="shared.dyn")
    S[tx] = T.float32(1)
    B[tx] = S[127 - tx]
    T.tvm_storage_sync("shared.dyn")
    B[tx] = B[tx] + T.float32(1)
    R[tx * 2] = T.float32(2)
    B[tx] = R[255 - tx * 2]


def test_a_barrier_already_between_two_tiles_sharing_bytes_serves():
    after = merge_shared_tiles(one_after_another_synced).script()
    assert after.count("tvm_storage_sync") == 1


@T.prim_func
def vector_tile(A: T.Buffer((1024,), "float32")):
    _bx = T.launch_thread("blockIdx.x", 1)
    tx = T.launch_thread("threadIdx.x", 256)
    S = T.alloc_buffer((1024,), "float32", scope="shared.dyn")
    V = T.alloc_buffer((256,), "float32x4", scope="shared.dyn")  # as the vectorizer leaves a tile
    S[tx] = A[tx]
    V[tx] = T.Broadcast(S[255 - tx], 4)  # S and V both live here
    A[tx * 4 : tx * 4 + 4] = V[tx]


def test_a_tile_of_vectors_is_counted_in_its_lanes():
    # 256 float32x4 = 4 KiB, beside S's 4 KiB; its offset in whole vectors (the bug: 4-byte elements).
    placements = _placements(vector_tile)
    assert placements["V"].size == 4096 and _apart(placements, "S", "V")
    after = merge_shared_tiles(vector_tile).script()
    assert 'T.alloc_buffer((8192,), "uint8"' in after
    assert re.search(r"V(_1)?\[tx \+ 256\]", after)  # V after S's 4 KiB: 256 vectors in


@T.prim_func
def reused_then_beside(A: T.Buffer((64,), "float32"), B: T.Buffer((128,), "float32")):
    """TVM's planner put X and Y at the same offset: F freed after one statement, X then took F's bytes
    as a second layer of F's entry, and when X's entry and Y's were merged for Z, the layers were laid
    out afresh from the entry's start."""
    _bx = T.launch_thread("blockIdx.x", 1)
    tx = T.launch_thread("threadIdx.x", 128)
    F = T.alloc_buffer((16,), "float32", scope="shared.dyn")
    X = T.alloc_buffer((64,), "float32", scope="shared.dyn")
    Y = T.alloc_buffer((64,), "float32", scope="shared.dyn")
    Z = T.alloc_buffer((256,), "float32", scope="shared.dyn")
    F[tx % 16] = T.float32(1)
    if tx < 64:
        X[tx] = A[tx]
    if tx < 64:
        Y[tx] = A[63 - tx]
    for k in range(4):
        B[tx] = X[(tx + k) % 64] + Y[(tx + k) % 64]
    Z[tx] = B[tx]
    B[tx] = Z[255 - tx]


def test_tiles_live_together_never_share_bytes():
    placements = _placements(reused_then_beside)
    _check_invariant(placements)
    assert _apart(placements, "X", "Y")
    assert placements["Z"].offset == 0  # all the others are dead by then: Z takes their bytes


def test_a_block_sparse_gemm_keeps_its_tiles_apart():
    # The kernel whose A and B tiles TVM's planner laid over each other (a flag tile freed first).
    from test_inject_cp_async_pipelines import block_sparse_gemm

    src = tilelang.compile(block_sparse_gemm(2, guard_reads_shared=False), target="sm_90a").get_kernel_source()
    ptrs = re.search(
        r"wgmma_ss<[^>]*>\(\(&\(\(\(half\*\)buf_dyn_shmem_ptr\)\[(.*?)\]\)\), "
        r"\(&\(\(\(half\*\)buf_dyn_shmem_ptr\)\[(.*?)\]\)\)",
        src,
    )
    assert ptrs and ptrs.group(1) != ptrs.group(2), ptrs and ptrs.groups()


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
    # S (512 bytes) at byte 0, n after it.
    assert "((int*)buf_dyn_shmem_ptr)[128] = (A_ptr[0] & 7);" in src
    assert "((int*)buf_dyn_shmem_ptr)[((int)threadIdx.x)] = A_ptr[((int)threadIdx.x)];" in src


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


def test_a_tile_written_through_a_pointer_keeps_its_bytes_through_the_loop():
    placements = _placements(written_through_a_pointer)
    assert placements["S"].first == 0 and _apart(placements, "S", "W")
    after = merge_shared_tiles(written_through_a_pointer).script()
    assert 'T.call_extern("void", "load_async", T.address_of(S[0]), A.data)' in after
    assert "W[tx % 64 + 64] = T.float32(2.0)" in after and "B[tx] = S[tx % 64]" in after


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


def test_a_tile_read_through_an_access_ptr_is_offset_there():
    placements = _placements(read_through_an_access_ptr)
    assert _apart(placements, "S", "W") and placements["W"].offset == 256
    after = merge_shared_tiles(read_through_an_access_ptr).script()
    assert "W[tx % 64 + 64] = T.float32(2.0)" in after
    assert 'T.tvm_access_ptr(T.type_annotation("float32"), S, 0, 64, 1)' in after


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
    placements = _placements(pointer_bound_then_used)
    assert placements["S"].last == 3 and _apart(placements, "S", "W")  # (the loop, 4th statement)
    after = merge_shared_tiles(pointer_bound_then_used).script()
    assert "= T.address_of(S[0])" in after and "W[tx % 64 + 64] = T.float32(1.0)" in after
    assert 'T.call_extern("void", "use", p)' in after


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
    # Y = m + s reads the sink (4 halves, one vector) where the TMA load wrote it.
    read = re.search(r"half4 \w+ = \*\(half4\*\)\(\(\(half\*\)buf_dyn_shmem_ptr\) \+ (\d+)\);", src)
    assert read and read.group(1) == dst.group(1), src
    workspace = re.findall(r"\(\(float\*\)buf_dyn_shmem_ptr\)\[([^\]]+)\]", src)
    assert len(workspace) >= 8  # each reduce_max writes and reads it
    for index in workspace:
        assert not _bytes(index, 4) & sink, index


def test_the_layout_is_logged_at_debug(caplog):
    with caplog.at_level("DEBUG", logger="tilelang"):
        merge_shared_tiles(one_after_another)
    assert "shared block of 1024 bytes: R [0, 1024) live 2..3, S [0, 512) live 0..1" in caplog.text
    assert "reuse barriers before statements [2]" in caplog.text


@T.prim_func
def two_roles(A: T.Buffer((256,), "float32")):
    _bx = T.launch_thread("blockIdx.x", 1)
    tx = T.launch_thread("threadIdx.x", 256)
    P = T.alloc_buffer((128,), "float32", scope="shared.dyn")
    Q = T.alloc_buffer((128,), "float32", scope="shared.dyn")
    with T.attr(tx, "tl.ws_producer_branch", 128):
        P[tx - 128] = A[tx]
        A[tx] = P[255 - tx]
    with T.attr(tx, "tl.ws_consumer_branch", 128):
        Q[tx] = A[tx]
        A[tx] = Q[127 - tx]


def test_the_two_sides_of_a_warp_specialized_kernel_run_at_once():
    # In sequence here, one branch once consumer_barriers has run: a tile of each side is live together.
    placements = _placements(two_roles)
    assert placements["P"].first == placements["Q"].first and _apart(placements, "P", "Q")
    assert "tvm_storage_sync" not in merge_shared_tiles(two_roles).script()

"""Branches of the first n threads (`if tx < n:` around tile ops): their fragments and gemms are laid
out over those n threads, barriers go around the branch (`expose_thread_branches`) and inside it
over its threads only (`restore_thread_branches`), and a pipelined loop's gemms inside it run
asynchronously up to the branch's end (`wgmma_waits`)."""

import re

import pytest
import torch
import tvm_ffi
from tvm import ir, tirx

import tilelang
import tilelang.language as T
from tilelang import intrinsics
from tilelang.codegen import cuda
from tilelang.errors import UserError
from tilelang.testing import assert_points_at
from tilelang.transform.sync_thread_branches import (
    THREAD_BRANCH,
    expose_thread_branches,
    mark,
    restore_thread_branches,
)

M = N = 64


def row_max(threads=256, first=128):
    """The first `first` threads compute S = A·Aᵀ and its row maxes; every thread writes them out."""

    @T.prim_func
    def main(A: T.Tensor((M, N), "float16"), B: T.Tensor((M, N), "float32")):
        with T.Kernel(1, threads=threads):
            A_s = T.alloc_shared((M, N), "float16")
            m_s = T.alloc_shared((M,), "float32")
            S = T.alloc_fragment((M, N), "float32")
            m = T.alloc_fragment((M,), "float32")
            T.copy(A, A_s)
            tx = T.get_thread_binding()
            if tx < first:
                T.gemm(A_s, A_s, S, transpose_B=True, clear_accum=True)
                T.reduce_max(S, m, dim=1)
                T.copy(m, m_s)
            for i, j in T.Parallel(M, N):
                B[i, j] = m_s[i]

    return main


def pipelined(K=256):
    """Warp-specialized on sm_90a: the branch's gemm reads the pipelined tile."""

    @T.prim_func
    def main(A: T.Tensor((M, K), "float16"), B: T.Tensor((K, N), "float16"), C: T.Tensor((M, N), "float32")):
        with T.Kernel(1, threads=256):
            A_s = T.alloc_shared((M, 64), "float16")
            B_s = T.alloc_shared((64, N), "float16")
            S = T.alloc_fragment((M, N), "float32")
            acc = T.alloc_fragment((M, N), "float32")
            S_s = T.alloc_shared((M, N), "float32")
            tx = T.get_thread_binding()
            T.clear(acc)
            for k in T.Pipelined(K // 64, num_stages=2):
                T.copy(A[0, k * 64], A_s)
                T.copy(B[k * 64, 0], B_s)
                if tx < 128:
                    T.gemm(A_s, B_s, S, clear_accum=True)
                    T.gemm(A_s, B_s, S)
                    T.copy(S, S_s)
                for i, j in T.Parallel(M, N):
                    acc[i, j] += S_s[i, j]
            T.copy(acc, C)

    return main


def _barriers(src):
    return re.findall(r"__syncthreads\(\)|tl::named_barrier_sync<\d+, \d+>\(\)", src)


@pytest.mark.parametrize("target", ["sm_80", "sm_90a"])
def test_branch_code_and_barriers(target):
    kernel = tilelang.compile(row_max(), out_idx=[1], target=target)
    src = kernel.get_kernel_source()
    # S (64x64 floats) spread over the branch's 128 threads: 32 registers each, not 16.
    assert re.search(r"float S_local_ptr\[32\]", src)
    if target == "sm_90a":
        assert "tl::wgmma_ss<64, 64, 64, 1, 1," in src  # one warpgroup's gemm
    branch = src.index("if (((int)threadIdx.x) < 128) {")
    before, after = src[:branch], src[branch:]
    # A block barrier right before the branch and right after it; none inside needs all threads.
    assert before.rstrip().endswith("__syncthreads();")
    inside = after[: after.index("__syncthreads();")]
    assert "__syncthreads" not in inside
    assert all(b.endswith(", 128>()") for b in _barriers(inside))
    cuda.compile_object(src, kernel.target)


def test_branch_over_all_threads_is_dropped():
    src = tilelang.compile(row_max(threads=128), out_idx=[1], target="sm_90a").get_kernel_source()
    assert "threadIdx.x) < 128" not in src
    assert re.search(r"float S_local_ptr\[32\]", src)


def test_pipelined_branch_gemm_runs_async_inside_the_branch():
    kernel = tilelang.compile(pipelined(), out_idx=[2], target="sm_90a")
    src = kernel.get_kernel_source()
    loop = src[src.index("for (int i = ") :]
    branch = loop[loop.index("if (((int)threadIdx.x) < 128) {") :]
    branch = branch[: branch.index("\n      }\n")]
    # The first gemm is issued without a wait; the second waits for both before S is read, inside
    # the branch (no group stays in flight past it: the other warpgroup never issued one).
    gemms = re.findall(r"tl::wgmma_ss<64, 64, 64, 1, 1,[^>]*, (-?\d+), \w+>", branch)
    assert gemms == ["-1", "0"]
    cuda.compile_object(src, kernel.target)


def test_fragment_shared_with_the_other_threads_is_an_error():
    @T.prim_func
    def main(A: T.Tensor((M, N), "float16"), B: T.Tensor((M, N), "float32")):
        with T.Kernel(1, threads=256):
            A_s = T.alloc_shared((M, N), "float16")
            S = T.alloc_fragment((M, N), "float32")
            m = T.alloc_fragment((M,), "float32")
            T.copy(A, A_s)
            if T.get_thread_binding() < 128:
                T.gemm(A_s, A_s, S, transpose_B=True, clear_accum=True)
                T.reduce_max(S, m, dim=1)
            for i, j in T.Parallel(M, N):
                B[i, j] = m[i]

    with pytest.raises(UserError, match=r"spans 128 threads, the second 256.*if tx < n") as err:
        tilelang.compile(main, out_idx=[1], target="sm_90a")
    assert_points_at(err, "T.reduce_max(S, m, dim=1)")


def _kernel(body, threads=256):
    tx = tirx.Var("tx", "int32")
    iv = tirx.IterVar(ir.Range(0, threads), tx, tirx.IterVar.ThreadIndex, "threadIdx.x")
    return tx, tirx.PrimFunc([], tirx.AttrStmt(iv, "thread_extent", threads, body(tx)))


def _evaluates(stmt):
    out = []
    tvm_ffi.structural_walk(stmt, [(tirx.Evaluate, out.append)])
    return out


def _names(stmt):
    out = []

    def on_eval(s):
        v = s.value
        if isinstance(v, ir.Call) and isinstance(v.op, ir.Op):
            out.append(v.op.name if v.op.name != "tirx.call_extern" else str(v.args[0].value))

    tvm_ffi.structural_walk(stmt, [(tirx.Evaluate, on_eval)])
    return out


def _block_sync():
    return tirx.Evaluate(tirx.call_intrin("int32", "tirx.tvm_storage_sync", ir.StringImm("shared.dyn")))


def _add_sync_inside(stmt):
    """What TVM's barrier insertion may do: a block barrier at the start of each marked side."""
    return tvm_ffi.structural_map(
        stmt,
        [
            (
                tirx.AttrStmt,
                lambda a: (
                    tirx.AttrStmt(a.node, a.attr_key, a.value, tirx.SeqStmt([_block_sync(), a.body]))
                    if a.attr_key == THREAD_BRANCH
                    else a
                ),
            )
        ],
    )


def test_expose_then_restore_if_else():
    buf = tirx.decl_buffer((256,), "float32", "s", scope="shared.dyn")

    def body(tx):
        then = tirx.BufferStore(buf, tirx.const(1.0, "float32"), [tx])
        other = tirx.BufferStore(buf, tirx.const(2.0, "float32"), [tx])
        return tirx.IfThenElse(tx < 128, mark((0, 128), then), mark((128, 256), other))

    tx, func = _kernel(body)
    exposed = expose_thread_branches(func)
    top = exposed.body.body
    # No condition left for TVM's barrier insertion; block barriers around the branch.
    assert isinstance(top, tirx.SeqStmt) and len(top) == 3
    assert _names(top[0]) == _names(top[2]) == ["tirx.tvm_storage_sync"]
    assert not isinstance(top[1].body, tirx.IfThenElse)
    # A barrier inside each side (and one between them, which goes) ...
    hidden = top[1]
    sides = _add_sync_inside(hidden.body)
    hidden = tirx.AttrStmt(
        hidden.node, hidden.attr_key, hidden.value, tirx.SeqStmt([sides[0], _block_sync(), sides[1]])
    )
    func = exposed.with_body(
        tirx.AttrStmt(exposed.body.node, "thread_extent", 256, tirx.SeqStmt([top[0], hidden, top[2]]))
    )
    branch = restore_thread_branches(func).body.body[1]
    # ... become named barriers over each side's threads, with an id per range.
    assert isinstance(branch, tirx.IfThenElse) and branch.condition.a.same_as(tx)
    (then_bar,), (else_bar,) = _evaluates(branch.then_case), _evaluates(branch.else_case)
    assert intrinsics.NAMED_BARRIER_SYNC.template(then_bar) == {"id": 4, "threads": 128}
    assert intrinsics.NAMED_BARRIER_SYNC.template(else_bar) == {"id": 5, "threads": 128}


def test_ids_the_kernel_names_are_not_reused():
    """A user's T.sync_threads(4, 128) keeps id 4: the branch barriers take the next free ids."""
    buf = tirx.decl_buffer((256,), "float32", "s", scope="shared.dyn")
    users = intrinsics.NAMED_BARRIER_SYNC.stmt({"id": 4, "threads": 128})

    def body(tx):
        then = tirx.SeqStmt([tirx.BufferStore(buf, tirx.const(1.0, "float32"), [tx]), _block_sync()])
        return tirx.SeqStmt([users, tirx.IfThenElse(tx < 128, mark((0, 128), then), None)])

    _, func = _kernel(body)
    branch = restore_thread_branches(func).body.body[1]
    (bar,) = [s for s in _evaluates(branch.then_case) if intrinsics.NAMED_BARRIER_SYNC.matches(s)]
    assert intrinsics.NAMED_BARRIER_SYNC.template(bar) == {"id": 5, "threads": 128}


def test_branch_without_shared_memory_gets_no_barriers():
    buf = tirx.decl_buffer((4,), "float32", "r", scope="local")

    def body(tx):
        store = tirx.BufferStore(buf, tirx.const(1.0, "float32"), [0])
        return tirx.IfThenElse(tx < 128, mark((0, 128), store), None)

    _, func = _kernel(body)
    out = expose_thread_branches(func).body.body
    assert isinstance(out, tirx.IfThenElse) and isinstance(out.then_case, tirx.BufferStore)


def two_gemms(threads=256, split=128):
    """Warpgroup 0 writes row maxes of A·Aᵀ, the others row sums of the same product."""

    @T.prim_func
    def main(A: T.Tensor((M, N), "float16"), B: T.Tensor((M, 2), "float32")):
        with T.Kernel(1, threads=threads):
            A_s = T.alloc_shared((M, N), "float16")
            S = T.alloc_fragment((M, N), "float32")
            S2 = T.alloc_fragment((M, N), "float32")
            m = T.alloc_fragment((M,), "float32")
            t = T.alloc_fragment((M,), "float32")
            T.copy(A, A_s)
            if T.get_thread_binding() < split:
                T.gemm(A_s, A_s, S, transpose_B=True, clear_accum=True)
                T.reduce_max(S, m, dim=1)
                T.copy(m, B[:, 0])
            else:
                T.gemm(A_s, A_s, S2, transpose_B=True, clear_accum=True)
                T.reduce_sum(S2, t, dim=1)
                T.copy(t, B[:, 1])

    return main


@pytest.mark.parametrize("target", ["sm_80", "sm_90a"])
def test_else_side_counts_its_threads_from_its_first(target):
    kernel = tilelang.compile(two_gemms(), out_idx=[1], target=target)
    src = kernel.get_kernel_source()
    assert "} else {" in src
    if target == "sm_90a":  # the else side's gemm: warpgroup 1 is its warpgroup 0
        assert re.search(r"tl::wgmma_ss<64, 64, 64, 1, 1,[^;]*, \(warpgroup - 1\)\);", src)
    cuda.compile_object(src, kernel.target)


def test_gemm_branch_off_a_warpgroup_is_an_error():
    @T.prim_func
    def main(A: T.Tensor((M, N), "float16"), B: T.Tensor((M, N), "float32")):
        with T.Kernel(1, threads=192):
            A_s = T.alloc_shared((M, N), "float16")
            S = T.alloc_fragment((M, N), "float32")
            T.copy(A, A_s)
            if T.get_thread_binding() >= 64:  # threads [64, 192): 128 of them, off a warpgroup
                T.gemm(A_s, A_s, S, transpose_B=True, clear_accum=True)
                T.copy(S, B)

    with pytest.raises(UserError, match="starts at thread 64, not a multiple of 128") as err:
        tilelang.compile(main, out_idx=[1], target="sm_90a")
    assert_points_at(err, "T.gemm(A_s, A_s, S, transpose_B=True, clear_accum=True)")


@pytest.mark.gpu
def test_two_sides_on_gpu():
    kernel = tilelang.compile(two_gemms(), out_idx=[1])
    a = torch.randn(M, N, device="cuda", dtype=torch.float16)
    s = a.float() @ a.float().T
    ref = torch.stack([s.max(dim=1).values, s.sum(dim=1)], dim=1)
    torch.testing.assert_close(kernel(a), ref, rtol=1e-3, atol=1e-2)


@pytest.mark.gpu
@pytest.mark.parametrize("target_threads", [(256, 128), (384, 256)])
def test_branch_on_gpu(target_threads):
    threads, first = target_threads
    kernel = tilelang.compile(row_max(threads, first), out_idx=[1])
    a = torch.randn(M, N, device="cuda", dtype=torch.float16)
    s = a.float() @ a.float().T
    ref = s.max(dim=1).values[:, None].expand(M, N)
    torch.testing.assert_close(kernel(a), ref, rtol=1e-3, atol=1e-3)


def nested(threads=256):
    """Threads [0, 64) of the first warpgroup's branch double A through a fragment."""

    @T.prim_func
    def main(A: T.Tensor((M, N), "float16"), B: T.Tensor((M, N), "float32")):
        with T.Kernel(1, threads=threads):
            A_s = T.alloc_shared((M, N), "float16")
            S = T.alloc_fragment((M, N), "float32")
            tx = T.get_thread_binding()
            T.copy(A, A_s)
            if tx < 128:
                if tx < 64:
                    for i, j in T.Parallel(M, N):
                        S[i, j] = A_s[i, j] * 2.0
                    T.copy(S, B)

    return main


@pytest.mark.gpu
def test_nested_branch_on_gpu():
    kernel = tilelang.compile(nested(), out_idx=[1])
    a = torch.randn(M, N, device="cuda", dtype=torch.float16)
    torch.testing.assert_close(kernel(a), a.float() * 2)


def three_roles():
    """Warpgroup 0: row maxes of A·Aᵀ; warpgroup 1: its row sums; warpgroup 2: row sums of A."""

    @T.prim_func
    def main(A: T.Tensor((M, N), "float16"), B: T.Tensor((M, 3), "float32")):
        with T.Kernel(1, threads=384):
            A_s = T.alloc_shared((M, N), "float16")
            S = T.alloc_fragment((M, N), "float32")
            S2 = T.alloc_fragment((M, N), "float32")
            F = T.alloc_fragment((M, N), "float32")
            m = T.alloc_fragment((M,), "float32")
            t = T.alloc_fragment((M,), "float32")
            u = T.alloc_fragment((M,), "float32")
            T.copy(A, A_s)
            tx = T.get_thread_binding()
            if tx < 128:
                T.gemm(A_s, A_s, S, transpose_B=True, clear_accum=True)
                T.reduce_max(S, m, dim=1)
                T.copy(m, B[:, 0])
            elif tx >= 128 and tx < 256:
                T.gemm(A_s, A_s, S2, transpose_B=True, clear_accum=True)
                T.reduce_sum(S2, t, dim=1)
                T.copy(t, B[:, 1])
            else:
                for i, j in T.Parallel(M, N):
                    F[i, j] = A_s[i, j]
                T.reduce_sum(F, u, dim=1)
                T.copy(u, B[:, 2])

    return main


@pytest.mark.parametrize("target", ["sm_80", "sm_90a"])
def test_elif_chain_of_warpgroups(target):
    kernel = tilelang.compile(three_roles(), out_idx=[1], target=target)
    src = kernel.get_kernel_source()
    if target == "sm_90a":
        assert "(warpgroup - 1))" in src  # the middle side's gemm
    cuda.compile_object(src, kernel.target)


def test_else_of_a_middle_range_is_an_error():
    @T.prim_func
    def main(A: T.Tensor((M, N), "float32"), B: T.Tensor((M, N), "float32")):
        with T.Kernel(1, threads=384):
            F = T.alloc_fragment((M, N), "float32")
            tx = T.get_thread_binding()
            if tx >= 128 and tx < 256:
                T.copy(A, B)
            else:
                T.copy(A, F)
                T.copy(F, B)

    with pytest.raises(UserError, match="both sides of") as err:
        tilelang.compile(main, out_idx=[1], target="sm_90a")
    assert_points_at(err, "if tx >= 128 and tx < 256:")


@pytest.mark.gpu
def test_three_roles_on_gpu():
    kernel = tilelang.compile(three_roles(), out_idx=[1])
    a = torch.randn(M, N, device="cuda", dtype=torch.float16)
    s = a.float() @ a.float().T
    ref = torch.stack([s.max(dim=1).values, s.sum(dim=1), a.float().sum(dim=1)], dim=1)
    torch.testing.assert_close(kernel(a), ref, rtol=1e-3, atol=1e-2)


def tiles_in_turn(tiles=5, blocks=2):
    """A persistent loop: each block walks tiles bx, bx + blocks, ...; a tile goes through shared
    memory transposed, so threads read what others wrote: barriers inside `if tile < tiles:`."""

    @T.prim_func
    def main(A: T.Tensor((tiles * 64, 64), "float32"), B: T.Tensor((tiles * 64, 64), "float32")):
        with T.Kernel(blocks, threads=128) as bx:
            S = T.alloc_shared((64, 64), "float32")
            for t in T.serial(T.ceildiv(tiles, blocks)):
                tile = t * blocks + bx
                if tile < tiles:
                    T.copy(A[tile * 64 : (tile + 1) * 64, :], S)
                    for i, j in T.Parallel(64, 64):
                        B[tile * 64 + i, j] = S[j, i]

    return main


@pytest.mark.parametrize("target", ["sm_80", "sm_90a"])
def test_barriers_inside_a_block_uniform_condition(target):
    # TVM places barriers only inside conditions marked thread-invariant; block indices, loop
    # counters and scalars are the same on every thread, so this one is marked (and unmarked after).
    src = tilelang.compile(tiles_in_turn(), out_idx=[1], target=target).get_kernel_source()
    loop = src[src.index("for (int t = 0; t < 3; ++t) {") :]
    head, inside = loop.split("if (((t * 2) + ((int)blockIdx.x)) < 5) {")
    assert len(_barriers(inside)) == 1  # between the stores to S and the transposed reads
    assert len(_barriers(head)) == 1  # the last tile's reads before this tile's stores
    assert "thread_invariant" not in src
    cuda.compile_object(src, tilelang.utils.target.determine_target(target))


def test_a_condition_reading_memory_at_thread_indices_is_not_block_uniform():
    # (A read-only tensor at block-uniform indices is uniform: test_block_uniform_conditions.py.)
    @T.prim_func
    def main(A: T.Tensor((64, 64), "float32"), B: T.Tensor((64, 64), "float32"), n: T.Tensor((128,), "int32")):
        with T.Kernel(1, threads=128):
            S = T.alloc_shared((64, 64), "float32")
            tx = T.get_thread_binding()
            if n[tx] > 0:  # each thread loads its own n[tx]
                T.copy(A, S)
                for i, j in T.Parallel(64, 64):
                    B[i, j] = S[j, i]

    message = r"(?s)inside an `if` whose condition may differ between the threads.*\n\d+ \|\s*if n\[tx\] > 0:"
    with pytest.raises(UserError, match=message) as err:
        tilelang.compile(main, out_idx=[1], target="sm_80")
    assert_points_at(err, "if n[tx] > 0:  # each thread loads its own n[tx]")


@pytest.mark.gpu
def test_block_uniform_condition_on_gpu():
    kernel = tilelang.compile(tiles_in_turn(), out_idx=[1])
    a = torch.randn(5 * 64, 64, device="cuda")
    torch.testing.assert_close(kernel(a), a.view(5, 64, 64).transpose(1, 2).reshape(5 * 64, 64))


NO_STORAGE_SYNC = {"tl.disable_thread_storage_sync": True}


def prefix_sums(threads=256, width=128):
    """Inclusive prefix sums of A (width values, none of them -1000) by the first `width` threads,
    doubling the offset each step, synchronized only by the kernel's own barriers (named ones inside
    the branch, as the public top-k selector does); every thread then reads a sum another thread
    wrote. The steps run under a condition that reads A at the thread's index (as the selector's
    conditions read its input): the compiler cannot know that every thread takes it."""

    @T.prim_func
    def main(A: T.Tensor((width,), "int32"), B: T.Tensor((threads,), "int32")):
        with T.Kernel(1, threads=threads):
            tx = T.get_thread_binding()
            h = T.alloc_shared((width,), "int32")
            v = T.alloc_var("int32")
            if tx < width:
                if A[tx] != -1000:
                    h[tx] = A[tx]
                    for i in T.serial(7):
                        T.sync_threads(3, width)
                        if tx >= (1 << i):
                            v = h[tx] + h[tx - (1 << i)]
                        T.sync_threads(3, width)
                        if tx >= (1 << i):
                            h[tx] = v
            T.sync_threads()
            B[tx] = h[width - 1 - tx % width]

    return main


def test_without_storage_sync_only_the_kernels_barriers_remain():
    # Barrier insertion sees h written and read by other threads inside `if tx < 128` and refuses.
    with pytest.raises(UserError, match="inside an `if` whose condition may differ between the threads") as err:
        tilelang.compile(prefix_sums(), out_idx=[1], target="sm_90a")
    assert_points_at(err, "if A[tx] != -1000:")
    # With tl.disable_thread_storage_sync no barrier is inserted, as in TileLang: the kernel's own
    # two named barriers (in the loop) and one block barrier, in its order.
    for target in ("sm_80", "sm_90a"):
        kernel = tilelang.compile(prefix_sums(), out_idx=[1], target=target, pass_configs=NO_STORAGE_SYNC)
        src = kernel.get_kernel_source()
        body = src[src.index("__global__") :]
        assert _barriers(body) == ["tl::named_barrier_sync<3, 128>()"] * 2 + ["__syncthreads()"]
        cuda.compile_object(src, kernel.target)


def test_without_storage_sync_a_needed_barrier_is_not_inserted():
    @T.prim_func
    def main(A: T.Tensor((128,), "float32"), B: T.Tensor((128,), "float32")):
        with T.Kernel(1, threads=128):
            tx = T.get_thread_binding()
            S = T.alloc_shared((128,), "float32")
            S[tx] = A[tx]
            B[tx] = S[127 - tx]

    assert _barriers(tilelang.compile(main, target="sm_80").get_kernel_source()) == ["__syncthreads()"]
    src = tilelang.compile(main, target="sm_80", pass_configs=NO_STORAGE_SYNC).get_kernel_source()
    assert _barriers(src) == []


@pytest.mark.gpu
def test_prefix_sums_without_storage_sync_on_gpu():
    kernel = tilelang.compile(prefix_sums(), out_idx=[1], pass_configs=NO_STORAGE_SYNC)
    a = torch.randint(-100, 100, (128,), device="cuda", dtype=torch.int32)
    sums = torch.cumsum(a, 0).to(torch.int32)
    expect = sums.flip(0).repeat(2)
    torch.testing.assert_close(kernel(a), expect)


def fewer_items_than_threads(n=64, threads=128):
    """T.Parallel loops over 64 items on 128 threads (each under `if tx < 64`); the second loop's second
    statement reads an element another thread wrote in the first loop."""

    @T.prim_func
    def main(X: T.Tensor([n], "float32"), Out: T.Tensor([n], "float32")):
        with T.Kernel(1, threads=threads):
            a = T.alloc_shared([n], "float32")
            b = T.alloc_shared([n], "float32")
            c = T.alloc_shared([n], "float32")
            for i in T.Parallel(n):
                a[i] = X[i] * 2
            for i in T.Parallel(n):
                c[i] = a[i] * 3  # its own element
                b[i] = a[n - 1] - a[i]  # another thread's: the barrier goes before this statement
            for i in T.Parallel(n):
                Out[i] = b[i] + c[i]

    return main


@pytest.mark.parametrize("target", ["sm_80", "sm_90a"])
def test_a_barrier_between_statements_of_a_thread_guard_splits_the_guard(target):
    # Before: refused ("inside an `if` whose condition may differ"), the guard being the loop's own.
    src = tilelang.compile(fewer_items_than_threads(), out_idx=[-1], target=target).get_kernel_source()
    body = src[src.index("main_kernel(float* __restrict__ Out_ptr, float* __restrict__ X_ptr) {") :]
    before, after = body.split("__syncthreads();", 1)
    assert before.count("if (((int)threadIdx.x) < 64) {") == 2 and "* 0x1.8p+1f" in before  # c = a * 3
    assert "[63] -" in after  # b = a[63] - a[i], after the barrier
    cuda.compile_object(src, tilelang.utils.target.determine_target(target))
    X = torch.randn(64)
    out = tilelang.compile(fewer_items_than_threads(), out_idx=[-1], target="cpu")(X)
    torch.testing.assert_close(out, (X[63] * 2 - X * 2) + X * 6)


@pytest.mark.gpu
def test_a_split_thread_guard_on_gpu():
    X = torch.randn(64, device="cuda")
    out = tilelang.compile(fewer_items_than_threads(), out_idx=[-1])(X)
    torch.testing.assert_close(out, (X[63] * 2 - X * 2) + X * 6)

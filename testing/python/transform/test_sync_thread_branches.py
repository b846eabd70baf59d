"""Branches of the first n threads (`if tx < n:` around tile ops): their fragments and gemms are laid
out over those n threads, barriers go around the branch (`expose_thread_branches`) and inside it
over its threads only (`restore_thread_branches`), and a pipelined loop's gemms inside it run
asynchronously up to the branch's end (`wgmma_waits`)."""

import re

import pytest
import torch
from tvm import ir, tirx

import tilelang
import tilelang.language as T
from tilelang.codegen import cuda
from tilelang.language.diagnostics import UserError
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

    with pytest.raises(UserError, match=r"spans 128 threads, the second 256.*if tx < n"):
        tilelang.compile(main, out_idx=[1], target="sm_90a")


def _kernel(body, threads=256):
    tx = tirx.Var("tx", "int32")
    iv = tirx.IterVar(ir.Range(0, threads), tx, tirx.IterVar.ThreadIndex, "threadIdx.x")
    return tx, tirx.PrimFunc([], tirx.AttrStmt(iv, "thread_extent", threads, body(tx)))


def _names(stmt):
    out = []

    def on_eval(s):
        v = s.value
        if isinstance(v, ir.Call) and isinstance(v.op, ir.Op):
            out.append(v.op.name if v.op.name != "tirx.call_extern" else str(v.args[0].value))

    import tvm_ffi

    tvm_ffi.structural_walk(stmt, [(tirx.Evaluate, on_eval)])
    return out


def test_expose_then_restore():
    buf = tirx.decl_buffer((128,), "float32", "s", scope="shared.dyn")

    def body(tx):
        store = tirx.BufferStore(buf, tirx.const(1.0, "float32"), [tx])
        return tirx.IfThenElse(tx < 128, mark(tx < 128, store), None)

    tx, func = _kernel(body)
    exposed = expose_thread_branches(func).body.body
    # Condition gone (TVM's barrier insertion sees plain code), barriers around, tx read as tx % n.
    assert isinstance(exposed, tirx.SeqStmt) and len(exposed) == 3
    assert _names(exposed[0]) == _names(exposed[2]) == ["tirx.tvm_storage_sync"]
    assert exposed[1].attr_key == THREAD_BRANCH
    assert isinstance(exposed[1].body.indices[0], tirx.FloorMod)
    # What TVM's barrier insertion might add inside: a block barrier.
    sync = tirx.Evaluate(tirx.call_intrin("int32", "tirx.tvm_storage_sync", ir.StringImm("shared.dyn")))
    inner = tirx.SeqStmt([sync, exposed[1].body])
    func = func.with_body(
        tirx.AttrStmt(
            func.body.node,
            "thread_extent",
            256,
            tirx.SeqStmt(
                [exposed[0], tirx.AttrStmt(exposed[1].node, THREAD_BRANCH, exposed[1].value, inner), exposed[2]]
            ),
        )
    )
    restored = restore_thread_branches(func).body.body[1]
    assert isinstance(restored, tirx.IfThenElse) and restored.condition.a.same_as(tx)
    assert _names(restored.then_case) == ["tl::named_barrier_sync<4, 128>"]
    assert restored.then_case[1].indices[0].same_as(tx)


def test_branch_without_shared_memory_gets_no_barriers():
    buf = tirx.decl_buffer((4,), "float32", "r", scope="local")

    def body(tx):
        store = tirx.BufferStore(buf, tirx.const(1.0, "float32"), [0])
        return tirx.IfThenElse(tx < 128, mark(tx < 128, store), None)

    _, func = _kernel(body)
    out = expose_thread_branches(func).body.body
    assert isinstance(out, tirx.IfThenElse) and isinstance(out.then_case, tirx.BufferStore)


@pytest.mark.gpu
@pytest.mark.parametrize("target_threads", [(256, 128), (384, 256)])
def test_branch_on_gpu(target_threads):
    threads, first = target_threads
    kernel = tilelang.compile(row_max(threads, first), out_idx=[1])
    a = torch.randn(M, N, device="cuda", dtype=torch.float16)
    s = a.float() @ a.float().T
    ref = s.max(dim=1).values[:, None].expand(M, N)
    torch.testing.assert_close(kernel(a), ref, rtol=1e-3, atol=1e-3)

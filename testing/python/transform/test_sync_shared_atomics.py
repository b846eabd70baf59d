"""expose_shared_atomics / restore_shared_atomics: barrier insertion orders atomics on shared memory
after other threads' plain stores and before their plain loads (a split-K GEMV whose partial sums
were added into elements not yet zeroed), and puts no barrier between atomics (in a loop, under a
condition that differs between threads). CPU: the generated code and nvcc; GPU: the sums."""

import re

import pytest
import torch
from ir_testing import assert_ir_equal
from tvm import ir, tirx

import tilelang
import tilelang.language as T
from tilelang.codegen import cuda
from tilelang.transform.sync_shared_atomics import expose_shared_atomics, restore_shared_atomics
from tilelang.utils.target import determine_target

TARGETS = ["sm_80", "sm_90a"]


def splitk_gemv(N=256, K=512, block_N=32, block_K=16):
    """y = W x: each block has block_N rows; thread (tn, tk) sums a strided part of row tn and adds
    it into the shared accumulator acc[tn], which thread (tn, 0) zeroed."""

    @T.prim_func
    def main(W: T.Tensor((N, K), "float32"), x: T.Tensor((K,), "float32"), y: T.Tensor((N,), "float32")):
        with T.Kernel(N // block_N, threads=(block_N, block_K)) as bn:
            tn = T.get_thread_binding(0)
            tk = T.get_thread_binding(1)
            acc = T.alloc_shared((block_N,), "float32")
            part = T.alloc_local((1,), "float32")
            if tk == 0:
                acc[tn] = 0
            part[0] = 0
            for k in T.serial(K // block_K):
                part[0] += W[bn * block_N + tn, k * block_K + tk] * x[k * block_K + tk]
            T.atomic_add(acc[tn], part[0])
            y[bn * block_N + tn] = acc[tn]

    return main


def histogram(n=4096, bins=64, threads=256):
    """Counts of x's values (in [0, bins)) per block in shared memory, then added to the output; a
    second atomic per element counts the odd values into the last bin, only where x is odd."""

    @T.prim_func
    def main(x: T.Tensor((n,), "int32"), counts: T.Tensor((bins + 1,), "int32")):
        with T.Kernel(n // (threads * 4), threads=threads) as b:
            tx = T.get_thread_binding()
            h = T.alloc_shared((bins + 1,), "int32")
            if tx < bins + 1:
                h[tx] = 0
            for i in T.serial(4):
                v = x[(b * 4 + i) * threads + tx]
                T.atomic_add(h[v], 1)
                if v % 2 == 1:
                    T.atomic_add(h[bins], 1)
            if tx < bins + 1:
                T.atomic_add(counts[tx], h[tx])

    return main


def _source(func, arch):
    return tilelang.compile(func, target=arch).get_kernel_source()


def _body(src):
    return src[src.index("__global__ void __launch_bounds__", src.index("__global__") + 10) :]


@pytest.mark.parametrize("arch", TARGETS)
def test_atomics_wait_for_plain_stores_and_loads_for_atomics(arch):
    src = _body(_source(splitk_gemv(), arch))
    zero = src.index("C_shared_ptr") if "C_shared_ptr" in src else src.index("= 0x0p+0f")
    add = src.index("tl::atomic_add(")
    read = src.index("y_ptr[")
    assert "__syncthreads();" in src[zero:add], "the zeroing must be visible to the adding threads"
    assert "__syncthreads();" in src[add:read], "the sums must be complete before they are read"
    assert "exposed_atomic" not in src
    cuda.compile_object(_source(splitk_gemv(), arch), determine_target(arch))


@pytest.mark.parametrize("arch", TARGETS)
def test_no_barrier_between_atomics(arch):
    src = _source(histogram(), arch)
    body = _body(src)
    start = body.index("for (int i = 0; i < 4; ++i)")
    loop = body[start : body.index("\n  }\n", start)]
    # One barrier after the zeroing (before the loop) and one after the loop; none inside it, where
    # the atomics are (one of them under a condition on data, where a barrier could not go).
    assert loop.count("tl::atomic_add(") == 2 and "__syncthreads" not in loop
    assert body.count("__syncthreads();") == 2
    cuda.compile_object(src, determine_target(arch))


def test_atomic_load_and_store():
    @T.prim_func
    def main(A: T.Tensor((128,), "int32")):
        with T.Kernel(1, threads=128):
            tx = T.get_thread_binding()
            s = T.alloc_shared((128,), "int32")
            T.atomic_store(s[tx], tx)
            A[tx] = T.atomic_load(s[(tx + 1) % 128])
            s[tx] = 0
            A[tx] = A[tx] + s[(tx + 5) % 128]

    body = _body(_source(main, "sm_90a"))
    store, load = body.index("tl::atomic_store"), body.index("tl::atomic_load")
    assert "__syncthreads();" not in body[store:load]  # atomic after atomic
    assert "__syncthreads();" in body[load : body.index("= 0;")]  # a plain store after another's atomic load
    assert re.search(r"__syncthreads\(\);\s*A_ptr\[", body[body.index("= 0;") :])


@pytest.mark.gpu
def test_splitk_gemv_on_gpu():
    kernel = tilelang.compile(splitk_gemv(), out_idx=[2])
    w = torch.randn(256, 512, device="cuda")
    x = torch.randn(512, device="cuda")
    torch.testing.assert_close(kernel(w, x), w @ x, rtol=1e-4, atol=1e-3)


@pytest.mark.gpu
def test_histogram_on_gpu():
    kernel = tilelang.compile(histogram())
    x = torch.randint(0, 64, (4096,), device="cuda", dtype=torch.int32)
    counts = torch.zeros(65, device="cuda", dtype=torch.int32)
    kernel(x, counts)
    expect = torch.bincount(x.long(), minlength=64).int()
    assert torch.equal(counts[:64], expect) and counts[64].item() == int((x % 2 == 1).sum())


def _atomic_kernel(scope):
    """`tl::atomic_add(&S[tx], 1)` in a 128-thread block, S in `scope`."""
    tx = tirx.Var("tx", "int32")
    S = tirx.decl_buffer((128,), "int32", "S", scope=scope)
    add = tirx.Evaluate(tirx.call_extern("void", "tl::atomic_add", tirx.address_of(tirx.BufferLoad(S, [tx])), 1))
    iv = tirx.IterVar(ir.Range(0, 128), tx, 1, "threadIdx.x")
    return tirx.PrimFunc([], tirx.AttrStmt(iv, "thread_extent", 128, add))


def test_exposed_for_barrier_insertion_only():
    func = _atomic_kernel("shared")
    exposed = expose_shared_atomics(func)
    script = exposed.script()
    assert "tl.exposed_atomic" in script and "T.tvm_access_ptr(" in script and "T.Mul(tx, 0), 1, 3)" in script
    assert_ir_equal(restore_shared_atomics(exposed), func)
    glob = _atomic_kernel("global")
    assert expose_shared_atomics(glob).same_as(glob)  # global memory: barriers do not order it

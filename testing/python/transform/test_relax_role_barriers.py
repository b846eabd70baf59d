"""relax_role_barriers: warp roles written by hand (`with T.ws(k):` in a loop) that synchronize
through mbarriers and touch shared memory only through TMA loads, wgmma and mbarriers run side by
side: no block barrier between them, one before and one after their loop. Roles with plain shared
stores, or branches that wait on no mbarrier, keep their barriers. (The protocol of the relaxed
kernels is checked by the barrier-protocol interpreter in test_tma_copy_protocol.py.)"""

import os
import sys

import tilelang
import tilelang.language as T

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "language"))
from test_tma_copy_protocol import ws_roles_gemm  # noqa: E402


def _loop(src):
    start = src.index("for (int k = 0;")
    return src[start : src.index("\n  }\n", start)]


def _source(func):
    return tilelang.compile(func, target="sm_90a").get_kernel_source()


def test_roles_run_side_by_side():
    for stages in (1, 2):
        src = _source(ws_roles_gemm(stages=stages))
        loop = _loop(src)
        assert "__syncthreads" not in loop and "bar.sync" not in loop
        assert loop.count("tl::mbarrier_wait(") == 2
        # The loop is ordered against the code around it: the zeroing before, the store after.
        assert src[: src.index("for (int k = 0;")].rstrip().endswith("__syncthreads();")
        assert src[src.index("\n  }\n", src.index("for (int k = 0;")) :].lstrip("\n }").startswith("__syncthreads();")


def test_roles_with_plain_shared_accesses_keep_their_barriers():
    # The consumer writes its row sums into shared memory with plain stores: a block barrier may
    # order those (for the other role or the next iteration), so it stays.
    @T.prim_func
    def main(A: T.Tensor((128, 512), "float16"), S: T.Tensor((8, 128), "float32")):
        with T.Kernel(1, threads=256):
            A_s = T.alloc_shared((128, 64), "float16")
            sums = T.alloc_shared((128,), "float32")
            full = T.alloc_barrier(128)
            empty = T.alloc_barrier(128)
            for k in T.serial(8):
                with T.ws(1):
                    T.barrier_wait(empty, (k + 1) % 2)
                    T.tma_copy(A[0:128, k * 64 : (k + 1) * 64], A_s, barrier=full)
                    T.barrier_arrive(full)
                with T.ws(0):
                    T.barrier_wait(full, k % 2)
                    tx = T.get_thread_binding()
                    sums[tx] = T.Cast("float32", A_s[tx, 0])
                    T.barrier_arrive(empty)
                    S[k, tx] = sums[127 - tx]

    loop = _loop(_source(main))
    assert "__syncthreads();" in loop or "bar.sync" in loop


def test_branches_without_mbarrier_waits_keep_their_barriers():
    @T.prim_func
    def main(A: T.Tensor((256,), "float32")):
        with T.Kernel(1, threads=256):
            s = T.alloc_shared((256,), "float32")
            for k in T.serial(4):
                with T.ws(0):
                    s[T.get_thread_binding()] = k
                with T.ws(1):
                    A[T.get_thread_binding()] = s[T.get_thread_binding() - 128]

    assert "__syncthreads();" in _loop(_source(main))

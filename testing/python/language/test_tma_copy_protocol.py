"""T.tma_copy as the public TileLang defines it: one thread of the threads running it announces the
tile's bytes on the barrier (`mbarrier.expect_tx`, no arrival) and issues the load; the threads
arrive themselves (T.barrier_arrive / T.mbarrier_arrive), so a barrier the 128 threads of a
producer warpgroup arrive on is allocated with 128. Also T.mbarrier_expect_tx, the
leader_scope_threads / emit_arrive / eviction_policy options and the argument errors.

Kernels in the two styles of hand-written warp specialization: `with T.ws(k):` roles inside the K
loop (one or two stages of barriers), and an `if tx < 128: ... else:` split. CPU: the generated
code (who announces, who arrives, the counts), the barrier-protocol interpreter (no deadlock, no
race, phases as expected), nvcc for sm_90a. GPU: the products against torch.
"""

import re

import pytest
import torch

import tilelang
import tilelang.language as T
from tilelang.analysis import barrier_protocol_problems
from tilelang.codegen import cuda
from tilelang.engine.pipeline import lower
from tilelang.errors import UserError
from tilelang.options import CompileOptions
from tilelang.testing import assert_points_at
from tilelang.utils.target import determine_target


def ws_roles_gemm(M=256, N=128, K=512, stages=1, producer=1):
    """C = A @ B, block 128 x 128: warpgroup `producer` loads each K step by TMA, the other runs
    the gemm; with `stages` buffers of each tile, a full and an empty barrier per stage."""
    consumer = 1 - producer

    @T.prim_func
    def main(A: T.Tensor((M, K), "float16"), B: T.Tensor((K, N), "float16"), C: T.Tensor((M, N), "float16")):
        with T.Kernel(N // 128, M // 128, threads=256) as (bx, by):
            A_s = T.alloc_shared((stages, 128, 64), "float16")
            B_s = T.alloc_shared((stages, 64, 128), "float16")
            C_f = T.alloc_fragment((128, 128), "float32")
            full = T.alloc_barrier([128] * stages)
            empty = T.alloc_barrier([128] * stages)
            with T.ws(consumer):
                T.clear(C_f)
            for k in T.serial(K // 64):
                with T.ws(producer):
                    T.mbarrier_wait_parity(empty[k % stages], (k // stages + 1) % 2)
                    T.tma_copy(A[by * 128, k * 64], A_s[k % stages, :, :], barrier=full[k % stages])
                    T.tma_copy(B[k * 64, bx * 128], B_s[k % stages, :, :], barrier=full[k % stages])
                    T.mbarrier_arrive(full[k % stages])
                with T.ws(consumer):
                    T.barrier_wait(full[k % stages], k // stages % 2)
                    T.gemm(A_s[k % stages, :, :], B_s[k % stages, :, :], C_f)
                    T.barrier_arrive(empty[k % stages])
            with T.ws(consumer):
                T.copy(C_f, C[by * 128, bx * 128])

    return main


def split_gemm(M=128, N=128, K=256, leader_scope=None, arrivals="threads"):
    """One block: threads 128..255 load (each K step's two tiles on one barrier), threads 0..127
    multiply. Who arrives on the full barrier: the producer's 128 `threads`, or the thread issuing
    each of the two `copies` (emit_arrive), or `both` (130 arrivals on a barrier of 128: wrong)."""
    count = 2 if arrivals == "copies" else 128
    options = {"leader_scope_threads": leader_scope} if leader_scope else {}
    annotations = {"emit_arrive": 1} if arrivals in ("copies", "both") else None
    threads_arrive = arrivals in ("threads", "both")
    issuer_only = arrivals == "copies"

    @T.prim_func
    def main(A: T.Tensor((M, K), "float16"), B: T.Tensor((K, N), "float16"), C: T.Tensor((M, N), "float32")):
        with T.Kernel(1, threads=256):
            A_s = T.alloc_shared((M, 64), "float16")
            B_s = T.alloc_shared((64, N), "float16")
            C_f = T.alloc_fragment((M, N), "float32")
            full = T.alloc_barrier(count)
            empty = T.alloc_barrier(128)
            tx = T.get_thread_binding()
            if tx < 128:
                T.clear(C_f)
                for k in T.serial(K // 64):
                    T.barrier_wait(full, k % 2)
                    T.gemm(A_s, B_s, C_f)
                    T.barrier_arrive(empty)
                T.copy(C_f, C)
            elif issuer_only and tx > 128:
                pass  # only the issuing thread loads: the others would not keep up with the phases
            else:
                for k in T.serial(K // 64):
                    T.barrier_wait(empty, (k + 1) % 2)
                    T.tma_copy(A[0:M, k * 64 : (k + 1) * 64], A_s, barrier=full, annotations=annotations, **options)
                    T.tma_copy(B[k * 64 : (k + 1) * 64, 0:N], B_s, barrier=full, annotations=annotations, **options)
                    if threads_arrive:
                        T.barrier_arrive(full)

    return main


def _lower(func):
    return lower(func, determine_target("sm_90a"), CompileOptions.from_pass_configs(None))


def _source(func):
    return tilelang.compile(func, target="sm_90a").get_kernel_source()


@pytest.mark.parametrize("stages, producer", [(1, 1), (2, 1), (1, 0)])
def test_ws_roles_announce_once_and_arrive_per_thread(stages, producer):
    func = ws_roles_gemm(stages=stages, producer=producer)
    src = _source(func)
    first = 128 * producer
    # The producer's first thread announces both tiles' bytes (16 KB each), without arriving.
    announces = re.findall(
        rf"if \(\(\(int\)threadIdx.x\) == {first}\) \{{\s*tl::mbarrier_expect_tx\([^;]*\(uint\)16384\)", src
    )
    assert len(announces) == 2
    assert "mbarrier_arrive_expect_tx" not in src
    # Every barrier counts 128 arrivals: the producer's or the consumer's threads.
    assert src.count("(uint)128);") == 2 * stages and "tl::mbarrier_init" in src
    assert src.count("tl::mbarrier_arrive((&(full") == 1 and src.count("tl::mbarrier_arrive((&(empty") == 1
    assert barrier_protocol_problems(_lower(func), [(0, 0), (0, 1)], 3) == []
    cuda.compile_object(src, determine_target("sm_90a"))


def test_split_roles():
    func = split_gemm()
    src = _source(func)
    producer = src[src.index("} else {") :]
    assert re.search(r"if \(\(\(int\)threadIdx.x\) == 128\) \{\s*tl::mbarrier_expect_tx\(", producer)
    assert "tl::mbarrier_arrive((&(full" in producer
    assert barrier_protocol_problems(_lower(func), [0], 3) == []
    cuda.compile_object(src, determine_target("sm_90a"))


def test_a_copy_is_no_arrival():
    # Without the producer's arrivals the full barrier never completes: the copy alone does not
    # arrive (an expect-tx is bytes, not an arrival), and the interpreter finds the deadlock.
    @T.prim_func
    def main(A: T.Tensor((128, 64), "float16"), C: T.Tensor((128, 64), "float16")):
        with T.Kernel(1, threads=128):
            A_s = T.alloc_shared((128, 64), "float16")
            full = T.alloc_barrier(1)
            T.tma_copy(A[0:128, 0:64], A_s, barrier=full)
            T.barrier_wait(full, 0)
            T.copy(A_s, C)

    problems = barrier_protocol_problems(_lower(main), [0], 1)
    assert len(problems) == 1 and "deadlock" in problems[0]


def test_one_thread_announces_and_arrives():
    # The public idiom for a one-arrival barrier: the same condition for the copy and the arrival
    # (T.tma_copy elects the first thread of the threads running it), or emit_arrive.
    @T.prim_func
    def main(A: T.Tensor((128, 64), "float16"), C: T.Tensor((128, 64), "float16")):
        with T.Kernel(1, threads=128):
            A_s = T.alloc_shared((128, 64), "float16")
            full = T.alloc_barrier(1)
            if T.get_thread_binding() == 0:
                T.tma_copy(A[0:128, 0:64], A_s, barrier=full)
                T.mbarrier_arrive(full)
            T.barrier_wait(full, 0)
            T.copy(A_s, C)

    assert barrier_protocol_problems(_lower(main), [0], 2) == []
    func = split_gemm(arrivals="copies")
    src = _source(func)
    producer = src[src.index("} else {") :]
    one_copy = (
        r"tl::mbarrier_expect_tx\([^;]*;\s*tl::tma_load\([^;]*;\s*(tl::tma_load\([^;]*;\s*)?tl::mbarrier_arrive\("
    )
    assert len(re.findall(one_copy, producer)) == 2
    assert barrier_protocol_problems(_lower(func), [0], 3) == []


def test_too_many_arrivals_are_caught():
    # The mistake the old T.tma_copy made with the public examples: the copies' arrivals on top of
    # the 128 threads' (130 on a barrier counting 128). The extra arrivals carry over into the next
    # phases until one completes before the issuing warp announced its bytes: the consumers then
    # read tiles still being loaded (here after about 16 of the 32 K steps).
    problems = barrier_protocol_problems(_lower(split_gemm(K=2048, arrivals="both")), [0], 2)
    assert problems and all(re.search("deadlock|phase|race", p) for p in problems)


def test_leader_scope_threads():
    # One issuing thread per warp: each warp's copy announces and loads the tile.
    src = _source(split_gemm(leader_scope=32))
    producer = src[src.index("} else {") :]
    assert re.search(r"if \(\(\(\(int\)threadIdx.x\) % 32\) == 0\) \{\s*tl::mbarrier_expect_tx\(", producer)


def test_mbarrier_expect_tx():
    @T.prim_func
    def main(A: T.Tensor((128, 64), "float16"), C: T.Tensor((128, 64), "float16")):
        with T.Kernel(1, threads=128):
            A_s = T.alloc_shared((128, 64), "float16")
            full = T.alloc_barrier(1)
            if T.get_thread_binding() == 0:
                T.mbarrier_expect_tx(full, 128 * 64 * 2)
                T.mbarrier_arrive(full)
            T.barrier_wait(full, 0)
            T.copy(A_s, C)

    src = _source(main)
    assert "tl::mbarrier_expect_tx((&(full_ptr[0])), (uint)16384);" in src
    cuda.compile_object(src, determine_target("sm_90a"))


def test_argument_errors():
    def kernel(form, **kwargs):
        @T.prim_func
        def main(A: T.Tensor((128, 64), "float16")):
            with T.Kernel(1, threads=128):
                A_s = T.alloc_shared((128, 64), "float16")
                bar = T.alloc_barrier(128)
                if form == "store":
                    T.tma_copy(A_s, A[0:128, 0:64], barrier=bar)
                elif form == "no barrier":
                    T.tma_copy(A[0:128, 0:64], A_s)
                else:
                    T.tma_copy(A[0:128, 0:64], A_s, barrier=bar, **kwargs)

        return main

    with pytest.raises(UserError, match="needs barrier=") as err:
        kernel("no barrier")
    assert_points_at(err, "T.tma_copy(A[0:128, 0:64], A_s)")
    with pytest.raises(UserError, match="TMA store.*not supported.*use T.copy") as err:
        kernel("store")
    assert_points_at(err, "T.tma_copy(A_s, A[0:128, 0:64], barrier=bar)")
    with pytest.raises(
        UserError, match=r"leader_scope_threads must be a positive multiple of 32 \(a warp\), got 48"
    ) as err:
        kernel("load", annotations={"leader_scope_threads": 48})
    assert_points_at(err, "T.tma_copy(A[0:128, 0:64], A_s, barrier=bar, **kwargs)")
    with pytest.raises(UserError, match="unknown annotation 'wait'") as err:
        kernel("load", annotations={"wait": 1})
    assert_points_at(err, "T.tma_copy(A[0:128, 0:64], A_s, barrier=bar, **kwargs)")


def test_eviction_policy_is_checked_and_accepted():
    @T.prim_func
    def main(A: T.Tensor((128, 64), "float16"), C: T.Tensor((128, 64), "float16")):
        with T.Kernel(1, threads=128):
            A_s = T.alloc_shared((128, 64), "float16")
            full = T.alloc_barrier(128)
            T.tma_copy(A[0:128, 0:64], A_s, barrier=full, eviction_policy="evict_first")
            T.barrier_arrive(full)
            T.barrier_wait(full, 0)
            T.copy(A_s, C)

    assert "tl::tma_load(" in _source(main)
    with pytest.raises(UserError, match="eviction_policy must be one of") as err:

        @T.prim_func
        def bad(A: T.Tensor((128, 64), "float16")):
            with T.Kernel(1, threads=128):
                A_s = T.alloc_shared((128, 64), "float16")
                full = T.alloc_barrier(128)
                T.tma_copy(A[0:128, 0:64], A_s, barrier=full, eviction_policy="keep")

    assert_points_at(err, 'eviction_policy="keep"')


@pytest.mark.gpu
@pytest.mark.parametrize("stages, producer", [(1, 1), (2, 1), (1, 0)])
def test_ws_roles_gemm_on_gpu(stages, producer):
    kernel = tilelang.compile(ws_roles_gemm(stages=stages, producer=producer), out_idx=[2])
    a = torch.randn(256, 512, device="cuda", dtype=torch.float16)
    b = torch.randn(512, 128, device="cuda", dtype=torch.float16)
    torch.testing.assert_close(kernel(a, b), (a.float() @ b.float()).half(), rtol=1e-2, atol=1e-2)


@pytest.mark.gpu
@pytest.mark.parametrize("options", [{}, {"leader_scope": 32}, {"arrivals": "copies"}])
def test_split_gemm_on_gpu(options):
    kernel = tilelang.compile(split_gemm(**options), out_idx=[2])
    a = torch.randn(128, 256, device="cuda", dtype=torch.float16)
    b = torch.randn(256, 128, device="cuda", dtype=torch.float16)
    torch.testing.assert_close(kernel(a, b), a.float() @ b.float(), rtol=1e-2, atol=1e-2)


def test_public_keyword_names():
    # The public names of the arguments: mbarrier=, parity=.
    @T.prim_func
    def main(A: T.Tensor((128, 64), "float16"), C: T.Tensor((128, 64), "float16")):
        with T.Kernel(1, threads=128):
            A_s = T.alloc_shared((128, 64), "float16")
            full = T.alloc_barrier(arrive_count=128)
            T.tma_copy(A[0:128, 0:64], A_s, barrier=full)
            T.barrier_arrive(mbarrier=full)
            T.barrier_wait(mbarrier=full, parity=0)
            T.mbarrier_wait_parity(mbarrier=full, parity=0)
            T.copy(A_s, C)

    assert barrier_protocol_problems(_lower(main), [0], 1) == []


def column_windows(width=64):
    """C = A @ B^T with B's 256 columns loaded into its shared tile as column blocks of `width`,
    each on its own barrier (FlashMLA loads its KV tile this way): the consumer waits for all."""
    parts = 256 // width

    @T.prim_func
    def main(A: T.Tensor((64, 256), "float16"), B: T.Tensor((64, 256), "float16"), C: T.Tensor((64, 64), "float32")):
        with T.Kernel(1, threads=256):
            A_s = T.alloc_shared((64, 256), "float16")
            B_s = T.alloc_shared((64, 256), "float16")
            C_f = T.alloc_fragment((64, 64), "float32")
            ready = T.alloc_barrier([128] * parts)
            with T.ws(1):
                for j in T.unroll(parts):
                    T.tma_copy(A[:, j * width : (j + 1) * width], A_s[:, j * width : (j + 1) * width], barrier=ready[j])
                    T.tma_copy(B[:, j * width : (j + 1) * width], B_s[:, j * width : (j + 1) * width], barrier=ready[j])
                    T.barrier_arrive(ready[j])
            with T.ws(0):
                for j in T.unroll(parts):
                    T.barrier_wait(ready[j], 0)
                T.gemm(A_s, B_s, C_f, transpose_B=True)
                T.copy(C_f, C)

    return main


def test_column_windows_of_a_swizzled_tile():
    func = column_windows()
    src = _source(func)
    # Each 64-column block is one 128-byte-swizzled panel of the tile: one box each, at the panel.
    loads = re.findall(r"tl::tma_load\(A_tma\d+, [^;]*?\* 8\)(?: \+ (\d+)\))?\]\)\), (\d+), 0\);", src)
    assert sorted((int(off or 0), int(col)) for off, col in loads) == [(4096 * j, 64 * j) for j in range(4)]
    assert src.count("tl::mbarrier_expect_tx(") == 8
    assert barrier_protocol_problems(_lower(func), [0], 2) == []
    cuda.compile_object(src, determine_target("sm_90a"))


def test_a_window_off_the_panels_is_an_error():
    where = r"test_tma_copy_protocol.py:\d+:\d+\n\s*\|\n\d+ \|\s*T.tma_copy\(A\["
    with pytest.raises(UserError, match=r"(?s)whole swizzle panels.*" + where) as err:
        _source(column_windows(width=32))
    assert_points_at(err, "T.tma_copy(A[:, j * width : (j + 1) * width]")


@pytest.mark.gpu
def test_column_windows_on_gpu():
    kernel = tilelang.compile(column_windows(), out_idx=[2])
    a = torch.randn(64, 256, device="cuda", dtype=torch.float16)
    b = torch.randn(64, 256, device="cuda", dtype=torch.float16)
    torch.testing.assert_close(kernel(a, b), a.float() @ b.float().T, rtol=1e-2, atol=1e-2)

"""Hand-written warp specialization (Hopper): mbarriers, TMA copies that complete on them, register
budgets. With these and thread branches (`if tx < 128:` ... `else:`), a kernel gives its
warpgroups roles of its own design, as FlashMLA does; `T.Pipelined` builds the common
producer/consumer schedule by itself.

    bar_full = T.alloc_barrier(1)                  # one arrival: the TMA copy's expect-tx
    bar_free = T.alloc_barrier(128)                # every consumer thread arrives
    tx = T.get_thread_binding()
    if tx < 128:                                   # consumers
        for k in T.serial(n):
            T.barrier_wait(bar_full, k % 2)        # the tile of iteration k has landed
            T.gemm(A_shared, B_shared, C_local)
            T.barrier_arrive(bar_free)             # the tile may be overwritten
    else:                                          # producer
        for k in T.serial(n):
            T.barrier_wait(bar_free, (k + 1) % 2)  # (passes at once for k = 0)
            T.tma_copy(A[...], A_shared, barrier=bar_full)

A barrier's phase flips each time its arrivals reach the count (and a TMA copy's bytes have all
landed); `T.barrier_wait(bar, p)` returns once the phase with parity p has completed.
"""

from __future__ import annotations

from tvm import ir, tirx
from tvm.script.ir_builder import tirx as _tb

from tilelang import intrinsics
from tilelang.errors import UserError
from tilelang.language.kernel import get_thread_binding
from tilelang.op import base, tma


def _extern(name, *args):
    return tirx.call_extern("void", name, *args)


def alloc_barrier(arrive_count):
    """mbarriers in shared memory, one per entry of `arrive_count` (an int: one barrier), each
    completing a phase after that many arrivals. Thread 0 initializes them where they are
    allocated, before a block barrier.

    Example: full = T.alloc_barrier([1, 1]); T.barrier_wait(full[k % 2], k // 2 % 2)
    """
    counts = list(arrive_count) if isinstance(arrive_count, (list, tuple)) else [arrive_count]
    for c in counts:
        if not isinstance(c, int) or c <= 0:
            raise UserError(f"T.alloc_barrier: arrive counts must be positive ints, got {arrive_count!r}")
    bars = _tb.alloc_buffer((len(counts),), "uint64", scope="shared")
    with _tb.If(get_thread_binding() == 0):
        with _tb.Then():
            for i, c in enumerate(counts):
                _tb.evaluate(_extern("tl::mbarrier_init", _address(bars, i), tirx.const(c, "uint32")))
            _tb.evaluate(_extern("tl::fence_barrier_init"))
    _tb.evaluate(_extern("__syncthreads"))
    return bars


def _address(barrier, index=None):
    """`&barrier[index]` for a barrier array and an index, or for `bar[i]` as the user wrote it."""
    if isinstance(barrier, ir.TensorLoad):
        return tirx.address_of(barrier)
    if tirx.is_buffer_var(barrier):
        return tirx.address_of(tirx.BufferLoad(barrier, [tirx.const(index or 0, "int32")]))
    raise UserError(f"expected a barrier from T.alloc_barrier (or one element of it), got {barrier!r}")


def _check_barrier(barrier, what):
    buf = barrier.source if isinstance(barrier, ir.TensorLoad) else barrier
    if not tirx.is_buffer_var(buf) or str(buf.dtype) != "uint64" or buf.scope() != "shared":
        raise UserError(f"{what}: expected a barrier from T.alloc_barrier (or one element of it), got {barrier!r}")


def barrier_arrive(barrier):
    """Every thread that runs this arrives once on `barrier` (`bar` or `bar[i]`)."""
    _check_barrier(barrier, "T.barrier_arrive")
    return _extern("tl::mbarrier_arrive", _address(barrier))


def barrier_wait(barrier, parity):
    """Wait until the phase of `barrier` with parity `parity` (0 or 1) has completed."""
    _check_barrier(barrier, "T.barrier_wait")
    return _extern("tl::mbarrier_wait", _address(barrier), tirx.Cast("uint32", parity))


# TileLang's mbarrier_* spellings of the same operations (its low-level names).


def mbarrier_wait_parity(mbarrier, parity):
    """`T.barrier_wait` by TileLang's low-level name: wait until the phase of `mbarrier` with
    parity `parity` has completed.

    Example: T.mbarrier_wait_parity(full[k % 2], (k // 2) & 1)
    """
    _check_barrier(mbarrier, "T.mbarrier_wait_parity")
    return _extern("tl::mbarrier_wait", _address(mbarrier), tirx.Cast("uint32", parity))


def mbarrier_arrive(mbarrier, cta_id=None):
    """`T.barrier_arrive` by TileLang's low-level name: every thread running it arrives once.

    Errors:
        UserError with `cta_id` (arriving on another block's barrier needs a thread-block cluster
        barrier, T.alloc_cluster_barrier, which tilelang does not support).
    """
    if cta_id is not None:
        raise UserError(
            "T.mbarrier_arrive(barrier, cta_id): arriving on another block's barrier needs a cluster "
            "barrier (T.alloc_cluster_barrier, thread-block clusters), which tilelang does not support"
        )
    _check_barrier(mbarrier, "T.mbarrier_arrive")
    return _extern("tl::mbarrier_arrive", _address(mbarrier))


def mbarrier_arrive_expect_tx(mbarrier, tx):
    """Arrive once on `mbarrier` and announce `tx` bytes of asynchronous transactions (TMA or
    bulk copies completing on it) that its phase also waits for.

    Example: T.mbarrier_arrive_expect_tx(bar, 64 * 64 * 2)
    """
    _check_barrier(mbarrier, "T.mbarrier_arrive_expect_tx")
    return _extern("tl::mbarrier_arrive_expect_tx", _address(mbarrier), tirx.Cast("uint32", tx))


def cp_async_barrier_noinc(barrier):
    """`cp.async.mbarrier.arrive.noinc`: `barrier` sees one arrival once this thread's earlier
    `T.ptx_cp_async` copies have landed. The arrival counts against the barrier's arrive count
    (noinc), so allocate it with the number of threads that copy.

    Example:
        T.ptx_cp_async(T.access_ptr(K_shared[r, c], "w", 8), T.access_ptr(K[i, c], "r", 8), 8)
        T.cp_async_barrier_noinc(k_ready[0])
    """
    _check_barrier(barrier, "T.cp_async_barrier_noinc")
    return _ptx()["cp.async.mbarrier.arrive.noinc.shared::cta.b64"](_address(barrier))


def fence_proxy_async():
    """`fence.proxy.async.shared::cta`: shared memory written by ordinary stores becomes visible
    to the async proxy (TMA stores, wgmma operands) of later instructions (sm_90)."""
    return _ptx()["fence.proxy.async.shared::cta"]()


def _ptx():
    from tvm.backend.cuda.ptx import PTXNamespace  # TVM's table of PTX instructions, printed as inline asm

    return PTXNamespace()


def tma_copy(src, dst, barrier):
    """Copy a global tile into a shared tile with the TMA unit (sm_90a), issued by the first thread
    of the threads running it; the tile's bytes complete on `barrier`, which counts the copy as
    one arrival. Wait for it with `T.barrier_wait`.

    Example: T.tma_copy(K[bz, k * 64:(k + 1) * 64, by, :], K_shared, barrier=k_full)
    """
    _check_barrier(barrier, "T.tma_copy")
    s, d = base.to_region_pair(src, dst, "T.tma_copy")
    if s.buffer.scope() != "global" or not d.buffer.scope().startswith("shared"):
        raise UserError(f"T.tma_copy copies a global tile into shared memory, not {s.describe()} into {d.describe()}")
    tile = tma.tile_of(s, d)
    if isinstance(tile, str):
        raise UserError(f"T.tma_copy of {s.describe()} into {d.describe()}: {tile}")
    return tma.make(s, d, _address(barrier), one_thread=True).value


def set_max_nreg(reg_count: int, is_inc: int):
    """`setmaxnreg`: this warpgroup's registers per thread become `reg_count` (a multiple of 8 in
    [24, 256]), raised when `is_inc` (consumers), lowered otherwise (a producer gives registers
    back). Every thread of the warpgroup must run it. The warpgroups' counts must add up to at
    most what the block is launched with (65536 / threads each, a multiple of 8: 3 x 168 for 384
    threads, so 240 + 240 + 24), and a count is raised only above the count ptxas launches the
    kernel with. Compilation checks both: the first from the source
    (transform/check_register_budget.py), the second from ptxas's report (codegen/register_counts.py)."""
    if not isinstance(reg_count, int) or reg_count % 8 or not 24 <= reg_count <= 256:
        raise UserError(f"T.set_max_nreg: reg_count must be a multiple of 8 in [24, 256], got {reg_count!r}")
    return (intrinsics.SETMAXNREG_INC if is_inc else intrinsics.SETMAXNREG_DEC).call({"registers": reg_count})

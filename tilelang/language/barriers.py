"""Hand-written warp specialization (Hopper): mbarriers, TMA copies that complete on them, register
budgets. With these and thread branches (`if tx < 128:` ... `else:`, or `with T.ws(k):`), a kernel
gives its warpgroups roles of its own design, as FlashMLA does; `T.Pipelined` builds the common
producer/consumer schedule by itself.

    bar_full = T.alloc_barrier(128)                # the producer's 128 threads arrive
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
            T.tma_copy(A[...], A_shared, barrier=bar_full)   # one thread: expect-tx and the load
            T.barrier_arrive(bar_full)             # every producer thread arrives once

A barrier's phase flips each time its arrivals reach the count (and a TMA copy's bytes have all
landed); `T.barrier_wait(bar, p)` returns once the phase with parity p has completed.
"""

from __future__ import annotations

import tvm
from tvm import ir, tirx
from tvm.script.ir_builder import tirx as _tb

from tilelang import intrinsics
from tilelang.errors import UserError
from tilelang.language.kernel import get_thread_binding
from tilelang.log import hint_once
from tilelang.op import base, tma
from tilelang.op import copy as copy_op


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


def barrier_arrive(mbarrier):
    """Every thread that runs this arrives once on `mbarrier` (`bar` or `bar[i]`)."""
    _check_barrier(mbarrier, "T.barrier_arrive")
    return _extern("tl::mbarrier_arrive", _address(mbarrier))


def barrier_wait(mbarrier, parity):
    """Wait until the phase of `mbarrier` with parity `parity` (0 or 1) has completed."""
    _check_barrier(mbarrier, "T.barrier_wait")
    return _extern("tl::mbarrier_wait", _address(mbarrier), tirx.Cast("uint32", parity))


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


def mbarrier_expect_tx(mbarrier, tx):
    """Announce `tx` bytes of asynchronous transactions (TMA copies completing on `mbarrier`) that
    the barrier's current phase also waits for, without arriving. Every thread running it
    announces: put it under a one-thread condition (T.tma_copy does this itself).

    Example:
        if tx == 0:
            T.mbarrier_expect_tx(bar, 64 * 64 * 2)
    """
    _check_barrier(mbarrier, "T.mbarrier_expect_tx")
    return _extern("tl::mbarrier_expect_tx", _address(mbarrier), tirx.Cast("uint32", tx))


_TMA_COPY_ANNOTATIONS = ("barrier", "leader_scope_threads", "eviction_policy", "emit_arrive")


def tma_copy(src, dst, *, barrier=None, leader_scope_threads=None, eviction_policy=None, annotations=None):
    """Copy a global tile into a shared tile with the TMA unit (sm_90a), synchronized by the user,
    as in the public TileLang: one thread of the threads running it announces the tile's bytes on
    `barrier` (expect-tx, no arrival) and issues the load; it does not wait. The barrier's phase
    completes once its arrive count is reached, by the threads' own `T.barrier_arrive` (or
    `T.mbarrier_arrive`), and the bytes have landed: wait for it with `T.barrier_wait`.

    Args:
        src: the global tile (a slice, or a start element with the extent from `dst`).
        dst: the shared tile.
        barrier: the mbarrier the bytes complete on (`bar` or `bars[i]` of T.alloc_barrier).
        leader_scope_threads: a multiple of 32: one thread of every group of that many threads
            issues the copy (each group's copy announces and loads the tile); default, the
            threads running it (one issuing thread).
        eviction_policy: "evict_normal", "evict_first" or "evict_last": an L2 cache hint,
            accepted and not applied (logged once at INFO), as for T.copy.
        annotations: the same keywords as a dict, and "emit_arrive": 1 to have the issuing thread
            also arrive once after its loads; its values take precedence.

    Errors:
        UserError without a barrier, for a copy that is not global to shared (a TMA store: use
        T.copy), or for a tile the TMA unit cannot copy (the reason is named).

    Example:
        T.barrier_wait(k_empty, (k + 1) % 2)
        T.tma_copy(K[bz, k * 64:(k + 1) * 64, by, :], K_shared, barrier=k_full)
        T.barrier_arrive(k_full)               # k_full = T.alloc_barrier(128): the 128 threads
    """
    given = {"barrier": barrier, "leader_scope_threads": leader_scope_threads, "eviction_policy": eviction_policy}
    given["emit_arrive"] = 0
    for key, val in (annotations or {}).items():
        if key not in _TMA_COPY_ANNOTATIONS:
            raise UserError(f"T.tma_copy: unknown annotation '{key}'; it takes {_TMA_COPY_ANNOTATIONS}")
        given[key] = val
    s, d = base.to_region_pair(src, dst, "T.tma_copy")
    if s.buffer.scope().startswith("shared") and d.buffer.scope() == "global":
        raise UserError(
            f"T.tma_copy from shared to global memory (a TMA store, {s.describe()} into {d.describe()}) is not "
            "supported by tilelang; use T.copy, which stores the tile and waits for it"
        )
    if s.buffer.scope() != "global" or not d.buffer.scope().startswith("shared"):
        raise UserError(f"T.tma_copy copies a global tile into shared memory, not {s.describe()} into {d.describe()}")
    if given["barrier"] is None:
        raise UserError("T.tma_copy into shared memory needs barrier=, the mbarrier the tile's bytes complete on")
    _check_barrier(given["barrier"], "T.tma_copy")
    scope = given["leader_scope_threads"]
    if scope is not None and (not isinstance(scope, int) or scope <= 0 or scope % 32):
        raise UserError(f"T.tma_copy: leader_scope_threads must be a positive multiple of 32 (a warp), got {scope!r}")
    policy = given["eviction_policy"]
    if policy is not None:
        if policy not in copy_op.EVICTION_POLICIES:
            raise UserError(f"T.tma_copy: eviction_policy must be one of {copy_op.EVICTION_POLICIES}, got {policy!r}")
        hint_once("tma_copy.eviction_policy", f"T.tma_copy(eviction_policy={policy!r}): a cache hint not applied")
    tile = tma.tile_of(s, d, window=True)
    # Extents between bound values (`H0:H1`) are constants only once parsing has made the bindings:
    # `transform/fold_tile_extents.py` folds them and checks the tile then.
    if isinstance(tile, str) and tile != tma.DYNAMIC_EXTENTS:
        raise UserError(f"T.tma_copy of {s.describe()} into {d.describe()}: {tile}")
    emit_arrive = bool(given["emit_arrive"])
    return tma.make_user(s, d, _address(given["barrier"]), scope or 0, emit_arrive).value


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


def inc_max_nreg(reg_count: int):
    """`T.set_max_nreg(reg_count, 1)`: this warpgroup's registers per thread rise to `reg_count`.

    Example: T.inc_max_nreg(240)
    """
    return set_max_nreg(reg_count, 1)


def dec_max_nreg(reg_count: int):
    """`T.set_max_nreg(reg_count, 0)`: this warpgroup gives registers back, down to `reg_count`.

    Example: T.dec_max_nreg(24)
    """
    return set_max_nreg(reg_count, 0)


# Register hints for the warp specialization tilelang builds from a T.Pipelined loop (sm_90a): a
# statement `tl.register_hint(role, registers)` that `collect_register_hints` takes out of the
# kernel before any other pass and `set_register_budgets` applies. Roles:
REGISTER_HINT = "tl.register_hint"
HINT_PRODUCER, HINT_CONSUMER, HINT_NONE = 0, 1, 2
tvm.ir.register_op_attr(REGISTER_HINT, "TCallEffectKind", tirx.CallEffectKind.Opaque.value)


def _register_hint(what: str, role: int, reg_count: int):
    if role != HINT_NONE and (not isinstance(reg_count, int) or reg_count % 8 or not 24 <= reg_count <= 240):
        raise UserError(f"{what}: reg_count must be a multiple of 8 in [24, 240], got {reg_count!r}")
    args = [tirx.const(role, "int32"), tirx.const(reg_count, "int32")]
    return ir.Call(ir.Op.get(REGISTER_HINT), args, ret_ty="void")


def annotate_producer_reg_dealloc(reg_count: int = 24):
    """The registers per thread the producer warpgroup keeps (`setmaxnreg.dec`) in the warp
    specialization tilelang builds for a T.Pipelined loop on sm_90a, instead of its own choice
    (40, or 24 beside three consumer warpgroups). A hint for the whole kernel, wherever it is
    written; a kernel without that warp specialization (roles written by hand) is unchanged, as
    in the public TileLang: there, T.set_max_nreg sets a role's registers.

    Errors: UserError for a count that is not a multiple of 8 in [24, 240], or (at compilation)
    counts that do not fit in what the block is launched with.

    Example: T.annotate_producer_reg_dealloc(24)
    """
    return _register_hint("T.annotate_producer_reg_dealloc", HINT_PRODUCER, reg_count)


def annotate_consumer_reg_alloc(reg_count: int = 240):
    """The registers per thread each consumer warpgroup takes (`setmaxnreg.inc`) in the warp
    specialization tilelang builds for a T.Pipelined loop on sm_90a, instead of its own choice
    (the register file's share left by the producer, at most 240). A hint like
    T.annotate_producer_reg_dealloc, with the same errors.

    Example: T.annotate_consumer_reg_alloc(232)
    """
    return _register_hint("T.annotate_consumer_reg_alloc", HINT_CONSUMER, reg_count)


def no_set_max_nreg():
    """The warp specialization tilelang builds for a T.Pipelined loop (sm_90a) moves no registers
    between its warpgroups: no `setmaxnreg`, every thread keeps the count ptxas launches the
    kernel with. A hint for the whole kernel; T.set_max_nreg calls written by hand stay.

    Example: T.no_set_max_nreg()
    """
    return _register_hint("T.no_set_max_nreg", HINT_NONE, 0)


def disable_warp_group_reg_alloc():
    """T.no_set_max_nreg by its other public name."""
    return _register_hint("T.disable_warp_group_reg_alloc", HINT_NONE, 0)

"""The barrier protocol of a lowered kernel, checked on the CPU by running it: deadlocks, stages
refilled while read, signals after exit, and shared-memory races between warps.

Where it sits: after `tilelang.engine.pipeline.lower`, on the device IR. It is a debug check, off
by default; turn it on for every kernel that synchronizes through mbarriers (warp-specialized
kernels, TMA pipelines, hand-written `T.alloc_barrier` protocols) with the pass config

    @tilelang.jit(pass_configs={"tl.check_barrier_protocol": True})

or `TILELANG_CHECK_BARRIER_PROTOCOL=1` in the environment; `lower()` then raises a CompilerError
listing the problems. (A kernel taken from the disk cache is not lowered again: set
`TILELANG_DISABLE_CACHE=1` as well to check kernels compiled before.) From Python,
`barrier_protocol_problems(lower(...))` returns them as strings.

How: one block (or the two blocks of a 2-block cluster) is interpreted one agent per warp, its lane
0 (`warp_agent`), keeping only what synchronizes (`block_state`): mbarriers (init, arrivals,
expect-tx bytes, parity waits), named barriers, `__syncthreads` and cluster barriers. The TMA unit
lands a load at once, its box's bytes on the barrier of each block it is for. Warps run in several
random orders (`seeds`), and clusters once more with block 0 running ahead as far as the protocol
lets it. A run must finish (no deadlock); every mbarrier wait must pass on exactly the phase it is
for (or the one it last passed); no load may land in a stage a consumer warp has waited for and not
yet freed; no block may be signalled after it exited; and every shared-memory access of a warp
(stores, loads, wgmma operand tiles, TMA boxes) must be ordered by some chain of barriers after the
other warps' conflicting accesses (vector clocks).

Blocks checked by default: the first, the last, and the last along each grid dimension (a causal
mask or a persistent loop gives them different iteration counts); in a clustered kernel each with
its cluster's other block. Kernels whose grid or loops depend on a dynamic shape are skipped with a
warning (their sizes are not known at compile time), and so are kernels whose loops run a count read
from memory (a sequence length from a tensor: flash decoding). A boolean read from a global tensor
(a block-sparse mask) takes a random value per element and run, the same for all warps. The check
takes seconds per kernel: about two per block and warp order for a GEMM of 64 iterations over K.
"""

from __future__ import annotations

import logging
import random

import tvm_ffi
from tvm import ir, tirx

from tilelang.analysis.block_state import BlockState, DataDependent, ProtocolError, link_cluster
from tilelang.analysis.block_values import call_name, device_call
from tilelang.analysis.warp_agent import run_warp
from tilelang.errors import CompilerError
from tilelang.utils.ir import collect

logger = logging.getLogger("tilelang")

_AXES = ("blockIdx.x", "blockIdx.y", "blockIdx.z")


def run_block(kernel: tirx.PrimFunc, block, seed: int) -> None:
    """Interprets one block of `kernel` (its index `block`, a tuple (x, y, z) or shorter) in the
    warp order `seed` picks; raises ProtocolError on the first problem."""
    run_cluster(kernel, [block], seed)


def run_cluster(kernel: tirx.PrimFunc, blocks, seed: int, lead: bool = False) -> None:
    """Interprets the blocks of one cluster (one or two blocks, `blocks` in rank order). With
    `lead`, block 0 runs whenever it can and block 1 only while block 0 waits: block 0 gets as far
    ahead as the protocol lets it."""
    threads = threads_of(kernel)
    box_bytes = _box_bytes(kernel)
    consumers = _consumer_threads(kernel, threads)
    states = [BlockState(threads, rank, box_bytes, consumers) for rank in range(len(blocks))]
    link_cluster(states)
    agents = {}
    for rank, (state, index) in enumerate(zip(states, blocks)):
        for tx in range(0, threads, 32):
            env = {"block": _block_env(index), "rank": rank, "seed": seed}
            agents[(rank, tx)] = (run_warp(kernel.body, env, state, tx, {}), [None])
    rng = random.Random(seed)
    while agents:
        progressed = False
        order = list(agents)
        rng.shuffle(order)
        if lead:
            order.sort(key=lambda k: k[0])
        for key in order:
            if lead and progressed and key[0] == 1:
                break  # block 0 moved: give it the next round too
            gen, blocked = agents[key]
            if blocked[0] is not None and not blocked[0]():
                continue
            progressed = True
            try:
                blocked[0] = next(gen)
            except StopIteration:
                del agents[key]
                if not any(rank == key[0] for rank, _ in agents):
                    states[key[0]].exited = True
        if not progressed:
            stuck = sorted(f"block {rank} warp {tx // 32}" for rank, tx in agents)
            raise ProtocolError(f"deadlock: {', '.join(stuck)} wait forever")


def kernel_problems(kernel: tirx.PrimFunc, blocks=None, seeds: int = 3) -> list[str]:
    """The problems of one device kernel, run for each of `blocks` (block indices, each a tuple;
    default: see the module docstring) in `seeds` warp orders. In a clustered kernel each block
    runs with its cluster's other block, and once more with block 0 ahead."""
    dim = cluster_dim(kernel)
    if blocks is None:
        blocks = _default_blocks(grid_of(kernel))
    groups = [[_full(b)] if dim is None else _cluster_of(_full(b), dim) for b in blocks]
    runs = []
    for group in dict.fromkeys(tuple(g) for g in groups):
        runs += [(group, seed, False) for seed in range(seeds)] + ([(group, 0, True)] if dim is not None else [])
    problems, seen = [], set()
    for group, seed, lead in runs:
        try:
            run_cluster(kernel, group, seed, lead)
        except DataDependent as err:
            logger.warning("barrier-protocol check: kernel '%s' not checked: %s", _name(kernel), err)
            return []
        except ProtocolError as err:
            if str(err) in seen:
                continue
            seen.add(str(err))
            where = " and ".join(str(b) for b in group)
            order = "block 0 ahead" if lead else f"warp order {seed}"
            problems.append(f"kernel '{_name(kernel)}', block{'s' if len(group) > 1 else ''} {where} ({order}): {err}")
    return problems


def barrier_protocol_problems(lowered, blocks=None, seeds: int = 3) -> list[str]:
    """The problems found in every kernel of `lowered` (what `lower()` returns, its device
    IRModule, or one device PrimFunc) that synchronizes through mbarriers; [] when there are none."""
    problems = []
    for kernel in _kernels(lowered):
        if not uses_mbarriers(kernel):
            continue
        unknown = [p.name for p in kernel.params if not _is_handle(p)] + [
            a for a, n in grid_of(kernel).items() if n is None
        ]
        if unknown:
            logger.warning(
                "barrier-protocol check: kernel '%s' not checked: it depends on %s, not known at compile time",
                _name(kernel),
                ", ".join(unknown),
            )
            continue
        problems += kernel_problems(kernel, blocks, seeds)
    return problems


def check_barrier_protocol(lowered, blocks=None, seeds: int = 3) -> None:
    """Raises a CompilerError listing the problems `barrier_protocol_problems` finds, if any."""
    problems = barrier_protocol_problems(lowered, blocks, seeds)
    if problems:
        raise CompilerError(
            "barrier-protocol check (tl.check_barrier_protocol) failed:\n"
            + "\n".join(f"  - {p}" for p in problems)
            + "\nWith hand-written barriers (T.alloc_barrier, T.barrier_wait) the mistake may be the kernel's; "
            "otherwise this is a compiler bug."
        )


# ---- facts of a lowered kernel ----------------------------------------------------------------


def threads_of(kernel) -> int:
    """The block's thread count (threadIdx.x's extent)."""
    out = []

    def on_attr(a):
        if a.attr_key == "thread_extent" and a.node.thread_tag == "threadIdx.x":
            out.append(int(a.value))

    tvm_ffi.structural_walk(kernel.body, [(tirx.AttrStmt, on_attr)])
    return out[0]


def grid_of(kernel) -> dict:
    """{blockIdx axis: its extent, None where not a constant} for the axes the kernel launches."""
    out = {}
    for a in collect(kernel.body, tirx.AttrStmt):
        if a.attr_key == "thread_extent" and a.node.thread_tag in _AXES:
            out[a.node.thread_tag] = int(a.value.value) if isinstance(a.value, tirx.IntImm) else None
    return out


def cluster_dim(kernel) -> int | None:
    """The grid axis (0, 1, 2) along which the kernel's 2-block clusters pair blocks, or None."""
    for ev in collect(kernel.body, tirx.Evaluate):
        found = device_call(ev)
        if found is not None and found[0] == "tl::cluster_dims":
            return list(found[1]).index(2)
    return None


def uses_mbarriers(kernel) -> bool:
    return any(call_name(ev) == "tl::mbarrier_init" for ev in collect(kernel.body, tirx.Evaluate))


def _box_bytes(kernel):
    """[(TMA load call, bytes of its box)]: a tile's expect_tx announces the whole tile; the loads
    after it are its boxes (a multicast load issues half of them, the other block the rest)."""
    out = []

    def on_seq(seq):
        stmts = list(seq.seq)
        for j, st in enumerate(stmts):
            expect = device_call(st)
            if expect is None or expect[0] not in ("tl::mbarrier_arrive_expect_tx", "tl::mbarrier_expect_tx"):
                continue
            loads = []
            for nxt in stmts[j + 1 :]:
                if call_name(nxt) not in ("tl::tma_load", "tl::tma_load_multicast"):
                    break
                loads.append(nxt)
            boxes = sum(2 if call_name(c) == "tl::tma_load_multicast" else 1 for c in loads)
            out.extend((c.value, int(expect[2][1].value) // boxes) for c in loads)

    tvm_ffi.structural_walk(kernel.body, [(tirx.SeqStmt, on_seq)])
    return out


def _consumer_threads(kernel, threads) -> int | None:
    """Threads below the producer warpgroup; None without one (thread 0 then loads ahead and block
    barriers free the stages: no reads are held per stage)."""
    found = []

    def on_call(call):
        if call_name(call) == "tl::setmaxnreg_dec":
            found.append(threads - 128)

    tvm_ffi.structural_walk(kernel.body, [(ir.Call, on_call)])
    return found[0] if found else None


# ---- blocks, kernels -------------------------------------------------------------------------


def _full(block) -> tuple:
    """A block index as (x, y, z)."""
    block = (block,) if isinstance(block, int) else tuple(block)
    return block + (0,) * (3 - len(block))


def _block_env(block) -> dict:
    return dict(zip(_AXES, _full(block)))


def _default_blocks(grid) -> list:
    extents = [grid.get(a) or 1 for a in _AXES]
    blocks = [(0, 0, 0), tuple(n - 1 for n in extents)]
    blocks += [tuple(n - 1 if d == axis else 0 for d, n in enumerate(extents)) for axis in range(3)]
    return list(dict.fromkeys(blocks))


def _cluster_of(block, dim) -> list:
    """The two blocks of `block`'s cluster along axis `dim`, in rank order."""
    first = block[dim] - block[dim] % 2
    return [tuple(first + r if d == dim else v for d, v in enumerate(block)) for r in range(2)]


def _kernels(lowered) -> list:
    if isinstance(lowered, tirx.PrimFunc):
        return [lowered]
    mod = getattr(lowered, "device_mod", lowered)
    return [f for _, f in mod.functions.items() if isinstance(f, tirx.PrimFunc)]


def _name(kernel) -> str:
    return str(kernel.attrs["global_symbol"]) if kernel.attrs and "global_symbol" in kernel.attrs else "kernel"


def _is_handle(param) -> bool:
    """A pointer or TMA descriptor; a scalar parameter is a dynamic shape."""
    return not isinstance(param.ty, ir.PrimType)

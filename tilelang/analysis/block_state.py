"""The state the barrier-protocol interpreter keeps for one thread block: its barriers and what its
warps did to shared memory.

`tilelang.analysis.barrier_protocol` runs a lowered kernel one warp at a time; every barrier call a
warp makes lands here. An mbarrier counts arrivals and transaction bytes (a TMA box's bytes count
down when it lands) and completes a phase when both are done; a named barrier (and `__syncthreads`,
id 0, and a cluster's barrier) completes a generation when its thread count has arrived.

Shared-memory races are found with vector clocks. Each warp carries a clock {warp: count}. Arriving
on a barrier releases the warp's clock into the phase (or generation) being completed and starts a
new count; passing a wait acquires the clocks of the phase it waited for; a TMA box carries its
issuer's clock. Every shared access is recorded per 16-byte granule with the accessing warp's count:
a read of another warp's write, or a write over another warp's read or write, must see that count in
its own clock (some chain of barriers leads from one to the other), or it is a race.
"""

from __future__ import annotations

GRANULE = 16  # bytes: the width of the widest store of one thread


class ProtocolError(Exception):
    """A kernel broke the barrier protocol (deadlock, a stage refilled while read, a signal after
    exit, a race on shared memory), or did something the interpreter cannot follow."""


class DataDependent(ProtocolError):
    """The kernel's control flow depends on values read from memory (a loop running as many times as
    a tensor says): one block cannot be run without them, so the kernel is not checked."""


class BlockState:
    """The synchronization state of one thread block (of a cluster of one or two).

    `consumer_threads`: the threads below the producer warpgroup, or None when there is none; a
    consumer warp that passes a `*_full` wait holds that stage until it arrives on the stage's
    empty barrier, and a TMA box landing in a held stage is an error.
    """

    def __init__(self, threads, rank=0, box_bytes=(), consumer_threads=None):
        self.threads = threads
        self.rank = rank
        self.consumer_threads = consumer_threads
        # (buffer name, index) -> [expected arrivals, arrivals so far, completed phases, pending bytes]
        self.mbar = {}
        self.named = {}  # barrier id -> [threads arrived, generation, clock so far, {generation: clock}]
        self.peer = None  # the other block of a 2-block cluster
        self.cluster_named = self.named  # barriers over the whole cluster (cluster_sync)
        self.box_bytes = box_bytes  # [(TMA load call, bytes of its box)]
        self.holds = {}  # (buffer name, index) of a full barrier -> warps reading that stage
        self.exited = False
        self.clocks = {}  # warp (rank, tx) -> vector clock {warp: count}; shared by a cluster's blocks
        self.released = {}  # mbarrier -> clock of the phase being completed
        self.phase_clock = {}  # (mbarrier, phases completed) -> clock that phase released
        self.written = {}  # shared granule -> (warp, its count at the write)
        self.read = {}  # shared granule -> {warp: its count at the read}

    def _state(self, bar):
        if self.exited:
            raise ProtocolError(f"block {self.rank} is signalled on {bar} after it exited")
        if bar not in self.mbar:
            raise ProtocolError(f"arrival on {bar} before its initialization")
        return self.mbar[bar]

    def _settle(self, bar, state):
        if state[1] == state[0] and state[3] == 0:
            state[1], state[2] = 0, state[2] + 1
            self.phase_clock[(bar, state[2])] = self.released.pop(bar, {})

    def arrive(self, bar, expect_bytes=0, clock=None):
        state = self._state(bar)
        join(self.released.setdefault(bar, {}), clock or {})
        state[1] += 1
        state[3] += expect_bytes
        self._settle(bar, state)

    def expect(self, bar, expect_bytes):
        """Bytes announced on `bar` without an arrival (`mbarrier.expect_tx`)."""
        self._state(bar)[3] += expect_bytes

    def land(self, bar, nbytes, clock=None):
        """A TMA box lands in this block: its bytes complete on `bar` (taken to land at once), and
        with them the clock of the warp that issued the load."""
        state = self._state(bar)
        join(self.released.setdefault(bar, {}), clock or {})
        if self.holds.get(bar):
            raise ProtocolError(
                f"a load lands on {bar} of block {self.rank} while warps {sorted(self.holds[bar])} still "
                f"read that stage: a stage was refilled before it was freed"
            )
        state[3] -= nbytes
        self._settle(bar, state)

    def named_arrive(self, bar_id, count, table=None, clock=None):
        """A warp arrives on a named barrier; returns the generation it waits to complete (whose
        clock, the join of every arriving warp's, is `table[bar_id][3][generation]`)."""
        table = self.named if table is None else table
        state = table.setdefault(bar_id, [0, 0, {}, {}])
        state[0] += 32
        join(state[2], clock or {})
        generation = state[1]
        if state[0] == count:
            state[3][generation] = state[2]
            state[0], state[1], state[2] = 0, state[1] + 1, {}
        return generation

    def release(self, tx, empty):
        """A consumer warp frees a stage (arrives on an empty barrier): it no longer reads the tiles
        of that stage, the tiles whose names the barrier carries (joined by "__":
        `A_shared__B_shared_empty`) or, for a barrier named after the loop (`k_empty`), every tile of
        the stage."""
        name, index = empty
        tiles = name[: -len("_empty")].split("__")
        held = [bar for bar in self.holds if bar[1] == index and tx // 32 in self.holds[bar]]
        named = [bar for bar in held if bar[0] in {f"{t}_full" for t in tiles}]
        for bar in named or held:
            self.holds[bar].discard(tx // 32)


def link_cluster(blocks) -> None:
    """Makes the blocks of a 2-block cluster each other's peer, sharing the cluster barrier and the
    warps' clocks (a block's clock may reach the other through a remote arrival or a multicast)."""
    if len(blocks) == 2:
        blocks[0].cluster_named = blocks[1].cluster_named = {}
        blocks[0].peer, blocks[1].peer = blocks[1], blocks[0]
        blocks[1].clocks = blocks[0].clocks


# ---- shared-memory races: vector clocks carried by the barriers ------------------------------


def join(into, clock):
    for warp, count in clock.items():
        if into.get(warp, 0) < count:
            into[warp] = count


def clock_of(block, warp):
    return block.clocks.setdefault(warp, {warp: 1})


def tick(block, warp):
    """The warp's clock after it released its present one (an arrival on some barrier)."""
    clock = clock_of(block, warp)
    released = dict(clock)
    clock[warp] += 1
    return released


def access(block, warp, start, nbytes, write, what):
    """Warp `warp` reads or writes bytes [start, start + nbytes) of the block's shared memory."""
    clock = clock_of(block, warp)
    now = clock[warp]

    def unordered(other, count):
        return other != warp and clock.get(other, 0) < count

    for g in range(start // GRANULE, (start + max(nbytes, 1) - 1) // GRANULE + 1):
        last = block.written.get(g)
        if last is not None and unordered(*last):
            raise ProtocolError(
                f"shared-memory race in block {block.rank}: warp {warp[1] // 32} {'writes' if write else 'reads'} "
                f"{what} (byte {g * GRANULE}), which warp {last[0][1] // 32} wrote with no barrier in between"
            )
        readers = block.read.setdefault(g, {})
        if write:
            for other, count in readers.items():
                if unordered(other, count):
                    raise ProtocolError(
                        f"shared-memory race in block {block.rank}: warp {warp[1] // 32} writes {what} "
                        f"(byte {g * GRANULE}) while warp {other[1] // 32} may still read it (no barrier in between)"
                    )
            block.written[g] = (warp, now)
            readers.clear()
        else:
            readers[warp] = now

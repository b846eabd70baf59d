// Hopper (sm_90a) pipeline primitives: TMA tile loads, mbarriers, warp-role register budgets and
// named barriers (PTX ISA: "cp.async.bulk.tensor", "mbarrier", "setmaxnreg", "bar.sync").
//
// A pipelined loop on sm_90a (tilelang/transform/pipeline_tma.py) keeps, per pipeline stage, one
// "full" mbarrier per producer copy (the TMA load completes its transaction bytes on it) and one
// "empty" mbarrier (the consumers arrive on it once they no longer read the stage). A barrier's
// phase flips each time it completes, so waiting for use number u of a stage waits for parity
// u & 1.
#pragma once

#include <cuda.h>  // CUtensorMap: the descriptor the launcher encodes and passes as a __grid_constant__

#include "common.h"

namespace tl {

TL_DEVICE uint32_t shared_address(const void* p) { return static_cast<uint32_t>(__cvta_generic_to_shared(p)); }

// ---- mbarriers -------------------------------------------------------------------------------------

// `count` arrivals complete a phase, once the bytes announced to it (expect_tx) have landed too.
TL_DEVICE void mbarrier_init(uint64_t* bar, uint32_t count) {
  asm volatile("mbarrier.init.shared::cta.b64 [%0], %1;\n" ::"r"(shared_address(bar)), "r"(count) : "memory");
}

// Make initialized barriers visible to the async proxy (TMA completes transactions on them).
TL_DEVICE void fence_barrier_init() { asm volatile("fence.mbarrier_init.release.cluster;\n" ::: "memory"); }

// Block until the phase with parity `parity` has completed.
TL_DEVICE void mbarrier_wait(uint64_t* bar, uint32_t parity) {
  const uint32_t addr = shared_address(bar);
  uint32_t done;
  do {
    asm volatile(
        "{\n"
        ".reg .pred p;\n"
        "mbarrier.try_wait.parity.shared::cta.b64 p, [%1], %2;\n"
        "selp.u32 %0, 1, 0, p;\n"
        "}\n"
        : "=r"(done)
        : "r"(addr), "r"(parity)
        : "memory");
  } while (!done);
}

TL_DEVICE void mbarrier_arrive(uint64_t* bar) {
  asm volatile("mbarrier.arrive.shared::cta.b64 _, [%0];\n" ::"r"(shared_address(bar)) : "memory");
}

// One arrival per warp, once every lane of the warp is done (the barrier counts warps).
TL_DEVICE void mbarrier_arrive_warp(uint64_t* bar) {
  __syncwarp();
  if ((threadIdx.x & 31) == 0) mbarrier_arrive(bar);
}

// ---- 2-CTA clusters (a tile both CTAs read is loaded once, half by each, multicast to both) ----

// Marks a kernel launched in clusters of X x Y x Z blocks: the code generator puts
// `__cluster_dims__(X, Y, Z)` on the kernel that calls it (tilelang/codegen/cuda.py).
template <int X, int Y, int Z>
TL_DEVICE void cluster_dims() {}

// This block's rank in its cluster.
TL_DEVICE int cluster_rank() {
  uint32_t rank;
  asm volatile("mov.u32 %0, %%cluster_ctarank;\n" : "=r"(rank));
  return static_cast<int>(rank);
}

// Every thread of every block of the cluster: after barrier initialization (the peers' barriers
// exist before anyone signals them) and before exit (no peer still signals this block's barriers).
TL_DEVICE void cluster_sync() {
  asm volatile("barrier.cluster.arrive.release.aligned;\nbarrier.cluster.wait.acquire.aligned;\n" ::: "memory");
}

// One arrival per warp on `bar` in this block and on the same barrier in the other block of a
// 2-block cluster (its consumers free a stage both blocks' loads fill).
TL_DEVICE void mbarrier_arrive_cluster_warp(uint64_t* bar) {
  __syncwarp();
  if ((threadIdx.x & 31) == 0) {
    const uint32_t local = shared_address(bar);
    uint32_t remote;
    asm volatile("mapa.shared::cluster.u32 %0, %1, %2;\n" : "=r"(remote) : "r"(local), "r"(cluster_rank() ^ 1));
    asm volatile("mbarrier.arrive.shared::cta.b64 _, [%0];\n" ::"r"(local) : "memory");
    asm volatile("mbarrier.arrive.shared::cluster.b64 _, [%0];\n" ::"r"(remote) : "memory");
  }
}

// Arrive once and announce `bytes` of transactions (the TMA loads of this phase) still to come.
TL_DEVICE void mbarrier_arrive_expect_tx(uint64_t* bar, uint32_t bytes) {
  asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;\n" ::"r"(shared_address(bar)), "r"(bytes)
               : "memory");
}

// Announce `bytes` of transactions still to come in the current phase, without arriving (the
// user's T.tma_copy: its threads arrive themselves, T.barrier_arrive).
TL_DEVICE void mbarrier_expect_tx(uint64_t* bar, uint32_t bytes) {
  asm volatile("mbarrier.expect_tx.relaxed.cta.shared::cta.b64 [%0], %1;\n" ::"r"(shared_address(bar)), "r"(bytes)
               : "memory");
}

// ---- TMA ---------------------------------------------------------------------------------------------

TL_DEVICE void prefetch_tensor_map(const CUtensorMap& map) {
  asm volatile("prefetch.tensormap [%0];\n" ::"l"(reinterpret_cast<uint64_t>(&map)) : "memory");
}

// Load the box at coordinates (innermost dimension first) of `map` into shared `dst`; its bytes
// complete on `bar`. Out-of-bounds elements of the box are written as zeros.
template <typename... Coords>
TL_DEVICE void tma_load(const CUtensorMap& map, uint64_t* bar, void* dst, Coords... coords) {
  constexpr int rank = sizeof...(Coords);
  static_assert(rank >= 1 && rank <= 5, "TMA tensors have 1 to 5 dimensions");
  const uint64_t desc = reinterpret_cast<uint64_t>(&map);
  const uint32_t smem = shared_address(dst), mbar = shared_address(bar);
  const int32_t c[5] = {static_cast<int32_t>(coords)...};
  if constexpr (rank == 1) {
    asm volatile(
        "cp.async.bulk.tensor.1d.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1, {%3}], [%2];\n" ::"r"(
            smem),
        "l"(desc), "r"(mbar), "r"(c[0])
        : "memory");
  } else if constexpr (rank == 2) {
    asm volatile(
        "cp.async.bulk.tensor.2d.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1, {%3, %4}], [%2];\n" ::"r"(
            smem),
        "l"(desc), "r"(mbar), "r"(c[0]), "r"(c[1])
        : "memory");
  } else if constexpr (rank == 3) {
    asm volatile(
        "cp.async.bulk.tensor.3d.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1, {%3, %4, %5}], "
        "[%2];\n" ::"r"(smem),
        "l"(desc), "r"(mbar), "r"(c[0]), "r"(c[1]), "r"(c[2])
        : "memory");
  } else if constexpr (rank == 4) {
    asm volatile(
        "cp.async.bulk.tensor.4d.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1, {%3, %4, %5, %6}], "
        "[%2];\n" ::"r"(smem),
        "l"(desc), "r"(mbar), "r"(c[0]), "r"(c[1]), "r"(c[2]), "r"(c[3])
        : "memory");
  } else {
    asm volatile(
        "cp.async.bulk.tensor.5d.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1, {%3, %4, %5, %6, "
        "%7}], [%2];\n" ::"r"(smem),
        "l"(desc), "r"(mbar), "r"(c[0]), "r"(c[1]), "r"(c[2]), "r"(c[3]), "r"(c[4])
        : "memory");
  }
}

// tma_load into the same shared address of every block in `mask` (bits: cluster ranks); the bytes
// complete on the barrier at `bar`'s address in each of them.
template <typename... Coords>
TL_DEVICE void tma_load_multicast(const CUtensorMap& map, uint64_t* bar, void* dst, uint16_t mask, Coords... coords) {
  constexpr int rank = sizeof...(Coords);
  static_assert(rank >= 1 && rank <= 5, "TMA tensors have 1 to 5 dimensions");
  const uint64_t desc = reinterpret_cast<uint64_t>(&map);
  const uint32_t smem = shared_address(dst), mbar = shared_address(bar);
  const int32_t c[5] = {static_cast<int32_t>(coords)...};
#define TL_TMA_MULTICAST(DIMS, COORDS, ...)                                                              \
  asm volatile("cp.async.bulk.tensor." DIMS ".shared::cluster.global.mbarrier::complete_tx::bytes"       \
               ".multicast::cluster [%0], [%1, {" COORDS "}], [%2], %3;\n" ::"r"(smem),                  \
               "l"(desc), "r"(mbar), "h"(mask), __VA_ARGS__                                               \
               : "memory")
  if constexpr (rank == 1) {
    TL_TMA_MULTICAST("1d", "%4", "r"(c[0]));
  } else if constexpr (rank == 2) {
    TL_TMA_MULTICAST("2d", "%4, %5", "r"(c[0]), "r"(c[1]));
  } else if constexpr (rank == 3) {
    TL_TMA_MULTICAST("3d", "%4, %5, %6", "r"(c[0]), "r"(c[1]), "r"(c[2]));
  } else if constexpr (rank == 4) {
    TL_TMA_MULTICAST("4d", "%4, %5, %6, %7", "r"(c[0]), "r"(c[1]), "r"(c[2]), "r"(c[3]));
  } else {
    TL_TMA_MULTICAST("5d", "%4, %5, %6, %7, %8", "r"(c[0]), "r"(c[1]), "r"(c[2]), "r"(c[3]), "r"(c[4]));
  }
#undef TL_TMA_MULTICAST
}

// ---- warp roles ------------------------------------------------------------------------------------

// Give this warpgroup's registers back (producer) or take more (consumers): every warp of the
// warpgroup executes it with the same count.
template <int Registers>
TL_DEVICE void setmaxnreg_dec() {
  asm volatile("setmaxnreg.dec.sync.aligned.u32 %0;\n" ::"n"(Registers));
}

template <int Registers>
TL_DEVICE void setmaxnreg_inc() {
  asm volatile("setmaxnreg.inc.sync.aligned.u32 %0;\n" ::"n"(Registers));
}

// Two consumer warpgroups take turns issuing their wgmma gemms (FlashAttention-3's "ping-pong"):
// warpgroup w waits on named barrier TL_PINGPONG_BARRIER + w before its gemms and, once they are
// issued, lets the other go (TL_PINGPONG_BARRIER + 1 - w); so the tensor cores run one warpgroup's
// gemms while the other computes its softmax. Warpgroup 1 lets warpgroup 0 go first. Barriers over
// both warpgroups (256 threads). The ids are tilelang/transform/barrier_ids.py's PINGPONG.
#define TL_PINGPONG_BARRIER 2
static_assert(TL_PINGPONG_BARRIER + 1 < 4, "ids 4-15 are the thread branches' (barrier_ids.py)");

TL_DEVICE void pingpong_init() {
  if (threadIdx.x / 128 == 1) asm volatile("bar.arrive %0, 256;\n" ::"n"(TL_PINGPONG_BARRIER) : "memory");
}

TL_DEVICE void pingpong_sync() {
  asm volatile("bar.sync %0, 256;\n" ::"r"(TL_PINGPONG_BARRIER + threadIdx.x / 128) : "memory");
}

TL_DEVICE void pingpong_arrive() {
  asm volatile("bar.arrive %0, 256;\n" ::"r"(TL_PINGPONG_BARRIER + 1 - threadIdx.x / 128) : "memory");
}

// Shared memory written by ordinary stores becomes visible to async-proxy reads (wgmma, TMA).
TL_DEVICE void fence_proxy_async_shared() { asm volatile("fence.proxy.async.shared::cta;\n" ::: "memory"); }

}  // namespace tl

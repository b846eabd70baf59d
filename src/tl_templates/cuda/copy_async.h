// Asynchronous global-to-shared copies (cp.async, sm_80+) for software-pipelined loops: one
// copy per 4, 8 or 16 bytes, grouped with commit, waited for with wait_group.
#pragma once

#include "common.h"

namespace tl {

// Copy `Bytes` from global `src` to shared `dst`; when `valid` is false, write zeros instead
// (src-size 0: PTX ISA, "cp.async").
template <int Bytes>
TL_DEVICE void cp_async(void* dst, const void* src, bool valid) {
  static_assert(Bytes == 4 || Bytes == 8 || Bytes == 16, "cp.async copies 4, 8 or 16 bytes");
  unsigned int smem = static_cast<unsigned int>(__cvta_generic_to_shared(dst));
  int src_size = valid ? Bytes : 0;
  if constexpr (Bytes == 16) {
    // .cg: bypass L1 (the tile is read once from shared memory); L2::128B: fetch whole lines.
    asm volatile("cp.async.cg.shared.global.L2::128B [%0], [%1], 16, %2;\n" ::"r"(smem), "l"(src), "r"(src_size));
  } else {
    asm volatile("cp.async.ca.shared.global [%0], [%1], %2, %3;\n" ::"r"(smem), "l"(src), "n"(Bytes),
                 "r"(src_size));
  }
}

// Close the group of copies issued since the last commit.
TL_DEVICE void cp_async_commit() { asm volatile("cp.async.commit_group;\n" ::); }

// Wait until at most `Pending` groups are still in flight.
template <int Pending>
TL_DEVICE void cp_async_wait() {
  asm volatile("cp.async.wait_group %0;\n" ::"n"(Pending));
}

}  // namespace tl

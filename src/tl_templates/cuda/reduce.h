// Warp-level helpers for tile reductions: butterfly exchange of a value between lanes.
#pragma once

#include "common.h"

namespace tl {

// The value held by lane (laneid ^ offset) of the calling warp; all 32 lanes must call it.
template <typename T>
TL_DEVICE T shfl_xor(T value, int offset) {
  return __shfl_xor_sync(0xffffffffu, value, offset);
}

// Half and bfloat16 travel as 16-bit payloads of a 32-bit shuffle.
template <>
TL_DEVICE half shfl_xor(half value, int offset) {
  unsigned short bits = __half_as_ushort(value);
  unsigned int moved = __shfl_xor_sync(0xffffffffu, static_cast<unsigned int>(bits), offset);
  return __ushort_as_half(static_cast<unsigned short>(moved));
}

template <>
TL_DEVICE __nv_bfloat16 shfl_xor(__nv_bfloat16 value, int offset) {
  unsigned short bits = __bfloat16_as_ushort(value);
  unsigned int moved = __shfl_xor_sync(0xffffffffu, static_cast<unsigned int>(bits), offset);
  return __ushort_as_bfloat16(static_cast<unsigned short>(moved));
}

}  // namespace tl

// Common definitions every generated kernel includes: integer types, half/bfloat16/fp8 types,
// and the small device helpers the code generator may call.
#pragma once

#include <cuda_runtime.h>
#include <cuda_fp16.h>
#include <cuda_bf16.h>
#include <cstdint>

#if defined(__CUDACC__) && (__CUDACC_VER_MAJOR__ >= 12)
#include <cuda_fp8.h>
#endif

#define TL_DEVICE __forceinline__ __device__

namespace tl {

// Integer ceiling division, for index arithmetic in templates.
template <typename T>
TL_DEVICE constexpr T ceil_div(T a, T b) {
  return (a + b - 1) / b;
}

}  // namespace tl

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

// A barrier over `Threads` threads only, `bar.sync Id`: the consumers of a warp-specialized kernel
// (the producer warps keep running), or the threads of an `if tx < n` branch. Which id serves
// what: tilelang/transform/barrier_ids.py (0 is __syncthreads()'s).
template <int Id, int Threads>
TL_DEVICE void named_barrier_sync() {
  static_assert(Id >= 0 && Id < 16, "a block has 16 named barriers, 0-15");
  static_assert(Threads % 32 == 0, "a named barrier counts whole warps");
  asm volatile("bar.sync %0, %1;\n" ::"n"(Id), "n"(Threads) : "memory");
}

// Integer ceiling division, for index arithmetic in templates.
template <typename T>
TL_DEVICE constexpr T ceil_div(T a, T b) {
  return (a + b - 1) / b;
}

}  // namespace tl

// TVM's code generator holds 8 x float32 vectors (256 bits, e.g. fp16 loads widened to fp32) in
// a ulonglong4 and builds a broadcast with make_ulonglong4 of eight floats: provide that overload.
__host__ __device__ inline ulonglong4 make_ulonglong4(float a0, float a1, float a2, float a3, float a4, float a5,
                                                      float a6, float a7) {
  ulonglong4 out;
  float2* lanes = reinterpret_cast<float2*>(&out);
  lanes[0] = make_float2(a0, a1);
  lanes[1] = make_float2(a2, a3);
  lanes[2] = make_float2(a4, a5);
  lanes[3] = make_float2(a6, a7);
  return out;
}

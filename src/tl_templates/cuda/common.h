// Common definitions every generated kernel includes: integer types, half/bfloat16/fp8 types,
// and the small device helpers the code generator may call.
#pragma once

#include <cuda_runtime.h>
#include <cuda_fp16.h>
#include <cuda_bf16.h>
#include <cstdint>
#include <type_traits>

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

// T.exp2 of a float on the special function unit: PTX ex2.approx.ftz.f32, one MUFU instruction
// (relative error about 2^-22; results below 2^-126 flush to zero). What T.exp2 becomes by default
// (tilelang/transform/use_fast_exp2.py); exp2f adds a range check and two multiplies around it.
TL_DEVICE float fast_exp2(float x) {
  float y;
  asm("ex2.approx.ftz.f32 %0, %1;" : "=f"(y) : "f"(x));
  return y;
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

// The same for integer vectors: TVM holds 8 x int8 in an int2, 16 x int8 in an int4, 8 x int16 in
// an int4, 8 x int32 in a longlong4 (and the unsigned alike), and builds their broadcasts with that
// type's make_ function of every lane: make_longlong4(-1, -1, -1, -1, -1, -1, -1, -1). These
// overloads take exactly that many lanes (never CUDA's own count) and store them in lane order.
namespace tl {
template <typename Vec, typename Lane, typename... Ts>
__host__ __device__ inline Vec pack_lanes(Ts... lanes) {
  static_assert(sizeof(Vec) == sizeof...(Ts) * sizeof(Lane), "the lanes must fill the vector exactly");
  static_assert((std::is_arithmetic<Ts>::value && ...), "a lane is a number");
  union {
    Lane lane[sizeof...(Ts)];
    Vec vec;
  } u = {{static_cast<Lane>(lanes)...}};
  return u.vec;
}
template <int N, typename... Ts>
using if_lanes = std::enable_if_t<sizeof...(Ts) == N, int>;
}  // namespace tl

template <typename... Ts, tl::if_lanes<8, Ts...> = 0>
__host__ __device__ inline int2 make_int2(Ts... lanes) {
  return tl::pack_lanes<int2, signed char>(lanes...);
}
template <typename... Ts, tl::if_lanes<8, Ts...> = 0>
__host__ __device__ inline uint2 make_uint2(Ts... lanes) {
  return tl::pack_lanes<uint2, unsigned char>(lanes...);
}
template <typename... Ts, std::enable_if_t<sizeof...(Ts) == 8 || sizeof...(Ts) == 16, int> = 0>
__host__ __device__ inline int4 make_int4(Ts... lanes) {  // 8 x int16 or 16 x int8
  return tl::pack_lanes<int4, std::conditional_t<sizeof...(Ts) == 8, short, signed char>>(lanes...);
}
template <typename... Ts, std::enable_if_t<sizeof...(Ts) == 8 || sizeof...(Ts) == 16, int> = 0>
__host__ __device__ inline uint4 make_uint4(Ts... lanes) {  // 8 x uint16 or 16 x uint8
  return tl::pack_lanes<uint4, std::conditional_t<sizeof...(Ts) == 8, unsigned short, unsigned char>>(lanes...);
}
template <typename... Ts, tl::if_lanes<8, Ts...> = 0>
__host__ __device__ inline longlong4 make_longlong4(Ts... lanes) {
  return tl::pack_lanes<longlong4, int>(lanes...);
}
// 8 x uint32; eight floats take the non-template overload above (an exact match is preferred to a
// template), eight unsigned ints this one (an exact match is preferred to converting to float).
template <typename... Ts, tl::if_lanes<8, Ts...> = 0>
__host__ __device__ inline ulonglong4 make_ulonglong4(Ts... lanes) {
  return tl::pack_lanes<ulonglong4, unsigned int>(lanes...);
}

// Element-wise conversions of vectors (tl::vec_cast) and fp8 broadcasts (tl::vec_broadcast), for
// the vector values TVM's code generator would print wrong (tilelang/codegen/vectors.py says which),
// and the float4_e2m1fn codes fp4 tiles and tensors hold (tl::fp4_e2m1_from_float / _to_float).
//
// TVM holds a vector in the CUDA type of its size (8 x fp8 in a uint2, 8 x float in a ulonglong4),
// so `(uint2)(v)` of a float vector does not compile and `(uint2)(v)` of an e4m3 vector into an
// e5m2 one copies the bits. vec_cast<To, From, N>(v) reads the N lanes of v, converts each as the
// scalar cast does (cuda_fp8.h: round to nearest even, saturating to the largest finite value),
// and returns the N converted lanes' bytes, which convert to whatever type TVM holds them in.
// Host and device: the CPU tests check the conversions against torch.
#pragma once

#include "common.h"

#include <cstring>

#define TL_CONVERT_FN __host__ __device__ __forceinline__

namespace tl {

// `Bytes` bytes of a vector, as any type of that size (TVM's uint2, ulonglong4, __nv_fp8x4_e4m3...),
// aligned as a vector of that size is (the largest power of two dividing it, at most 16).
template <int Bytes>
struct alignas((Bytes & -Bytes) < 16 ? (Bytes & -Bytes) : 16) VecBits {
  unsigned char bytes[Bytes];

  template <typename T>
  TL_CONVERT_FN operator T() const {
    static_assert(sizeof(T) == Bytes, "vec_cast: the result goes into a type of another size");
    T value;
    memcpy(&value, bytes, Bytes);
    return value;
  }
};

namespace convert {

template <typename T>
struct Fp8 {  // the x2 type of an fp8 format, or none
  static constexpr bool value = false;
};
#if defined(__CUDACC__) && (__CUDACC_VER_MAJOR__ >= 12)
template <>
struct Fp8<__nv_fp8_e4m3> {
  static constexpr bool value = true;
  using x2 = __nv_fp8x2_e4m3;
};
template <>
struct Fp8<__nv_fp8_e5m2> {
  static constexpr bool value = true;
  using x2 = __nv_fp8x2_e5m2;
};
#endif

// One lane, as the scalar cast `(To)x` of the generated code converts it. Between the two fp8
// formats and from integers the value goes through float (exact for every fp8 value; integers
// past 2^24 saturate in fp8 anyway).
template <typename To, typename From>
TL_CONVERT_FN To lane(From x) {
  if constexpr (Fp8<To>::value && (Fp8<From>::value || std::is_integral<From>::value)) {
    return To(static_cast<float>(x));
  } else if constexpr (Fp8<To>::value) {
    return To(x);
  } else {
    return static_cast<To>(x);
  }
}

// Two lanes at once where cuda_fp8.h has a paired conversion (one cvt instruction on sm_89+ for
// two values); `done` is false where it has none and lanes are converted one by one.
template <typename To, typename From>
TL_CONVERT_FN bool pair(const From* in, To* out) {
  if constexpr (Fp8<To>::value && !Fp8<From>::value) {
    using X2 = typename Fp8<To>::x2;
    X2 packed;
    if constexpr (std::is_same<From, float>::value) {
      packed = X2(make_float2(in[0], in[1]));
    } else if constexpr (std::is_same<From, __half>::value) {
      packed = X2(__halves2half2(in[0], in[1]));
    } else if constexpr (std::is_same<From, __nv_bfloat16>::value) {
      packed = X2(__halves2bfloat162(in[0], in[1]));
    } else {
      return false;
    }
    memcpy(out, &packed, 2);
    return true;
  } else if constexpr (Fp8<From>::value && !Fp8<To>::value) {
    using X2 = typename Fp8<From>::x2;
    X2 packed;
    memcpy(&packed, in, 2);
    if constexpr (std::is_same<To, float>::value) {
      float2 f = static_cast<float2>(packed);
      out[0] = f.x;
      out[1] = f.y;
    } else if constexpr (std::is_same<To, __half>::value) {
      __half2 h = static_cast<__half2>(packed);
      out[0] = __low2half(h);
      out[1] = __high2half(h);
    } else if constexpr (std::is_same<To, __nv_bfloat16>::value) {
      // Exact: every fp8 value is a bfloat16 value.
      float2 f = static_cast<float2>(packed);
      out[0] = __float2bfloat16_rn(f.x);
      out[1] = __float2bfloat16_rn(f.y);
    } else {
      return false;
    }
    return true;
  } else {
    return false;
  }
}

}  // namespace convert

// The N lanes of `src` (a vector of N x From, in whatever type holds it) converted to To.
template <typename To, typename From, int N, typename Src>
TL_CONVERT_FN VecBits<N * sizeof(To)> vec_cast(const Src& src) {
  static_assert(sizeof(Src) == N * sizeof(From), "vec_cast: the source does not hold N lanes of From");
  From in[N];
  To out[N];
  memcpy(in, &src, sizeof(in));
#pragma unroll
  for (int i = 0; i < N; i += 2) {
    if (!(i + 1 < N && convert::pair<To, From>(in + i, out + i))) {
      out[i] = convert::lane<To, From>(in[i]);
      if (i + 1 < N) out[i + 1] = convert::lane<To, From>(in[i + 1]);
    }
  }
  VecBits<N * sizeof(To)> result;
  memcpy(result.bytes, out, sizeof(out));
  return result;
}

// N copies of `x` (TVM has no broadcast of more than 4 fp8 lanes).
template <typename T, int N>
TL_CONVERT_FN VecBits<N * sizeof(T)> vec_broadcast(T x) {
  T lanes[N];
#pragma unroll
  for (int i = 0; i < N; ++i) lanes[i] = x;
  VecBits<N * sizeof(T)> result;
  memcpy(result.bytes, lanes, sizeof(lanes));
  return result;
}

// float4_e2m1fn (tilelang/transform/pack_fp4_tensors.py): a 4-bit code, sign in bit 3, magnitudes
// 0, 0.5, 1, 1.5, 2, 3, 4, 6 for codes 0..7. Rounds to nearest, ties to the even code (as cvt.rn),
// saturating to +-6; NaN becomes +6 (e2m1 has no NaN).
TL_CONVERT_FN unsigned char fp4_e2m1_from_float(float x) {
  unsigned int bits;
  memcpy(&bits, &x, sizeof(bits));
  const unsigned char sign = (bits >> 31) ? 8 : 0;
  const float a = fabsf(x);
  if (!(a == a)) return 7;
  unsigned char code;
  if (a <= 0.25f) code = 0;
  else if (a < 0.75f) code = 1;
  else if (a <= 1.25f) code = 2;
  else if (a < 1.75f) code = 3;
  else if (a <= 2.5f) code = 4;
  else if (a < 3.5f) code = 5;
  else if (a <= 5.0f) code = 6;
  else code = 7;
  return sign | code;
}

// The value of a float4_e2m1fn code (the low 4 bits of `code`).
TL_CONVERT_FN float fp4_e2m1_to_float(unsigned char code) {
  const float magnitude[8] = {0.0f, 0.5f, 1.0f, 1.5f, 2.0f, 3.0f, 4.0f, 6.0f};
  const float a = magnitude[code & 7];
  return (code & 8) ? -a : a;
}

}  // namespace tl

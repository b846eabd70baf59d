// Atomics for T.atomic_add/max/min/addx2/addx4/load/store (any memory order) and the bulk
// shared-to-global add of T.atomic_add(use_tma=True) (sm_90a).
#pragma once

#include <type_traits>

#include "common.h"

namespace tl {

// Memory orders, numbered as tilelang/op/atomic.py's MEMORY_ORDERS (and TileLang's ids).
enum : int { kRelaxed = 0, kConsume = 1, kAcquire = 2, kRelease = 3, kAcqRel = 4, kSeqCst = 5 };

template <typename T>
inline constexpr bool kAlwaysFalse = false;

// An ordered atomic is the relaxed, device-scoped operation (what atomicAdd and friends are: PTX
// `atom` with no .sem is .relaxed, with no scope .gpu) inside the PTX memory model's release and
// acquire patterns: a fence.acq_rel before makes it a release, one after an acquire; fence.sc
// before makes it sequentially consistent (PTX ISA, "Memory Consistency Model", release and
// acquire patterns). ptxas emits the same MEMBAR + ATOM for atom.release.gpu.
template <int Order>
TL_DEVICE void fence_before_atomic() {
  static_assert(Order >= kRelaxed && Order <= kSeqCst, "memory orders are numbered 0 (relaxed) to 5 (seq_cst)");
  if constexpr (Order == kSeqCst) {
    asm volatile("fence.sc.gpu;\n" ::: "memory");
  } else if constexpr (Order == kRelease || Order == kAcqRel) {
    asm volatile("fence.acq_rel.gpu;\n" ::: "memory");
  }
}

template <int Order>
TL_DEVICE void fence_after_atomic() {
  if constexpr (Order == kConsume || Order == kAcquire || Order == kAcqRel || Order == kSeqCst) {
    asm volatile("fence.acq_rel.gpu;\n" ::: "memory");
  }
}

namespace atomic_detail {

// 16-bit compare-and-swap (sm_70+), for the read-modify-writes CUDA has no instruction for.
TL_DEVICE unsigned short cas16(unsigned short* address, unsigned short expected, unsigned short desired) {
  unsigned short old;
  asm volatile("atom.cas.b16 %0, [%1], %2, %3;\n"
               : "=h"(old)
               : "l"(address), "h"(expected), "h"(desired)
               : "memory");
  return old;
}

// `*address = f(*address)` for a half or bfloat16 element, atomically; returns the old value.
template <typename T, typename F>
TL_DEVICE T cas_loop16(T* address, F f) {
  static_assert(sizeof(T) == 2, "the 16-bit compare-and-swap loop is for half and bfloat16 elements");
  unsigned short* word = reinterpret_cast<unsigned short*>(address);
  unsigned short old = *reinterpret_cast<volatile unsigned short*>(word);
  while (true) {
    unsigned short assumed = old;
    T current = *reinterpret_cast<T*>(&assumed);
    T next = f(current);
    unsigned short desired = *reinterpret_cast<unsigned short*>(&next);
    if (desired == assumed) break;  // nothing to change (max/min already held)
    old = cas16(word, assumed, desired);
    if (old == assumed) break;
  }
  return *reinterpret_cast<T*>(&old);
}

template <typename T>
inline constexpr bool is_half = std::is_same_v<T, half> || std::is_same_v<T, __nv_bfloat16>;

template <typename T>
TL_DEVICE T add(T* address, T value) {
  if constexpr (std::is_same_v<T, float> || std::is_same_v<T, double> || is_half<T> || std::is_same_v<T, int> ||
                std::is_same_v<T, unsigned int>) {
    return atomicAdd(address, value);
  } else if constexpr (std::is_integral_v<T> && sizeof(T) == 8) {
    // int64_t/uint64_t: two's complement addition is the unsigned one.
    using U = unsigned long long;
    return static_cast<T>(atomicAdd(reinterpret_cast<U*>(address), static_cast<U>(value)));
  } else {
    static_assert(kAlwaysFalse<T>, "T.atomic_add: no atomic add for this element type");
  }
}

// Float max/min through integer atomics: non-negative floats (sign bit clear) order as signed
// integers, negative ones in reverse as unsigned integers; -0.0 counts as negative, below +0.0.
template <bool Max, typename T>
TL_DEVICE T float_extreme(T* address, T value) {
  using S = std::conditional_t<sizeof(T) == 4, int, long long>;
  using U = std::conditional_t<sizeof(T) == 4, unsigned int, unsigned long long>;
  S bits_s = *reinterpret_cast<S*>(&value);
  U bits_u = *reinterpret_cast<U*>(&value);
  bool negative = bits_s < 0;
  U old;
  // A negative value orders in reverse as unsigned (larger magnitude, larger bits), and above every
  // non-negative one: max takes the unsigned minimum, min the unsigned maximum. A non-negative
  // value orders as a signed integer, above every negative one (a negative signed integer).
  if (negative) {
    old = Max ? atomicMin(reinterpret_cast<U*>(address), bits_u) : atomicMax(reinterpret_cast<U*>(address), bits_u);
  } else {
    S got = Max ? atomicMax(reinterpret_cast<S*>(address), bits_s) : atomicMin(reinterpret_cast<S*>(address), bits_s);
    old = *reinterpret_cast<U*>(&got);
  }
  return *reinterpret_cast<T*>(&old);
}

template <bool Max, typename T>
TL_DEVICE T extreme(T* address, T value) {
  if constexpr (std::is_same_v<T, float> || std::is_same_v<T, double>) {
    return float_extreme<Max>(address, value);
  } else if constexpr (is_half<T>) {
    return cas_loop16(address, [value](T current) {
      float c = static_cast<float>(current), v = static_cast<float>(value);
      return (Max ? v > c : v < c) ? value : current;
    });
  } else if constexpr (std::is_integral_v<T> && (sizeof(T) == 4 || sizeof(T) == 8)) {
    // int64_t is `long` and uint64_t `unsigned long`: CUDA's overloads take long long.
    using C = std::conditional_t<sizeof(T) == 4, T,
                                 std::conditional_t<std::is_signed_v<T>, long long, unsigned long long>>;
    C* a = reinterpret_cast<C*>(address);
    return static_cast<T>(Max ? atomicMax(a, static_cast<C>(value)) : atomicMin(a, static_cast<C>(value)));
  } else {
    static_assert(kAlwaysFalse<T>, "T.atomic_max/T.atomic_min: no atomic max/min for this element type");
  }
}

}  // namespace atomic_detail

// ---- element atomics: `tl::atomic_add<Order>(&dst, value)`; the _ret forms return the old value ----

template <int Order = kRelaxed, typename T, typename V>
TL_DEVICE T atomic_add_ret(T* address, V value) {
  fence_before_atomic<Order>();
  T old = atomic_detail::add(address, static_cast<T>(value));
  fence_after_atomic<Order>();
  return old;
}

template <int Order = kRelaxed, typename T, typename V>
TL_DEVICE void atomic_add(T* address, V value) {
  atomic_add_ret<Order>(address, value);  // the old value discarded
}

template <int Order = kRelaxed, typename T, typename V>
TL_DEVICE T atomic_max_ret(T* address, V value) {
  fence_before_atomic<Order>();
  T old = atomic_detail::extreme<true>(address, static_cast<T>(value));
  fence_after_atomic<Order>();
  return old;
}

template <int Order = kRelaxed, typename T, typename V>
TL_DEVICE void atomic_max(T* address, V value) {
  atomic_max_ret<Order>(address, value);  // the old value discarded
}

template <int Order = kRelaxed, typename T, typename V>
TL_DEVICE T atomic_min_ret(T* address, V value) {
  fence_before_atomic<Order>();
  T old = atomic_detail::extreme<false>(address, static_cast<T>(value));
  fence_after_atomic<Order>();
  return old;
}

template <int Order = kRelaxed, typename T, typename V>
TL_DEVICE void atomic_min(T* address, V value) {
  atomic_min_ret<Order>(address, value);  // the old value discarded
}

template <int Order = kRelaxed, typename T, typename V>
TL_DEVICE void atomic_or(T* address, V value) {
  static_assert(std::is_integral_v<T> && (sizeof(T) == 4 || sizeof(T) == 8), "T.atomic_or: 32 or 64-bit integers");
  using C = std::conditional_t<sizeof(T) == 4, unsigned int, unsigned long long>;
  fence_before_atomic<Order>();
  atomicOr(reinterpret_cast<C*>(address), static_cast<C>(static_cast<T>(value)));
  fence_after_atomic<Order>();
}

// ---- atomic loads and stores (PTX ld/st .relaxed.gpu in the same fence patterns) ----

namespace atomic_detail {
template <typename T>
using Bits = std::conditional_t<sizeof(T) == 2, unsigned short, std::conditional_t<sizeof(T) == 4, unsigned int,
                                                                                   unsigned long long>>;
}  // namespace atomic_detail

template <int Order = kSeqCst, typename T>
TL_DEVICE T atomic_load(const T* address) {
  static_assert(sizeof(T) == 2 || sizeof(T) == 4 || sizeof(T) == 8, "T.atomic_load reads 2, 4 or 8-byte elements");
  static_assert(Order != kRelease && Order != kAcqRel, "a load cannot be a release");
  using B = atomic_detail::Bits<T>;
  B bits;
  if constexpr (Order == kSeqCst) asm volatile("fence.sc.gpu;\n" ::: "memory");
  if constexpr (sizeof(T) == 2) {
    asm volatile("ld.relaxed.gpu.b16 %0, [%1];\n" : "=h"(bits) : "l"(address) : "memory");
  } else if constexpr (sizeof(T) == 4) {
    asm volatile("ld.relaxed.gpu.b32 %0, [%1];\n" : "=r"(bits) : "l"(address) : "memory");
  } else {
    asm volatile("ld.relaxed.gpu.b64 %0, [%1];\n" : "=l"(bits) : "l"(address) : "memory");
  }
  fence_after_atomic<Order>();
  return *reinterpret_cast<T*>(&bits);
}

template <int Order = kSeqCst, typename T, typename V>
TL_DEVICE void atomic_store(T* address, V value) {
  static_assert(sizeof(T) == 2 || sizeof(T) == 4 || sizeof(T) == 8, "T.atomic_store writes 2, 4 or 8-byte elements");
  static_assert(Order == kRelaxed || Order == kRelease || Order == kSeqCst, "a store is relaxed, release or seq_cst");
  using B = atomic_detail::Bits<T>;
  T converted = static_cast<T>(value);
  B bits = *reinterpret_cast<B*>(&converted);
  fence_before_atomic<Order>();
  if constexpr (sizeof(T) == 2) {
    asm volatile("st.relaxed.gpu.b16 [%0], %1;\n" ::"l"(address), "h"(bits) : "memory");
  } else if constexpr (sizeof(T) == 4) {
    asm volatile("st.relaxed.gpu.b32 [%0], %1;\n" ::"l"(address), "r"(bits) : "memory");
  } else {
    asm volatile("st.relaxed.gpu.b64 [%0], %1;\n" ::"l"(address), "l"(bits) : "memory");
  }
}

// ---- vector atomics: 2 or 4 consecutive elements, each added atomically ----
// half2 and bfloat162 are one 32-bit atomic (sm_60+ / sm_80+); float2 and float4 one atomic on
// sm_90 in global memory (CUDA: vector float atomics are "only supported for global memory"),
// else one per element. `Shared`: the destination is in shared memory. The _ret forms store the
// old values at `prev` (a vector-typed call would be printed lane by lane, adding twice).

namespace atomic_detail {

template <bool Shared, typename T, typename V>
TL_DEVICE auto addx2(T* address, V value) {
  if constexpr (std::is_same_v<T, half>) {
    return atomicAdd(reinterpret_cast<half2*>(address), value);
  } else if constexpr (std::is_same_v<T, __nv_bfloat16>) {
    return atomicAdd(reinterpret_cast<__nv_bfloat162*>(address), value);
  } else {
    static_assert(std::is_same_v<T, float>, "T.atomic_addx2 adds float16, bfloat16 or float32 pairs");
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
    if constexpr (!Shared) return atomicAdd(reinterpret_cast<float2*>(address), value);
#endif
    return make_float2(atomicAdd(address, value.x), atomicAdd(address + 1, value.y));
  }
}

template <typename T>
TL_DEVICE auto pair(T a, T b) {
  if constexpr (std::is_same_v<T, half>) {
    return __halves2half2(a, b);
  } else if constexpr (std::is_same_v<T, __nv_bfloat16>) {
    return __halves2bfloat162(a, b);
  } else {
    return make_float2(a, b);
  }
}

template <bool Shared, typename V>
TL_DEVICE float4 addx4(float* address, V value) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  if constexpr (!Shared) return atomicAdd(reinterpret_cast<float4*>(address), value);
#endif
  return make_float4(atomicAdd(address, value.x), atomicAdd(address + 1, value.y), atomicAdd(address + 2, value.z),
                     atomicAdd(address + 3, value.w));
}

template <typename T, typename V>
TL_DEVICE void store(T* prev, V old) {
  *reinterpret_cast<V*>(prev) = old;
}

}  // namespace atomic_detail

// A pair as one vector value (`*(half2*)&x[i]`), or element by element (a fragment's registers).
template <bool Shared = false, typename T, typename V>
TL_DEVICE void atomic_addx2(T* address, V value) {
  atomic_detail::addx2<Shared>(address, value);
}

template <bool Shared = false, typename T>
TL_DEVICE void atomic_addx2(T* address, T a, T b) {
  atomic_detail::addx2<Shared>(address, atomic_detail::pair(a, b));
}

template <bool Shared = false, typename T, typename V>
TL_DEVICE void atomic_addx2_ret(T* address, V value, T* prev) {
  atomic_detail::store(prev, atomic_detail::addx2<Shared>(address, value));
}

template <bool Shared = false, typename T>
TL_DEVICE void atomic_addx2_ret(T* address, T a, T b, T* prev) {
  atomic_detail::store(prev, atomic_detail::addx2<Shared>(address, atomic_detail::pair(a, b)));
}

// Four floats as one value (float4) or one by one; four halves or bfloat16s (the code
// generator's half4/nv_bfloat164, fields x y z w) as two pairs.
template <bool Shared = false, typename T, typename V>
TL_DEVICE void atomic_addx4(T* address, V value) {
  if constexpr (std::is_same_v<T, float>) {
    atomic_detail::addx4<Shared>(address, value);
  } else {
    static_assert(std::is_same_v<T, half> || std::is_same_v<T, __nv_bfloat16>,
                  "T.atomic_addx4 adds float32, float16 or bfloat16 quads");
    atomic_detail::addx2<Shared>(address, atomic_detail::pair(value.x, value.y));
    atomic_detail::addx2<Shared>(address + 2, atomic_detail::pair(value.z, value.w));
  }
}

template <bool Shared = false, typename T>
TL_DEVICE void atomic_addx4(T* address, T a, T b, T c, T d) {
  if constexpr (std::is_same_v<T, float>) {
    atomic_detail::addx4<Shared>(address, make_float4(a, b, c, d));
  } else {
    atomic_detail::addx2<Shared>(address, atomic_detail::pair(a, b));
    atomic_detail::addx2<Shared>(address + 2, atomic_detail::pair(c, d));
  }
}

template <bool Shared = false, typename V>
TL_DEVICE void atomic_addx4_ret(float* address, V value, float* prev) {
  atomic_detail::store(prev, atomic_detail::addx4<Shared>(address, value));
}

template <bool Shared = false>
TL_DEVICE void atomic_addx4_ret(float* address, float a, float b, float c, float d, float* prev) {
  atomic_detail::store(prev, atomic_detail::addx4<Shared>(address, make_float4(a, b, c, d)));
}

// ---- bulk add of a shared-memory row into global memory (T.atomic_add(use_tma=True), sm_90) ----
// PTX ISA "cp.reduce.async.bulk": element-wise atomic add of `bytes` bytes (a multiple of 16, both
// addresses 16-byte aligned), read from shared memory by the async proxy.

// Every thread that wrote the shared tile: make its writes visible to the async proxy (before the
// barrier that precedes the bulk adds).
TL_DEVICE void atomic_bulk_fence() { asm volatile("fence.proxy.async.shared::cta;\n" ::: "memory"); }

template <typename T>
TL_DEVICE void atomic_bulk_add(T* dst, const T* src, unsigned int bytes) {
#if defined(__CUDA_ARCH__)
  static_assert(__CUDA_ARCH__ >= 900 || kAlwaysFalse<T>, "cp.reduce.async.bulk needs sm_90");
#endif
  unsigned int smem = static_cast<unsigned int>(__cvta_generic_to_shared(src));
  if constexpr (std::is_same_v<T, float>) {
    asm volatile("cp.reduce.async.bulk.global.shared::cta.bulk_group.add.f32 [%0], [%1], %2;\n" ::"l"(dst),
                 "r"(smem), "r"(bytes)
                 : "memory");
  } else if constexpr (std::is_same_v<T, double>) {
    asm volatile("cp.reduce.async.bulk.global.shared::cta.bulk_group.add.f64 [%0], [%1], %2;\n" ::"l"(dst),
                 "r"(smem), "r"(bytes)
                 : "memory");
  } else if constexpr (std::is_same_v<T, half>) {
    asm volatile("cp.reduce.async.bulk.global.shared::cta.bulk_group.add.noftz.f16 [%0], [%1], %2;\n" ::"l"(dst),
                 "r"(smem), "r"(bytes)
                 : "memory");
  } else if constexpr (std::is_same_v<T, __nv_bfloat16>) {
    asm volatile("cp.reduce.async.bulk.global.shared::cta.bulk_group.add.noftz.bf16 [%0], [%1], %2;\n" ::"l"(dst),
                 "r"(smem), "r"(bytes)
                 : "memory");
  } else if constexpr (std::is_integral_v<T> && sizeof(T) == 4) {
    asm volatile("cp.reduce.async.bulk.global.shared::cta.bulk_group.add.u32 [%0], [%1], %2;\n" ::"l"(dst),
                 "r"(smem), "r"(bytes)
                 : "memory");
  } else {
    static_assert(std::is_integral_v<T> && sizeof(T) == 8, "T.atomic_add(use_tma=True): no bulk add for this type");
    asm volatile("cp.reduce.async.bulk.global.shared::cta.bulk_group.add.u64 [%0], [%1], %2;\n" ::"l"(dst),
                 "r"(smem), "r"(bytes)
                 : "memory");
  }
}

// The issuing thread: close its group of bulk adds and wait until they have read shared memory,
// so the tile may be written again once the block has passed a barrier.
TL_DEVICE void atomic_bulk_wait_read() {
  asm volatile("cp.async.bulk.commit_group;\ncp.async.bulk.wait_group.read 0;\n" ::: "memory");
}

}  // namespace tl

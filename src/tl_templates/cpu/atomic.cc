// Element atomics for kernels compiled for the CPU (tilelang/codegen/cpu.py links this file into a
// kernel's library when the kernel calls them): blocks run on several cores at once, so T.atomic_add
// and friends must be real atomics there too. Each is a compare-and-swap loop on the element's bits
// (sequentially consistent, the strongest of TileLang's memory orders, so every order is honoured).
// Named tl_cpu_atomic_<op>_<dtype>[_ret]; the _ret forms return the value the element held before.
#include <cstdint>
#include <cstring>

namespace {

template <typename T, typename Bits>
Bits to_bits(T v) {
  static_assert(sizeof(T) == sizeof(Bits), "an element and its bits have one size");
  Bits b;
  std::memcpy(&b, &v, sizeof(b));
  return b;
}

template <typename T, typename Bits>
T from_bits(Bits b) {
  T v;
  std::memcpy(&v, &b, sizeof(v));
  return v;
}

// bfloat16: the high half of a float32.
float bf16_to_float(uint16_t h) { return from_bits<float, uint32_t>(uint32_t(h) << 16); }
uint16_t float_to_bf16(float f) {
  uint32_t b = to_bits<float, uint32_t>(f);
  if ((b & 0x7fffffffu) > 0x7f800000u) return uint16_t((b >> 16) | 0x40);  // NaN stays NaN
  return uint16_t((b + 0x7fffu + ((b >> 16) & 1u)) >> 16);                // round to nearest even
}

// float16 (IEEE binary16), converted exactly (float32 holds every half value).
float f16_to_float(uint16_t h) {
  uint32_t sign = uint32_t(h & 0x8000u) << 16, exp = (h >> 10) & 0x1fu, man = h & 0x3ffu;
  if (exp == 0x1f) return from_bits<float, uint32_t>(sign | 0x7f800000u | (man << 13));
  if (exp == 0) {  // zero or subnormal: man * 2^-24
    float v = float(man) * (1.0f / 16777216.0f);
    return sign ? -v : v;
  }
  return from_bits<float, uint32_t>(sign | ((exp + 112) << 23) | (man << 13));
}
uint16_t float_to_f16(float f) {
  uint32_t b = to_bits<float, uint32_t>(f);
  uint16_t sign = uint16_t((b >> 16) & 0x8000u);
  uint32_t abs = b & 0x7fffffffu;
  if (abs > 0x7f800000u) return sign | 0x7e00u;                // NaN
  if (abs >= 0x477ff000u) return sign | 0x7c00u;               // rounds past 65504: infinity
  if (abs < 0x38800000u) {                                     // below 2^-14: subnormal or zero
    float v = from_bits<float, uint32_t>(abs) * 16777216.0f;   // in units of 2^-24 (exact)
    uint32_t q = uint32_t(v);
    float frac = v - float(q);
    if (frac > 0.5f || (frac == 0.5f && (q & 1u))) ++q;        // round to nearest even
    return sign | uint16_t(q);
  }
  uint32_t rounded = abs + 0xfffu + ((abs >> 13) & 1u);        // round to nearest even at bit 13
  return sign | uint16_t(((rounded >> 13) - (112u << 10)) & 0xffffu);
}

template <typename T>
T combine(int op, T a, T b) {
  if (op == 0) return a + b;
  if (op == 1) return a > b ? a : b;
  return a < b ? a : b;
}

// Values of T, stored as bits of Bits.
template <typename T, typename Bits>
T update(T* p, T v, int op) {
  Bits* bits = reinterpret_cast<Bits*>(p);
  Bits old = __atomic_load_n(bits, __ATOMIC_SEQ_CST);
  for (;;) {
    Bits next = to_bits<T, Bits>(combine(op, from_bits<T, Bits>(old), v));
    if (__atomic_compare_exchange_n(bits, &old, next, true, __ATOMIC_SEQ_CST, __ATOMIC_SEQ_CST))
      return from_bits<T, Bits>(old);
  }
}

// 16-bit floats: combined in float32, stored rounded.
template <float (*Load)(uint16_t), uint16_t (*Store)(float)>
uint16_t update16(uint16_t* p, float v, int op) {
  uint16_t old = __atomic_load_n(p, __ATOMIC_SEQ_CST);
  for (;;) {
    uint16_t next = Store(combine(op, Load(old), v));
    if (__atomic_compare_exchange_n(p, &old, next, true, __ATOMIC_SEQ_CST, __ATOMIC_SEQ_CST)) return old;
  }
}

}  // namespace

#define TL_CPU_ATOMIC(NAME, OP, T, BITS)                                                      \
  extern "C" void tl_cpu_atomic_##NAME(T* p, T v) { update<T, BITS>(p, v, OP); }              \
  extern "C" T tl_cpu_atomic_##NAME##_ret(T* p, T v) { return update<T, BITS>(p, v, OP); }

#define TL_CPU_ATOMICS(SUFFIX, T, BITS)            \
  TL_CPU_ATOMIC(add_##SUFFIX, 0, T, BITS)          \
  TL_CPU_ATOMIC(max_##SUFFIX, 1, T, BITS)          \
  TL_CPU_ATOMIC(min_##SUFFIX, 2, T, BITS)

TL_CPU_ATOMICS(float32, float, uint32_t)
TL_CPU_ATOMICS(float64, double, uint64_t)
TL_CPU_ATOMICS(int32, int32_t, uint32_t)
TL_CPU_ATOMICS(uint32, uint32_t, uint32_t)
TL_CPU_ATOMICS(int64, int64_t, uint64_t)
TL_CPU_ATOMICS(uint64, uint64_t, uint64_t)

// 16-bit floats: the value comes, and the old value goes back, as a float32 (the kernel converts:
// one calling convention, whatever the compilers make of 16-bit float arguments).
#define TL_CPU_ATOMIC16(NAME, OP, LOAD, STORE)                                                  \
  extern "C" void tl_cpu_atomic_##NAME(uint16_t* p, float v) { update16<LOAD, STORE>(p, v, OP); } \
  extern "C" float tl_cpu_atomic_##NAME##_ret(uint16_t* p, float v) {                          \
    return LOAD(update16<LOAD, STORE>(p, v, OP));                                              \
  }

TL_CPU_ATOMIC16(add_float16, 0, f16_to_float, float_to_f16)
TL_CPU_ATOMIC16(max_float16, 1, f16_to_float, float_to_f16)
TL_CPU_ATOMIC16(min_float16, 2, f16_to_float, float_to_f16)
TL_CPU_ATOMIC16(add_bfloat16, 0, bf16_to_float, float_to_bf16)
TL_CPU_ATOMIC16(max_bfloat16, 1, bf16_to_float, float_to_bf16)
TL_CPU_ATOMIC16(min_bfloat16, 2, bf16_to_float, float_to_bf16)

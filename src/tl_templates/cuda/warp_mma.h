// Per-warp tensor-core instructions a hand-written kernel issues one at a time (the macros of
// tilelang.cuda.intrinsics' TensorCoreIntrinEmitter): ldmatrix into a thread's own elements, and one
// mma.sync m16n8k* atom on them. Operands are in the PTX ISA's fragment layouts ("Matrix Fragments
// for mma.m16n8k*"); the element types of the pointers pick the instruction (gemm_mma.h's atoms).
#pragma once

#include "gemm_mma.h"

namespace tl {

// ldmatrix of Num 8x8 matrices of 16-bit words from shared memory: lane l gives row l % 8 of matrix
// l / 8 (lanes past 8 * Num are ignored) as `row`, the shared element it starts at, and the thread's
// word r receives its part of matrix r, transposed with Trans. `dst` is the thread's elements: Num
// 32-bit words of them. The generated code passes the element itself (tilelang/intrinsics.py LDMATRIX).
template <int Num, bool Trans, typename T>
TL_DEVICE void ldmatrix(T* dst, const T& row) {
  static_assert(Num == 1 || Num == 2 || Num == 4, "ldmatrix loads 1, 2 or 4 matrices");
  static_assert(!Trans || sizeof(T) == 2, "ldmatrix.trans transposes 16-bit elements; load 8-bit ones one by one");
  static_assert(4 % sizeof(T) == 0, "ldmatrix fills 32-bit words with whole elements");
  uint32_t r[Num];
  if constexpr (Num == 4) {
    mma_detail::ldmatrix_x4(r, &row, Trans);
  } else if constexpr (Num == 2) {
    mma_detail::ldmatrix_x2(r, &row, Trans);
  } else {
    unsigned int a = static_cast<unsigned int>(__cvta_generic_to_shared(&row));
    if (Trans)
      asm volatile("ldmatrix.sync.aligned.m8n8.x1.trans.shared.b16 {%0}, [%1];\n" : "=r"(r[0]) : "r"(a));
    else
      asm volatile("ldmatrix.sync.aligned.m8n8.x1.shared.b16 {%0}, [%1];\n" : "=r"(r[0]) : "r"(a));
  }
  // A word's bytes are its elements in order (the lower-addressed element in the low bits).
  constexpr int P = 4 / sizeof(T);
#pragma unroll
  for (int w = 0; w < Num; ++w) {
    union {
      uint32_t bits;
      T elems[P];
    } v;
    v.bits = r[w];
#pragma unroll
    for (int e = 0; e < P; ++e) dst[w * P + e] = v.elems[e];
  }
}

// One mma.sync m16n8kK: c[0..4) += A * B, with a the thread's 4 words of A (16 x K), b its 2 words of
// B (K x 8) and c its 4 accumulators (rows g and g + 8, columns 2t and 2t + 1; g = lane / 4, t = lane % 4).
template <int K, typename TA, typename TB, typename TC>
TL_DEVICE void mma_sync(const TA* a, const TB* b, TC* c) {
  using Atom = mma_detail::Atom<TA, TB, TC>;
  static_assert(Atom::K == K, "the mma atom of these element types has another K");
  constexpr int PA = 4 / sizeof(TA), PB = 4 / sizeof(TB);
  uint32_t ra[4], rb[2];
#pragma unroll
  for (int w = 0; w < 4; ++w) ra[w] = mma_detail::pack<PA>(a + w * PA, 1);
#pragma unroll
  for (int w = 0; w < 2; ++w) rb[w] = mma_detail::pack<PB>(b + w * PB, 1);
  // The atoms read half accumulators as packed pairs: hand them an aligned copy.
  alignas(16) TC acc[4];
#pragma unroll
  for (int i = 0; i < 4; ++i) acc[i] = c[i];
  Atom::fma(acc, ra, rb);
#pragma unroll
  for (int i = 0; i < 4; ++i) c[i] = acc[i];
}

}  // namespace tl

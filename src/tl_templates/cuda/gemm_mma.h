// Block-level GEMM on tensor cores with mma.sync (sm_80/sm_89/sm_90): C[M,N] += A[M,K] * B[K,N] for
// one thread block, warps tiled WarpM x WarpN over C. Each MMA is one inline PTX mma.sync (PTX ISA,
// "Warp-level matrix multiply-accumulate instructions"), written here rather than taken from a
// library header: CuTe's headers (and the libcu++ they pull in) cost 0.7 s of nvcc CPU per kernel.
// The register layouts below are the ones tilelang's layout inference assumes (tilelang/op/gemm.py):
//   C element (i, j): warp (i / (M/WarpM), j / (N/WarpN)), lane 4 * (i % 8) + (j % 8) / 2,
//   register ((mi * NI + ni) * 4 + 2 * ((i % 16) / 8) + j % 2) with mi, ni the 16x8 atom in the warp tile.
// The warp index is threadIdx.x / 32 modulo the WarpM * WarpN warps, so a gemm inside a branch of
// threads [lo, lo + 32 * WarpM * WarpN) (lo a multiple of that) finds its warps the same way.
#pragma once

#include "common.h"

namespace tl {
namespace mma_detail {

// One 16 x 8 x K atom per element-type triple: its K and how 32-bit registers pack elements, and its
// mma.sync with the operands in the fragment order of the PTX ISA (A, B, then C; D written in place).
template <typename TA, typename TB, typename TC>
struct Atom;

template <>
struct Atom<half, half, float> {
  static constexpr int K = 16;
  TL_DEVICE static void fma(float* c, const uint32_t* a, const uint32_t* b) {
    asm volatile("mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 "
        "{%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, {%10, %11, %12, %13};\n"
        : "=f"(c[0]), "=f"(c[1]), "=f"(c[2]), "=f"(c[3])
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b[0]), "r"(b[1]), "f"(c[0]), "f"(c[1]), "f"(c[2]), "f"(c[3]));
  }
};

template <>
struct Atom<__nv_bfloat16, __nv_bfloat16, float> {
  static constexpr int K = 16;
  TL_DEVICE static void fma(float* c, const uint32_t* a, const uint32_t* b) {
    asm volatile("mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 "
        "{%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, {%10, %11, %12, %13};\n"
        : "=f"(c[0]), "=f"(c[1]), "=f"(c[2]), "=f"(c[3])
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b[0]), "r"(b[1]), "f"(c[0]), "f"(c[1]), "f"(c[2]), "f"(c[3]));
  }
};

template <>
struct Atom<half, half, half> {
  static constexpr int K = 16;
  TL_DEVICE static void fma(half* c, const uint32_t* a, const uint32_t* b) {
    uint32_t* d = reinterpret_cast<uint32_t*>(c);  // four halves as two packed pairs
    asm volatile("mma.sync.aligned.m16n8k16.row.col.f16.f16.f16.f16 "
        "{%0, %1}, {%2, %3, %4, %5}, {%6, %7}, {%8, %9};\n"
        : "=r"(d[0]), "=r"(d[1])
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b[0]), "r"(b[1]), "r"(d[0]), "r"(d[1]));
  }
};

template <>
struct Atom<float, float, float> {  // float inputs run as tf32
  static constexpr int K = 8;
  TL_DEVICE static void fma(float* c, const uint32_t* a, const uint32_t* b) {
    asm volatile("mma.sync.aligned.m16n8k8.row.col.f32.tf32.tf32.f32 "
        "{%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, {%10, %11, %12, %13};\n"
        : "=f"(c[0]), "=f"(c[1]), "=f"(c[2]), "=f"(c[3])
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b[0]), "r"(b[1]), "f"(c[0]), "f"(c[1]), "f"(c[2]), "f"(c[3]));
  }
};

template <>
struct Atom<int8_t, int8_t, int> {
  static constexpr int K = 32;
  TL_DEVICE static void fma(int* c, const uint32_t* a, const uint32_t* b) {
    uint32_t* d = reinterpret_cast<uint32_t*>(c);  // the asm operands are 32-bit registers: s32 accumulators passed as u32
    asm volatile("mma.sync.aligned.m16n8k32.row.col.s32.s8.s8.s32 "
        "{%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, {%10, %11, %12, %13};\n"
        : "=r"(d[0]), "=r"(d[1]), "=r"(d[2]), "=r"(d[3])
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b[0]), "r"(b[1]), "r"(d[0]), "r"(d[1]), "r"(d[2]), "r"(d[3]));
  }
};

#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 890
template <>
struct Atom<__nv_fp8_e4m3, __nv_fp8_e4m3, float> {
  static constexpr int K = 32;
  TL_DEVICE static void fma(float* c, const uint32_t* a, const uint32_t* b) {
    asm("mma.sync.aligned.m16n8k32.row.col.f32.e4m3.e4m3.f32 "
        "{%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, {%10, %11, %12, %13};\n"
        : "=f"(c[0]), "=f"(c[1]), "=f"(c[2]), "=f"(c[3])
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b[0]), "r"(b[1]), "f"(c[0]), "f"(c[1]), "f"(c[2]), "f"(c[3]));
  }
};

template <>
struct Atom<__nv_fp8_e5m2, __nv_fp8_e5m2, float> {
  static constexpr int K = 32;
  TL_DEVICE static void fma(float* c, const uint32_t* a, const uint32_t* b) {
    asm("mma.sync.aligned.m16n8k32.row.col.f32.e5m2.e5m2.f32 "
        "{%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, {%10, %11, %12, %13};\n"
        : "=f"(c[0]), "=f"(c[1]), "=f"(c[2]), "=f"(c[3])
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b[0]), "r"(b[1]), "f"(c[0]), "f"(c[1]), "f"(c[2]), "f"(c[3]));
  }
};
#endif

// `Pack` elements p[0], p[stride], ... in one 32-bit register (the first in the low bits).
template <int Pack, typename T>
TL_DEVICE uint32_t pack(const T* p, int stride) {
  static_assert(Pack * sizeof(T) == 4, "an mma operand register holds 32 bits of elements");
  union {
    uint32_t bits;
    T elems[Pack];
  } v;
#pragma unroll
  for (int e = 0; e < Pack; ++e) v.elems[e] = p[e * stride];
  return v.bits;
}

// The shared-memory swizzle of tilelang/layout/layout.py `swizzle(shape, 128 / C, Bits)` on an element
// offset into a tile with rows of Ld elements, C elements a 16-byte chunk (8: 16-bit, 4: 32-bit): the
// chunk index XOR the row bits, Bits = 0 for a row-major tile. The row is the 128-byte line, or the
// tile row when rows are whole lines.
template <int Bits, int Ld, int C = 8>
TL_DEVICE int swizzle16(int off) {
  if constexpr (Bits == 0) {
    return off;
  } else {
    constexpr int mask = (1 << Bits) - 1, line = Ld % (8 * C) == 0 ? Ld : 8 * C;
    int chunk = (off / C) & mask, row = (off / line) & mask;
    return off + ((chunk ^ row) - chunk) * C;
  }
}

// Element offset of (row, col) in a shared operand tile with rows of Ld elements. PanelRows = 0: row-major
// with the swizzle above. PanelRows > 0: the layout wgmma reads (gemm_wgmma.h, tilelang/layout/layout.py
// `gmma_panels`): the rows cut into panels of P = 8 << Swz elements, each panel all PanelRows rows of P
// elements with the swizzle inside it, so that an mma.sync and a wgmma can read one tile.
template <int Swz, int Ld, int PanelRows, int C = 8>
TL_DEVICE int tile_offset(int row, int col) {
  if constexpr (PanelRows == 0) {
    return swizzle16<Swz, Ld, C>(row * Ld + col);
  } else {
    constexpr int P = 8 << Swz;
    static_assert(Swz > 0 && Ld % P == 0, "a paneled tile's rows are whole swizzled panels");
    return (col / P) * (PanelRows * P) + swizzle16<Swz, P>(row * P + col % P);
  }
}

// ldmatrix: four (or two) 8x8 matrices of 16-bit elements; lane l gives the row address of matrix l / 8.
TL_DEVICE void ldmatrix_x4(uint32_t (&r)[4], const void* row, bool trans) {
  unsigned int a = static_cast<unsigned int>(__cvta_generic_to_shared(row));
  if (trans)
    asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0, %1, %2, %3}, [%4];\n"
                 : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3]) : "r"(a));
  else
    asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0, %1, %2, %3}, [%4];\n"
                 : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3]) : "r"(a));
}

TL_DEVICE void ldmatrix_x2(uint32_t (&r)[2], const void* row, bool trans) {
  unsigned int a = static_cast<unsigned int>(__cvta_generic_to_shared(row));
  if (trans)
    asm volatile("ldmatrix.sync.aligned.m8n8.x2.trans.shared.b16 {%0, %1}, [%2];\n" : "=r"(r[0]), "=r"(r[1]) : "r"(a));
  else
    asm volatile("ldmatrix.sync.aligned.m8n8.x2.shared.b16 {%0, %1}, [%2];\n" : "=r"(r[0]), "=r"(r[1]) : "r"(a));
}

template <int M, int N, int K, int WarpM, int WarpN, typename TA, typename TB, typename TC>
struct Shape {
  using Mma = Atom<TA, TB, TC>;
  static constexpr int WM = M / WarpM, WN = N / WarpN;
  static constexpr int MI = WM / 16, NI = WN / 8;
  static constexpr int AK = Mma::K, KT = K / AK;
  static constexpr int PA = 4 / sizeof(TA), PB = 4 / sizeof(TB);
  static_assert(M % (16 * WarpM) == 0, "each warp's rows must be a multiple of the 16-row mma atom");
  static_assert(N % (8 * WarpN) == 0, "each warp's columns must be a multiple of the 8-column mma atom");
  static_assert(K % AK == 0, "K must be a multiple of the mma atom's K");
};

// Operand registers of one K step, read from shared memory in the mma fragment layout
// (PTX ISA, "Matrix Fragments for mma.m16n8k*"): g = lane / 4, t = lane % 4.
template <class S, bool TransA, int LdA, int Swz, int Rows = 0, typename TA>
TL_DEVICE void load_a(uint32_t (&a)[S::MI][4], const TA* A, int row0, int k0, int g, int t) {
  if constexpr (sizeof(TA) == 2 && LdA % 8 == 0) {  // ldmatrix: lane l addresses row l % 8 of matrix l / 8
    const int lane = threadIdx.x % 32, m = lane / 8;
#pragma unroll
    for (int mi = 0; mi < S::MI; ++mi) {
      int off = TransA ? tile_offset<Swz, LdA, Rows>(k0 + lane % 8 + (m / 2) * 8, row0 + mi * 16 + (m % 2) * 8)
                       : tile_offset<Swz, LdA, Rows>(row0 + mi * 16 + lane % 8 + (m % 2) * 8, k0 + (m / 2) * 8);
      ldmatrix_x4(a[mi], A + off, TransA);
    }
    return;
  }
  static_assert(Rows == 0 || (sizeof(TA) == 2 && LdA % 8 == 0), "only 16-bit operands are read from a paneled tile");
#pragma unroll
  for (int mi = 0; mi < S::MI; ++mi)
#pragma unroll
    for (int r = 0; r < 4; ++r) {
      int row = row0 + mi * 16 + g + 8 * (r % 2);
      int col = k0 + (r / 2) * 4 * S::PA + t * S::PA;
      // (Swizzled here only for 32-bit elements, one a register: mma.py swizzle_bits.)
      const TA* p = A + (TransA ? tile_offset<Swz, LdA, 0, 16 / sizeof(TA)>(col, row)
                                : tile_offset<Swz, LdA, 0, 16 / sizeof(TA)>(row, col));
      a[mi][r] = pack<S::PA>(p, TransA ? LdA : 1);
    }
}

template <class S, bool TransB, int LdB, int Swz, int Rows = 0, typename TB>
TL_DEVICE void load_b(uint32_t (&b)[S::NI][2], const TB* B, int col0, int k0, int g, int t) {
  if constexpr (sizeof(TB) == 2 && LdB % 8 == 0 && S::NI % 2 == 0) {
    // Two 8-column atoms per ldmatrix.x4: matrix m = lane / 8 is K half m % 2 of atom ni + m / 2.
    const int lane = threadIdx.x % 32, m = lane / 8, r = lane % 8;
#pragma unroll
    for (int ni = 0; ni < S::NI; ni += 2) {
      int n = col0 + (ni + m / 2) * 8, k = k0 + (m % 2) * 8;
      int off = TransB ? tile_offset<Swz, LdB, Rows>(n + r, k) : tile_offset<Swz, LdB, Rows>(k + r, n);
      uint32_t q[4];
      ldmatrix_x4(q, B + off, !TransB);
      b[ni][0] = q[0], b[ni][1] = q[1], b[ni + 1][0] = q[2], b[ni + 1][1] = q[3];
    }
    return;
  } else if constexpr (sizeof(TB) == 2 && LdB % 8 == 0) {  // lanes 0-15 address the two matrices' rows
    const int lane = threadIdx.x % 16;
#pragma unroll
    for (int ni = 0; ni < S::NI; ++ni) {
      int off = TransB ? tile_offset<Swz, LdB, Rows>(col0 + ni * 8 + lane % 8, k0 + (lane / 8) * 8)
                       : tile_offset<Swz, LdB, Rows>(k0 + lane % 8 + (lane / 8) * 8, col0 + ni * 8);
      ldmatrix_x2(b[ni], B + off, !TransB);
    }
    return;
  }
  static_assert(Rows == 0 || (sizeof(TB) == 2 && LdB % 8 == 0), "only 16-bit operands are read from a paneled tile");
#pragma unroll
  for (int ni = 0; ni < S::NI; ++ni)
#pragma unroll
    for (int r = 0; r < 2; ++r) {
      int n = col0 + ni * 8 + g;
      int k = k0 + r * 4 * S::PB + t * S::PB;
      // (Swizzled here only for 32-bit elements, one a register: mma.py swizzle_bits.)
      const TB* p = B + (TransB ? tile_offset<Swz, LdB, 0, 16 / sizeof(TB)>(n, k)
                                : tile_offset<Swz, LdB, 0, 16 / sizeof(TB)>(k, n));
      b[ni][r] = pack<S::PB>(p, TransB ? 1 : LdB);
    }
}

template <class S, typename TC>
TL_DEVICE void accumulate(TC* C, const uint32_t (&a)[S::MI][4], const uint32_t (&b)[S::NI][2]) {
#pragma unroll
  for (int mi = 0; mi < S::MI; ++mi)
#pragma unroll
    for (int ni = 0; ni < S::NI; ++ni) S::Mma::fma(C + (mi * S::NI + ni) * 4, a[mi], b[ni]);
}

template <class S, typename TC>
TL_DEVICE void clear(TC* C, bool clear) {
  if (clear) {
#pragma unroll
    for (int i = 0; i < S::MI * S::NI * 4; ++i) C[i] = TC(0);
  }
}

}  // namespace mma_detail

// A and B in shared memory (row-major; LdA/LdB are their row lengths; SwzA/SwzB the bits of their
// 16-byte-chunk swizzle, 0 for none; RowsA/RowsB the rows of a tile laid out in wgmma's panels, 0 for
// a row-major one: see tile_offset), C in registers.
// `clear` (default Clear): zero C first; a run-time flag when the generated code decides per call.
template <int M, int N, int K, int WarpM, int WarpN, bool TransA, bool TransB, bool Clear, int LdA, int LdB,
          int SwzA, int SwzB, int RowsA = 0, int RowsB = 0, typename TA, typename TB, typename TC>
TL_DEVICE void gemm_ss(const TA* A, const TB* B, TC* C, bool clear = Clear) {
  using S = mma_detail::Shape<M, N, K, WarpM, WarpN, TA, TB, TC>;
  const int lane = threadIdx.x % 32, warp = threadIdx.x / 32 % (WarpM * WarpN);
  const int row0 = (warp % WarpM) * S::WM, col0 = (warp / WarpM) * S::WN;
  mma_detail::clear<S>(C, clear);
  // Operands double-buffered in registers: step kt + 1 is read from shared memory while the
  // tensor cores work on step kt.
  uint32_t a[2][S::MI][4], b[2][S::NI][2];
  mma_detail::load_a<S, TransA, LdA, SwzA, RowsA>(a[0], A, row0, 0, lane / 4, lane % 4);
  mma_detail::load_b<S, TransB, LdB, SwzB, RowsB>(b[0], B, col0, 0, lane / 4, lane % 4);
#pragma unroll
  for (int kt = 0; kt < S::KT; ++kt) {
    if (kt + 1 < S::KT) {
      const int k1 = (kt + 1) * S::AK;
      mma_detail::load_a<S, TransA, LdA, SwzA, RowsA>(a[(kt + 1) % 2], A, row0, k1, lane / 4, lane % 4);
      mma_detail::load_b<S, TransB, LdB, SwzB, RowsB>(b[(kt + 1) % 2], B, col0, k1, lane / 4, lane % 4);
    }
    mma_detail::accumulate<S>(C, a[kt % 2], b[kt % 2]);
  }
}

// A in registers (the A-fragment layout of tilelang/op/gemm.py), B in shared memory.
template <int M, int N, int K, int WarpM, int WarpN, bool TransA, bool TransB, bool Clear, int LdA, int LdB,
          int SwzA, int SwzB, int RowsA = 0, int RowsB = 0, typename TA, typename TB, typename TC>
TL_DEVICE void gemm_rs(const TA* A, const TB* B, TC* C, bool clear = Clear) {
  using S = mma_detail::Shape<M, N, K, WarpM, WarpN, TA, TB, TC>;
  static_assert(!TransA, "an A operand in registers is not transposed");
  const int lane = threadIdx.x % 32, warp = threadIdx.x / 32 % (WarpM * WarpN);
  const int col0 = (warp / WarpM) * S::WN;
  mma_detail::clear<S>(C, clear);
#pragma unroll
  for (int kt = 0; kt < S::KT; ++kt) {
    uint32_t a[S::MI][4], b[S::NI][2];
#pragma unroll
    for (int mi = 0; mi < S::MI; ++mi)
#pragma unroll
      for (int r = 0; r < 4; ++r)
        a[mi][r] = mma_detail::pack<S::PA>(A + ((mi * S::KT + kt) * 4 + r) * S::PA, 1);
    mma_detail::load_b<S, TransB, LdB, SwzB, RowsB>(b, B, col0, kt * S::AK, lane / 4, lane % 4);
    mma_detail::accumulate<S>(C, a, b);
  }
}

// A in shared memory, B in registers (the B-fragment layout of tilelang/op/gemm.py).
template <int M, int N, int K, int WarpM, int WarpN, bool TransA, bool TransB, bool Clear, int LdA, int LdB,
          int SwzA, int SwzB, int RowsA = 0, int RowsB = 0, typename TA, typename TB, typename TC>
TL_DEVICE void gemm_sr(const TA* A, const TB* B, TC* C, bool clear = Clear) {
  using S = mma_detail::Shape<M, N, K, WarpM, WarpN, TA, TB, TC>;
  static_assert(!TransB, "a B operand in registers is not transposed");
  const int lane = threadIdx.x % 32, warp = threadIdx.x / 32 % (WarpM * WarpN);
  const int row0 = (warp % WarpM) * S::WM;
  mma_detail::clear<S>(C, clear);
#pragma unroll
  for (int kt = 0; kt < S::KT; ++kt) {
    uint32_t a[S::MI][4], b[S::NI][2];
    mma_detail::load_a<S, TransA, LdA, SwzA, RowsA>(a, A, row0, kt * S::AK, lane / 4, lane % 4);
#pragma unroll
    for (int ni = 0; ni < S::NI; ++ni)
#pragma unroll
      for (int r = 0; r < 2; ++r)
        b[ni][r] = mma_detail::pack<S::PB>(B + ((ni * S::KT + kt) * 2 + r) * S::PB, 1);
    mma_detail::accumulate<S>(C, a, b);
  }
}

}  // namespace tl

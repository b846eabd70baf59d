// Block-level 2:4 structured-sparse GEMM with mma.sp (sm_80 and later): C[M,N] += A[M,K] * B[K,N] for one
// thread block, where A arrives compressed (tilelang/op/gemm_sp.py): A_sparse[M, K/2] keeps the two nonzeros of
// every group of four along K, and E holds, per row, 4 bits per group (bits 1:0 the first kept position, 3:2 the
// second), groups in K order from the low bits of E's first element on. Warps tile C as in gemm_mma.h and hold the
// same accumulator registers; shared operands use its swizzle, register operands the layouts gemm_sp.py gives them.
#pragma once

#include "gemm_mma.h"

// ::ordered_metadata (PTX ISA 8.5, CUDA 12.5) states that the two positions of a group are in increasing order,
// as tilelang's compressors write them; older toolkits spell the same instruction mma.sp.
#if (__CUDACC_VER_MAJOR__ > 12) || (__CUDACC_VER_MAJOR__ == 12 && __CUDACC_VER_MINOR__ >= 5)
#define TL_MMA_SP "mma.sp::ordered_metadata.sync.aligned."
#else
#define TL_MMA_SP "mma.sp.sync.aligned."
#endif

namespace tl {
namespace sp_detail {

// One sparse 16 x 8 x K atom per element-type triple; K counts A's columns before compression. `a`: four
// registers of compressed A (16 x K/2, laid out as a dense mma's 16 x K/2 A operand), `b`: four of B (K x 8, two
// dense K/2 x 8 B operands one after the other), `e`: this thread's metadata. Sparsity selector 0: the threads of
// each group of four that the metadata load below fills are the ones the instruction reads (PTX ISA, "Sparse
// matrix storage").
template <typename TA, typename TB, typename TC>
struct Atom;

template <>
struct Atom<half, half, float> {
  static constexpr int K = 32;
  TL_DEVICE static void fma(float* c, const uint32_t* a, const uint32_t* b, uint32_t e) {
    asm volatile(TL_MMA_SP
                 "m16n8k32.row.col.f32.f16.f16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9,%10,%11}, {%0,%1,%2,%3}, "
                 "%12, 0x0;\n"
                 : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
                 : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b[0]), "r"(b[1]), "r"(b[2]), "r"(b[3]), "r"(e));
  }
};

template <>
struct Atom<half, half, half> {
  static constexpr int K = 32;
  TL_DEVICE static void fma(half* c, const uint32_t* a, const uint32_t* b, uint32_t e) {
    uint32_t* d = reinterpret_cast<uint32_t*>(c);  // four halves as two packed pairs
    asm volatile(TL_MMA_SP
                 "m16n8k32.row.col.f16.f16.f16.f16 {%0,%1}, {%2,%3,%4,%5}, {%6,%7,%8,%9}, {%0,%1}, %10, 0x0;\n"
                 : "+r"(d[0]), "+r"(d[1])
                 : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b[0]), "r"(b[1]), "r"(b[2]), "r"(b[3]), "r"(e));
  }
};

template <>
struct Atom<__nv_bfloat16, __nv_bfloat16, float> {
  static constexpr int K = 32;
  TL_DEVICE static void fma(float* c, const uint32_t* a, const uint32_t* b, uint32_t e) {
    asm volatile(TL_MMA_SP
                 "m16n8k32.row.col.f32.bf16.bf16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9,%10,%11}, {%0,%1,%2,%3}, "
                 "%12, 0x0;\n"
                 : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
                 : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b[0]), "r"(b[1]), "r"(b[2]), "r"(b[3]), "r"(e));
  }
};

template <>
struct Atom<int8_t, int8_t, int> {
  static constexpr int K = 64;
  TL_DEVICE static void fma(int* c, const uint32_t* a, const uint32_t* b, uint32_t e) {
    asm volatile(TL_MMA_SP
                 "m16n8k64.row.col.s32.s8.s8.s32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9,%10,%11}, {%0,%1,%2,%3}, "
                 "%12, 0x0;\n"
                 : "+r"(c[0]), "+r"(c[1]), "+r"(c[2]), "+r"(c[3])
                 : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b[0]), "r"(b[1]), "r"(b[2]), "r"(b[3]), "r"(e));
  }
};

#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 890
template <>
struct Atom<__nv_fp8_e4m3, __nv_fp8_e4m3, float> {
  static constexpr int K = 64;
  TL_DEVICE static void fma(float* c, const uint32_t* a, const uint32_t* b, uint32_t e) {
    asm volatile(TL_MMA_SP
                 "m16n8k64.row.col.f32.e4m3.e4m3.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9,%10,%11}, {%0,%1,%2,%3}, "
                 "%12, 0x0;\n"
                 : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
                 : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b[0]), "r"(b[1]), "r"(b[2]), "r"(b[3]), "r"(e));
  }
};

template <>
struct Atom<__nv_fp8_e5m2, __nv_fp8_e5m2, float> {
  static constexpr int K = 64;
  TL_DEVICE static void fma(float* c, const uint32_t* a, const uint32_t* b, uint32_t e) {
    asm volatile(TL_MMA_SP
                 "m16n8k64.row.col.f32.e5m2.e5m2.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9,%10,%11}, {%0,%1,%2,%3}, "
                 "%12, 0x0;\n"
                 : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
                 : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b[0]), "r"(b[1]), "r"(b[2]), "r"(b[3]), "r"(e));
  }
};
#endif

template <int M, int N, int K, int WarpM, int WarpN, typename TA, typename TB, typename TC>
struct Shape {
  using Mma = Atom<TA, TB, TC>;
  static constexpr int WM = M / WarpM, WN = N / WarpN;
  static constexpr int MI = WM / 16, NI = WN / 8;
  static constexpr int AK = Mma::K, KT = K / AK;
  static constexpr int PA = 4 / sizeof(TA), PB = 4 / sizeof(TB);
  static_assert(M % (16 * WarpM) == 0, "each warp's rows must be a multiple of the 16-row mma.sp atom");
  static_assert(N % (8 * WarpN) == 0, "each warp's columns must be a multiple of the 8-column mma.sp atom");
  static_assert(K % AK == 0, "K must be a multiple of the mma.sp atom's K");
};

// `W` (16 or 32) bits of row r's metadata from (uncompressed) column c on. A group of four columns takes 4 bits,
// so column c's group starts at bit c of the row, and an element of E covers as many columns as it has bits;
// with TransE, E is stored K-major (E[c / bits][r]).
template <int W, bool TransE, int LdE, typename TE>
__host__ __device__ inline uint32_t meta_bits(const TE* E, int r, int c) {
  constexpr int EB = 8 * sizeof(TE);
  static_assert(EB == 8 || EB == 16 || EB == 32, "metadata elements are 8, 16 or 32 bits wide");
  static_assert(W == 16 || W == 32, "a thread takes 16 or 32 bits of a row's metadata");
  constexpr uint32_t emask = EB == 32 ? 0xffffffffu : (1u << EB) - 1;  // no sign extension of int8/int16
  auto at = [&](int k) { return static_cast<uint32_t>(TransE ? E[k * LdE + r] : E[r * LdE + k]) & emask; };
  if constexpr (EB >= W) {
    return (at(c / EB) >> (c % EB)) & (W == 32 ? 0xffffffffu : (1u << W) - 1);
  } else {
    uint32_t v = 0;
#pragma unroll
    for (int j = 0; j < W / EB; ++j) v |= at(c / EB + j) << (EB * j);
    return v;
  }
}

// The metadata register of `lane` for the atom at rows [row, row + 16) and columns [k, k + AK) (PTX ISA,
// "Matrix fragments for sparse mma"): with 16-bit operands (AK = 32) lanes 4g and 4g + 1 hold columns
// [16h, 16h + 16) (h = lane % 2) of rows g (bits 15:0) and g + 8 (bits 31:16), the other two lanes a copy; with
// 8-bit operands (AK = 64) lane 4g + q holds columns [32 (q / 2), 32 (q / 2) + 32) of row g + 8 (q % 2).
template <int AK, bool TransE, int LdE, typename TE>
__host__ __device__ inline uint32_t meta_register(const TE* E, int row, int k, int lane) {
  static_assert(AK == 32 || AK == 64, "mma.sp atoms are k32 (16-bit operands) or k64 (8-bit operands)");
  const int g = lane / 4, q = lane % 4;
  if constexpr (AK == 32) {
    const int c = k + 16 * (q % 2);
    return meta_bits<16, TransE, LdE>(E, row + g, c) | (meta_bits<16, TransE, LdE>(E, row + g + 8, c) << 16);
  } else {
    return meta_bits<32, TransE, LdE>(E, row + g + 8 * (q % 2), k + 32 * (q / 2));
  }
}

// B's four registers of one atom: the dense operand of its first K/2 rows, then that of the next K/2.
template <class S, bool TransB, int LdB, int Swz, typename TB>
TL_DEVICE void load_b(uint32_t (&b)[S::NI][4], const TB* B, int col0, int k0, int lane) {
  uint32_t lo[S::NI][2], hi[S::NI][2];
  mma_detail::load_b<S, TransB, LdB, Swz>(lo, B, col0, k0, lane / 4, lane % 4);
  mma_detail::load_b<S, TransB, LdB, Swz>(hi, B, col0, k0 + S::AK / 2, lane / 4, lane % 4);
#pragma unroll
  for (int ni = 0; ni < S::NI; ++ni) {
    b[ni][0] = lo[ni][0], b[ni][1] = lo[ni][1];
    b[ni][2] = hi[ni][0], b[ni][3] = hi[ni][1];
  }
}

template <class S, bool TransE, int LdE, typename TE>
TL_DEVICE void load_e(uint32_t (&e)[S::MI], const TE* E, int row0, int k0, int lane) {
#pragma unroll
  for (int mi = 0; mi < S::MI; ++mi) e[mi] = meta_register<S::AK, TransE, LdE>(E, row0 + mi * 16, k0, lane);
}

template <class S, typename TC>
TL_DEVICE void accumulate(TC* C, const uint32_t (&a)[S::MI][4], const uint32_t (&b)[S::NI][4],
                          const uint32_t (&e)[S::MI]) {
#pragma unroll
  for (int mi = 0; mi < S::MI; ++mi)
#pragma unroll
    for (int ni = 0; ni < S::NI; ++ni) S::Mma::fma(C + (mi * S::NI + ni) * 4, a[mi], b[ni], e[mi]);
}

}  // namespace sp_detail

// A (compressed, M x K/2, or K/2 x M with TransA), E and B in shared memory, C in registers. LdA/LdB/LdE are the
// tiles' row lengths, SwzA/SwzB the bits of A's and B's 16-byte-chunk swizzle (gemm_mma.h); E is row-major.
// `clear` (default Clear): zero C first; a run-time flag when the generated code decides per call.
template <int M, int N, int K, int WarpM, int WarpN, bool TransA, bool TransB, bool TransE, bool Clear, int LdA,
          int LdB, int LdE, int SwzA, int SwzB, typename TA, typename TE, typename TB, typename TC>
TL_DEVICE void gemm_sp_ss(const TA* A, const TE* E, const TB* B, TC* C, bool clear = Clear) {
  using S = sp_detail::Shape<M, N, K, WarpM, WarpN, TA, TB, TC>;
  const int lane = threadIdx.x % 32, warp = threadIdx.x / 32 % (WarpM * WarpN);
  const int row0 = (warp % WarpM) * S::WM, col0 = (warp / WarpM) * S::WN;
  mma_detail::clear<S>(C, clear);
#pragma unroll
  for (int kt = 0; kt < S::KT; ++kt) {
    uint32_t a[S::MI][4], b[S::NI][4], e[S::MI];
    mma_detail::load_a<S, TransA, LdA, SwzA>(a, A, row0, kt * S::AK / 2, lane / 4, lane % 4);
    sp_detail::load_b<S, TransB, LdB, SwzB>(b, B, col0, kt * S::AK, lane);
    sp_detail::load_e<S, TransE, LdE>(e, E, row0, kt * S::AK, lane);
    sp_detail::accumulate<S>(C, a, b, e);
  }
}

// Compressed A in registers (the layout gemm_sp.py gives a fragment A: four registers per atom), E and B in
// shared memory.
template <int M, int N, int K, int WarpM, int WarpN, bool TransA, bool TransB, bool TransE, bool Clear, int LdA,
          int LdB, int LdE, int SwzA, int SwzB, typename TA, typename TE, typename TB, typename TC>
TL_DEVICE void gemm_sp_rs(const TA* A, const TE* E, const TB* B, TC* C, bool clear = Clear) {
  using S = sp_detail::Shape<M, N, K, WarpM, WarpN, TA, TB, TC>;
  static_assert(!TransA, "an A operand in registers is not transposed");
  const int lane = threadIdx.x % 32, warp = threadIdx.x / 32 % (WarpM * WarpN);
  const int row0 = (warp % WarpM) * S::WM, col0 = (warp / WarpM) * S::WN;
  mma_detail::clear<S>(C, clear);
#pragma unroll
  for (int kt = 0; kt < S::KT; ++kt) {
    uint32_t a[S::MI][4], b[S::NI][4], e[S::MI];
#pragma unroll
    for (int mi = 0; mi < S::MI; ++mi)
#pragma unroll
      for (int r = 0; r < 4; ++r) a[mi][r] = mma_detail::pack<S::PA>(A + ((mi * S::KT + kt) * 4 + r) * S::PA, 1);
    sp_detail::load_b<S, TransB, LdB, SwzB>(b, B, col0, kt * S::AK, lane);
    sp_detail::load_e<S, TransE, LdE>(e, E, row0, kt * S::AK, lane);
    sp_detail::accumulate<S>(C, a, b, e);
  }
}

// Compressed A and E in shared memory, B in registers (four registers per atom, gemm_sp.py's B layout).
template <int M, int N, int K, int WarpM, int WarpN, bool TransA, bool TransB, bool TransE, bool Clear, int LdA,
          int LdB, int LdE, int SwzA, int SwzB, typename TA, typename TE, typename TB, typename TC>
TL_DEVICE void gemm_sp_sr(const TA* A, const TE* E, const TB* B, TC* C, bool clear = Clear) {
  using S = sp_detail::Shape<M, N, K, WarpM, WarpN, TA, TB, TC>;
  static_assert(!TransB, "a B operand in registers is not transposed");
  const int lane = threadIdx.x % 32, warp = threadIdx.x / 32 % (WarpM * WarpN);
  const int row0 = (warp % WarpM) * S::WM;
  mma_detail::clear<S>(C, clear);
#pragma unroll
  for (int kt = 0; kt < S::KT; ++kt) {
    uint32_t a[S::MI][4], b[S::NI][4], e[S::MI];
    mma_detail::load_a<S, TransA, LdA, SwzA>(a, A, row0, kt * S::AK / 2, lane / 4, lane % 4);
#pragma unroll
    for (int ni = 0; ni < S::NI; ++ni)
#pragma unroll
      for (int r = 0; r < 4; ++r) b[ni][r] = mma_detail::pack<S::PB>(B + ((ni * S::KT + kt) * 4 + r) * S::PB, 1);
    sp_detail::load_e<S, TransE, LdE>(e, E, row0, kt * S::AK, lane);
    sp_detail::accumulate<S>(C, a, b, e);
  }
}

// Compressed A and B both in registers (gemm_sp.py's layouts), E in shared memory.
template <int M, int N, int K, int WarpM, int WarpN, bool TransA, bool TransB, bool TransE, bool Clear, int LdA,
          int LdB, int LdE, int SwzA, int SwzB, typename TA, typename TE, typename TB, typename TC>
TL_DEVICE void gemm_sp_rr(const TA* A, const TE* E, const TB* B, TC* C, bool clear = Clear) {
  using S = sp_detail::Shape<M, N, K, WarpM, WarpN, TA, TB, TC>;
  static_assert(!TransA && !TransB, "operands in registers are not transposed");
  const int lane = threadIdx.x % 32, warp = threadIdx.x / 32 % (WarpM * WarpN);
  const int row0 = (warp % WarpM) * S::WM;
  mma_detail::clear<S>(C, clear);
#pragma unroll
  for (int kt = 0; kt < S::KT; ++kt) {
    uint32_t a[S::MI][4], b[S::NI][4], e[S::MI];
#pragma unroll
    for (int r = 0; r < 4; ++r) {
#pragma unroll
      for (int mi = 0; mi < S::MI; ++mi) a[mi][r] = mma_detail::pack<S::PA>(A + ((mi * S::KT + kt) * 4 + r) * S::PA, 1);
#pragma unroll
      for (int ni = 0; ni < S::NI; ++ni) b[ni][r] = mma_detail::pack<S::PB>(B + ((ni * S::KT + kt) * 4 + r) * S::PB, 1);
    }
    sp_detail::load_e<S, TransE, LdE>(e, E, row0, kt * S::AK, lane);
    sp_detail::accumulate<S>(C, a, b, e);
  }
}

}  // namespace tl

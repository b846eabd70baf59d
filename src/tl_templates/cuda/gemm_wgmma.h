// Block-level GEMM on Hopper tensor cores with wgmma (sm_90a): C[M,N] += A[M,K] * B[K,N].
//
// Warpgroups (4 warps, 128 threads) tile C as WgM x WgN; each computes its (M / WgM) x (N / WgN)
// part with wgmma.m64nNk16, N = N / WgN, one instruction per 64 rows and 16 of K. The instructions
// themselves (`Instr`) are written into each kernel's source by the code generator, for the shapes
// and types it uses (tilelang/codegen/wgmma_isa.py). Shared operands are read through matrix
// descriptors, so they must be laid out as tilelang/layout/layout.py `gmma_panels` says: the
// contiguous dimension cut into panels of P = 8 << Swz elements (128/64/32 bytes), each panel all
// rows of P elements with the hardware's swizzle. C's register layout (tilelang/op/gemm_wgmma.py):
//   row i, column j of a warpgroup's part: warp (i % 64) / 16, lane 4 * (i % 8) + (j % 8) / 2,
//   register ((i / 64) * (N / 8) + j / 8) * 4 + 2 * ((i % 16) / 8) + j % 2.
// `Wait`: how many wgmma groups of this thread may still be running when a call returns (0: the
// call is synchronous; 1: the previous call's group is done, this one runs on; -1: no wait, see
// `wgmma_wait`). The accumulators must not be touched until their group is waited for.
// `Fence`: shared operands may have been written by ordinary stores, so the call first makes them
// visible to the tensor cores (fence.proxy.async); tiles only the TMA unit writes need none.
#pragma once

#include <type_traits>
#include <utility>

#include "common.h"

namespace tl {
namespace wgmma_detail {

// One wgmma.mma_async.m64nNk* of operand type TA into accumulators of type TC: static members
// `ss<TransA, TransB>(a_desc, b_desc, d, scale_d)` (A from shared memory) and, where A may come from
// registers, `rs<TransB>(a_regs, b_desc, d, scale_d)`. `d` points to the instruction's accumulator
// registers (`Reg`: float, or 32-bit words holding two halves or one int32); scale_d 0 overwrites
// them. TransA/TransB: the operand is MN-major in shared memory (16-bit types only). Defined by the
// code generator for each instance a kernel uses.
template <int N, typename TA, typename TC>
struct Instr;

// Keeps a register where it is across this point (no access to it moves across, and its register
// is not reused before): an empty asm that reads and writes it.
TL_DEVICE void fence_register(float& r) { asm volatile("" : "+f"(r)::"memory"); }
TL_DEVICE void fence_register(uint32_t& r) { asm volatile("" : "+r"(r)::"memory"); }

// The warpgroup's wgmma ordering points (PTX ISA: wgmma.fence, wgmma.commit_group, wgmma.wait_group).
TL_DEVICE void wgmma_fence() { asm volatile("wgmma.fence.sync.aligned;\n" ::: "memory"); }
TL_DEVICE void wgmma_commit() { asm volatile("wgmma.commit_group.sync.aligned;\n" ::: "memory"); }
template <int Pending>
TL_DEVICE void wgmma_wait_group() {
  static_assert(Pending >= 0 && Pending <= 7, "wgmma.wait_group takes 0 to 7 pending groups");
  asm volatile("wgmma.wait_group.sync.aligned %0;\n" ::"n"(Pending) : "memory");
}

// Accumulator registers as the instructions take them: floats, or 32-bit words (int32, pairs of halves).
template <typename TC>
TL_DEVICE auto& acc(TC* c, int i) {
  if constexpr (sizeof(TC) == 2 || std::is_integral_v<TC>) {
    return reinterpret_cast<uint32_t*>(c)[i];
  } else {
    return c[i];
  }
}

template <typename TC>
TL_DEVICE auto* regs(TC* c) {
  return &acc(c, 0);
}

// Panel width in elements of a tile with the `Swz` swizzle (128, 64 or 32 bytes).
template <int Swz, typename T>
constexpr int panel_width() {
  return (16 << Swz) / int(sizeof(T));
}

// Element offset of row/column (mn, k) in a gmma_panels tile with `Rows` rows (see descriptor()).
template <bool MNMajor, int Rows, int P>
TL_DEVICE constexpr int panel_offset(int mn, int k) {
  return MNMajor ? (mn / P) * (Rows * P) + k * P + mn % P : (k / P) * (Rows * P) + mn * P + k % P;
}

// A shared-memory matrix descriptor (PTX ISA, "Matrix Descriptor Format") for the instruction
// operand whose first element is at row/column (mn0, k0) of a gmma_panels tile with `Rows` rows of
// `Ld` elements. K-major: rows are M (or N), K contiguous; MN-major: rows are K, M (or N) contiguous.
template <bool MNMajor, int Rows, int Ld, int Swz, typename T>
TL_DEVICE uint64_t descriptor(const T* tile, int mn0, int k0) {
  static_assert(!MNMajor || sizeof(T) == 2, "only 16-bit operands can be read MN-major");
  static_assert(Swz >= 1 && Swz <= 3, "wgmma reads swizzled tiles (32, 64 or 128 bytes)");
  constexpr int P = panel_width<Swz, T>();
  static_assert(Ld % P == 0, "the tile's rows are whole panels");
  const uint32_t addr = static_cast<uint32_t>(__cvta_generic_to_shared(tile + panel_offset<MNMajor, Rows, P>(mn0, k0)));
  // Leading byte offset: between panels along MN (MN-major; unused when K-major). Stride byte
  // offset: between groups of 8 rows.
  constexpr uint32_t lbo = MNMajor ? Rows * P * sizeof(T) : 16, sbo = 8 * P * sizeof(T);
  constexpr uint64_t mode = Swz == 3 ? 1 : Swz == 2 ? 2 : 3;  // 128B, 64B, 32B swizzle
  return uint64_t((addr >> 4) & 0x3FFF) | (uint64_t((lbo >> 4) & 0x3FFF) << 16) |
         (uint64_t((sbo >> 4) & 0x3FFF) << 32) | (mode << 62);
}

// Descriptor of the operand element (mn0 + dMn, k0) from the descriptor of (mn0, 0): the start
// address is the descriptor's low field and shared memory lies below 256 KB, so moving through the
// tile adds to that field without a carry. Compile-time, so an instruction's descriptor is one add
// to the first one instead of an address computation. MN-major: valid when mn0 is a multiple of
// the panel width (mn0 % P == 0), which `panel_aligned` checks for a warpgroup's part.
template <bool MNMajor, int Rows, int Swz, typename T>
TL_DEVICE uint64_t advance(uint64_t desc, int dMn, int k0) {
  // offset(mn0 + dMn, k0) - offset(mn0, 0) = offset(dMn, k0) when mn0 % P == 0.
  const int d = panel_offset<MNMajor, Rows, panel_width<Swz, T>()>(dMn, k0);
  // Only the low word changes: the high word (strides, swizzle mode) stays a constant.
  return (desc & 0xFFFFFFFF00000000ull) | uint32_t(uint32_t(desc) + uint32_t(d * int(sizeof(T)) >> 4));
}

// Whether a warpgroup's part starting at a multiple of `Part` elements along MN starts a panel.
template <bool MNMajor, int Part, int Swz, typename T>
constexpr bool panel_aligned() {
  return !MNMajor || Part % panel_width<Swz, T>() == 0;
}

// Shared tiles written by ordinary stores become visible to the tensor cores' (async) reads.
TL_DEVICE void fence_proxy_async() { asm volatile("fence.proxy.async.shared::cta;\n" ::: "memory"); }

template <int Count, typename TC>
TL_DEVICE void fence_operands(TC* c) {
#pragma unroll
  for (int i = 0; i < Count; ++i) fence_register(acc(c, i));
}

// K of one instruction: 32 bytes of A's row (16 halves, 8 tf32, 32 fp8/int8 elements).
template <typename TA>
constexpr int k_step() {
  return 32 / int(sizeof(TA));
}

template <int M, int N, int K, int WgM, int WgN, typename TC, int KStep = 16>
struct Shape {
  static constexpr int WGM = M / WgM, WGN = N / WgN, MI = WGM / 64, KT = K / KStep;
  static constexpr int Regs = WGN / (sizeof(TC) == 2 ? 4 : 2);  // accumulator registers per instruction
  static_assert(WGM % 64 == 0, "each warpgroup's rows must be a multiple of 64");
  static_assert(WGN % 8 == 0 && WGN >= 8 && WGN <= 256, "a warpgroup's columns must be a multiple of 8 up to 256");
  static_assert(K % KStep == 0, "K must be a multiple of the instruction's K");
  // Instruction t's 64-row block and K step. A synchronous call (Wait == 0) issues each row block's
  // K steps together, so its first rows are final before the last block's instructions run: when
  // ptxas serializes the wgmmas (accumulators spilled, "wgmma ... serialized"), the softmax of those
  // rows overlaps them. Asynchronous calls keep K outermost (and every call with TL_WGMMA_K_FIRST,
  // to compare the two orders).
#ifdef TL_WGMMA_K_FIRST
  static constexpr bool rows_first(int wait) { return false; }
#else
  static constexpr bool rows_first(int wait) { return wait == 0; }
#endif
  static constexpr int row_of(int t, int wait) { return rows_first(wait) ? t / KT : t % MI; }
  static constexpr int k_of(int t, int wait) { return rows_first(wait) ? t % KT : t / MI; }
};

}  // namespace wgmma_detail

// The warpgroup of this thread, through a warp shuffle so the compiler knows it is the same across
// the warp (it then keeps the gemms' descriptors in uniform registers). The generated code reads it
// once at the kernel's start and passes it to every wgmma call: a shuffle per call would put its
// latency before each call's first instruction.
TL_DEVICE int warpgroup_index() { return __shfl_sync(0xffffffff, int(threadIdx.x) / 128, 0); }

// A and B in shared memory, laid out as gmma_panels (RowsX x LdX tiles, SwzX the swizzle bits).
// `clear` (default Clear): start from zero instead of C's values; a run-time flag when the
// generated code decides per call (a score tile that is masked on some blocks only).
template <int M, int N, int K, int WgM, int WgN, bool TransA, bool TransB, bool Clear, int RowsA, int LdA, int SwzA,
          int RowsB, int LdB, int SwzB, int Wait = 0, bool Fence = true, typename TA, typename TB, typename TC>
TL_DEVICE void wgmma_ss(const TA* A, const TB* B, TC* C, int wg, bool clear = Clear) {
  using namespace wgmma_detail;
  constexpr int KS = k_step<TA>();
  using S = Shape<M, N, K, WgM, WgN, TC, KS>;
  using I = Instr<S::WGN, TA, TC>;
  const int m0 = (wg % WgM) * S::WGM, n0 = (wg / WgM) * S::WGN;
  constexpr bool step_a = panel_aligned<TransA, S::WGM, SwzA, TA>();
  constexpr bool step_b = panel_aligned<!TransB, S::WGN, SwzB, TB>();
  const uint64_t da0 = descriptor<TransA, RowsA, LdA, SwzA>(A, m0, 0);
  const uint64_t db0 = descriptor<!TransB, RowsB, LdB, SwzB>(B, n0, 0);
  if constexpr (Fence) fence_proxy_async();
  fence_operands<S::MI * S::Regs>(C);
  wgmma_fence();
#pragma unroll
  for (int t = 0; t < S::MI * S::KT; ++t) {
    const int mi = S::row_of(t, Wait), kt = S::k_of(t, Wait);
    const uint64_t db = step_b ? advance<!TransB, RowsB, SwzB, TB>(db0, 0, kt * KS)
                               : descriptor<!TransB, RowsB, LdB, SwzB>(B, n0, kt * KS);
    const uint64_t da = step_a ? advance<TransA, RowsA, SwzA, TA>(da0, mi * 64, kt * KS)
                               : descriptor<TransA, RowsA, LdA, SwzA>(A, m0 + mi * 64, kt * KS);
    // B's transpose immediate says "MN-major": a B of (K, N) (not TransB) is N-major.
    I::template ss<TransA, !TransB>(da, db, regs(C) + mi * S::Regs, (clear && kt == 0) ? 0 : 1);
  }
  wgmma_commit();
  if constexpr (Wait >= 0) wgmma_wait_group<Wait>();
  fence_operands<S::MI * S::Regs>(C);
}

// A in registers (the A-fragment layout of tilelang/op/gemm/wgmma.py), B in shared memory: 16-bit
// types (k16, two elements a register) or tf32 (k8, B K-major, one element a register); four 32-bit
// registers per instruction either way. The tensor cores read A's registers after the instruction
// issues, so with Wait != 0 the caller keeps A's array unchanged, and fences it, until the group is
// waited for (tl.wgmma_wait does both).
template <int M, int N, int K, int WgM, int WgN, bool TransA, bool TransB, bool Clear, int RowsA, int LdA, int SwzA,
          int RowsB, int LdB, int SwzB, int Wait = 0, bool Fence = true, typename TA, typename TB, typename TC>
TL_DEVICE void wgmma_rs(const TA* A, const TB* B, TC* C, int wg, bool clear = Clear) {
  using namespace wgmma_detail;
  static_assert(sizeof(TA) == 2 || std::is_same_v<TA, float>,
                "an A operand in registers is 16-bit or tf32 (float); fp8 and int8 read A from shared memory");
  constexpr int KS = k_step<TA>();
  using S = Shape<M, N, K, WgM, WgN, TC, KS>;
  static_assert(!TransA, "an A operand in registers is not transposed");
  using I = Instr<S::WGN, TA, TC>;
  const int n0 = (wg / WgM) * S::WGN;
  constexpr bool step_b = panel_aligned<!TransB, S::WGN, SwzB, TB>();
  const uint64_t db0 = descriptor<!TransB, RowsB, LdB, SwzB>(B, n0, 0);
  // The caller's own registers, four 32-bit registers per instruction (no copy: a copy's registers
  // could be reused before an asynchronous group reads them).
  uint32_t(*a)[4] = reinterpret_cast<uint32_t(*)[4]>(const_cast<TA*>(A));
  fence_operands<S::MI * S::KT * 4>(&a[0][0]);
  if constexpr (Fence) fence_proxy_async();
  fence_operands<S::MI * S::Regs>(C);
  wgmma_fence();
#pragma unroll
  for (int t = 0; t < S::MI * S::KT; ++t) {
    const int mi = S::row_of(t, Wait), kt = S::k_of(t, Wait);
    const uint64_t db = step_b ? advance<!TransB, RowsB, SwzB, TB>(db0, 0, kt * KS)
                               : descriptor<!TransB, RowsB, LdB, SwzB>(B, n0, kt * KS);
    I::template rs<!TransB>(a[mi * S::KT + kt], db, regs(C) + mi * S::Regs, (clear && kt == 0) ? 0 : 1);
  }
  wgmma_commit();
  if constexpr (Wait >= 0) wgmma_wait_group<Wait>();
  fence_operands<S::MI * S::Regs>(C);
  fence_operands<S::MI * S::KT * 4>(&a[0][0]);
}

// Keeps a register array (`Count` elements) in place across this point: an empty asm reads and
// writes each 32-bit register, so the compiler neither moves accesses of the array across it nor
// reuses its registers before it (tl.wgmma_wait, after an asynchronous group that used the array).
template <int Count, typename T>
TL_DEVICE void fence_registers(T* p) {
  if constexpr (std::is_same_v<T, float>) {
#pragma unroll
    for (int i = 0; i < Count; ++i) wgmma_detail::fence_register(p[i]);
  } else {
    static_assert(Count * sizeof(T) % 4 == 0, "a register array is whole 32-bit registers");
    uint32_t* r = reinterpret_cast<uint32_t*>(p);
#pragma unroll
    for (int i = 0; i < Count * int(sizeof(T)) / 4; ++i) wgmma_detail::fence_register(r[i]);
  }
}

// Wait until at most `Pending` wgmma groups of this thread are still running (T.wait_wgmma).
template <int Pending>
TL_DEVICE void wgmma_wait() {
  wgmma_detail::wgmma_wait_group<Pending>();
}

}  // namespace tl

// Does compute-sanitizer racecheck follow the synchronization of the non-warp-specialized MLA decode
// example? There it reports ~30k RAW hazards on `scale_shared`: written by warpgroup 0, read by both
// consumer warpgroups after `bar.sync 1, 256` (the third warpgroup, the producer, never joins that
// barrier), where we read the code as ordered (the numbers are right). Each mode adds one trait of
// that kernel to a two-warpgroup exchange; the first mode with hazards names what racecheck misreads.
//   nvcc -gencode arch=compute_90a,code=sm_90a -lineinfo -o /tmp/probe named_barrier_race.cu
//   for m in 0 1 2 3 4; do compute-sanitizer --tool racecheck --racecheck-report hazard /tmp/probe $m; done
// Modes: 0 bar.sync 1, 256 around the exchange (seen clean on the H200, 2026-12-03); 1 __syncthreads
// instead (clean); 2 as 0, and warpgroup 0 also syncs alone (bar.sync 4, 128) before writing, as the
// example's softmax does; 3 as 2, in dynamic shared memory, the writers every fourth thread, and
// setmaxnreg (inc 240 / dec 24); 4 as 3, and the third warpgroup's first thread waits on an mbarrier
// that warpgroup 0 arrives on each iteration (the example's producer).
#include <cstdio>
#include <cstdint>

__device__ __forceinline__ void bar_sync(int id, int n) {
  asm volatile("bar.sync %0, %1;" ::"r"(id), "r"(n) : "memory");
}

__global__ void __launch_bounds__(384, 1) probe(float *out, int mode, int iters) {
  extern __shared__ __align__(16) float dyn[];
  __shared__ float stat[128];
  __shared__ alignas(8) uint64_t bar;
  float *s = mode >= 3 ? dyn : stat;
  int tx = threadIdx.x;
  if (tx == 0) {
    asm volatile("mbarrier.init.shared::cta.b64 [%0], 128;" ::"r"((unsigned)__cvta_generic_to_shared(&bar)));
    asm volatile("fence.mbarrier_init.release.cluster;");
  }
  __syncthreads();
  float acc = 0.f;
  if (tx < 256) {
    if (mode >= 3) asm volatile("setmaxnreg.inc.sync.aligned.u32 240;");
    for (int it = 0; it < iters; ++it) {
      if (mode == 1) __syncthreads(); else bar_sync(1, 256);
      if (tx < 128) {
        if (mode >= 2) bar_sync(4, 128);
        bool writer = mode >= 3 ? (tx & 3) == 0 : true;
        if (writer) s[tx] = tx * 1.5f + it;
        if (mode >= 4) {
          asm volatile("mbarrier.arrive.shared::cta.b64 _, [%0];" ::"r"((unsigned)__cvta_generic_to_shared(&bar)));
        }
      }
      if (mode == 1) __syncthreads(); else bar_sync(1, 256);
      acc += s[(tx & 127) & ~3];
    }
  } else {
    if (mode >= 3) asm volatile("setmaxnreg.dec.sync.aligned.u32 24;");
    if (mode >= 4 && tx == 256) {
      for (int it = 0; it < iters; ++it) {
        unsigned done = 0;
        while (!done) {
          asm volatile("{ .reg .pred p; mbarrier.try_wait.parity.shared::cta.b64 p, [%1], %2; selp.u32 %0, 1, 0, p; }"
                       : "=r"(done) : "r"((unsigned)__cvta_generic_to_shared(&bar)), "r"(it & 1));
        }
      }
    }
    if (mode == 1) for (int it = 0; it < 2 * iters; ++it) __syncthreads();
  }
  out[blockIdx.x * blockDim.x + tx] = acc;
}

int main(int argc, char **argv) {
  int mode = argc > 1 ? atoi(argv[1]) : 0;
  float *out;
  cudaMalloc(&out, 4 * 384 * sizeof(float));
  cudaFuncSetAttribute(probe, cudaFuncAttributeMaxDynamicSharedMemorySize, 512);
  probe<<<4, 384, 512>>>(out, mode, 8);
  cudaError_t e = cudaDeviceSynchronize();
  printf("mode %d: %s\n", mode, cudaGetErrorString(e));
  return e != cudaSuccess;
}

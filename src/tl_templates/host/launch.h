// Host side of a compiled tilelang kernel library.
//
// The kernels are not compiled into this translation unit: nvcc builds them alone into a cubin
// (device code only, the fast path through nvcc), and the cubin is linked into the same shared
// library as the bytes `tl_cubin`. The launcher that TVM generates (argument checks, grid sizes,
// stream) calls `tl_kernel_<name>()` for a handle to each kernel; the library is loaded through the
// CUDA runtime's library API on the first call, once for all devices.
//
// Everything here has internal linkage (and the unit is compiled with hidden visibility): every
// kernel library has its own copy, and the dynamic linker must not merge the function-local statics
// of two loaded libraries into one, which would launch one library's kernels from another.
#pragma once

#include <cuda.h>  // CUtensorMap and the driver's types (the functions are reached through cudart)
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <cstddef>
#include <cstdint>  // int64_t: the kernel argument of a dynamic dimension T.dynamic("m", "int64")
#include <tuple>
#include <utility>

extern "C" const unsigned char tl_cubin[];  // from the assembled blob; hidden in the library

namespace tl_host {
namespace {

inline cudaError_t load_library(cudaLibrary_t* out) {
  static cudaLibrary_t library = nullptr;
  static const cudaError_t status =
      cudaLibraryLoadData(&library, tl_cubin, nullptr, nullptr, 0, nullptr, nullptr, 0);
  *out = library;
  return status;
}

// TMA descriptors: the launcher encodes them before each launch. The driver function is looked up
// through the runtime, so the library needs no link against libcuda (absent on build machines).
using EncodeTiledFn = CUresult (*)(CUtensorMap*, CUtensorMapDataType, cuuint32_t, void*, const cuuint64_t*,
                                   const cuuint64_t*, const cuuint32_t*, const cuuint32_t*, CUtensorMapInterleave,
                                   CUtensorMapSwizzle, CUtensorMapL2promotion, CUtensorMapFloatOOBfill);

template <typename Fn>
inline Fn driver_function(const char* name) {
  void* fn = nullptr;
  cudaDriverEntryPointQueryResult found;
  if (cudaGetDriverEntryPointByVersion(name, &fn, 12000, cudaEnableDefault, &found) != cudaSuccess ||
      found != cudaDriverEntryPointSuccess)
    return nullptr;
  return reinterpret_cast<Fn>(fn);
}

inline CUresult tensor_map_encode_tiled(CUtensorMap* map, CUtensorMapDataType dtype, cuuint32_t rank, void* address,
                                        const cuuint64_t* dims, const cuuint64_t* strides, const cuuint32_t* box,
                                        const cuuint32_t* element_strides, CUtensorMapInterleave interleave,
                                        CUtensorMapSwizzle swizzle, CUtensorMapL2promotion l2,
                                        CUtensorMapFloatOOBfill fill) {
  static const EncodeTiledFn encode = driver_function<EncodeTiledFn>("cuTensorMapEncodeTiled");
  if (encode == nullptr) return CUDA_ERROR_NOT_SUPPORTED;
  return encode(map, dtype, rank, address, dims, strides, box, element_strides, interleave, swizzle, l2, fill);
}

inline CUresult driver_error_string(CUresult error, const char** message) {
  using Fn = CUresult (*)(CUresult, const char**);
  static const Fn describe = driver_function<Fn>("cuGetErrorString");
  return describe == nullptr ? CUDA_ERROR_NOT_SUPPORTED : describe(error, message);
}

template <typename Signature>
class Kernel;

// One `__global__` function of the cubin, with the parameter types of its signature, so that the
// launcher's arguments convert exactly as they would in a `<<<...>>>` launch.
template <typename... Params>
class Kernel<void(Params...)> {
 public:
  explicit Kernel(const char* name) {
    cudaLibrary_t library;
    status_ = load_library(&library);
    if (status_ == cudaSuccess) status_ = cudaLibraryGetKernel(&kernel_, library, name);
  }

  cudaError_t set_attribute(cudaFuncAttribute attr, int value) const {
    if (status_ != cudaSuccess) return status_;
    int device;
    cudaError_t err = cudaGetDevice(&device);
    return err != cudaSuccess ? err : cudaKernelSetAttributeForDevice(kernel_, attr, value, device);
  }

  template <typename... Args>
  cudaError_t launch(const cudaLaunchConfig_t* config, Args... args) const {
    static_assert(sizeof...(Args) == sizeof...(Params), "kernel argument count mismatch");
    if (status_ != cudaSuccess) return status_;
    std::tuple<Params...> values{static_cast<Params>(args)...};
    return launch_tuple(config, values, std::index_sequence_for<Params...>{});
  }

 private:
  template <std::size_t... I>
  cudaError_t launch_tuple(const cudaLaunchConfig_t* config, std::tuple<Params...>& values,
                           std::index_sequence<I...>) const {
    void* pointers[sizeof...(Params) + 1] = {static_cast<void*>(&std::get<I>(values))...};
    return cudaLaunchKernelExC(config, reinterpret_cast<const void*>(kernel_), pointers);
  }

  cudaKernel_t kernel_ = nullptr;
  cudaError_t status_ = cudaSuccess;
};

}  // namespace
}  // namespace tl_host

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

#include <tvm/ffi/c_api.h>
#include <tvm/ffi/extra/c_env_api.h>

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

// The DLTensor behind an FFI argument (a tensor object or a raw DLTensor pointer), or nullptr.
inline const DLTensor* dltensor_of(const TVMFFIAny& arg) {
  if (arg.type_index == kTVMFFIDLTensorPtr) return static_cast<const DLTensor*>(arg.v_ptr);
  if (arg.type_index == kTVMFFITensor) return reinterpret_cast<const DLTensor*>(reinterpret_cast<const char*>(arg.v_obj) + sizeof(TVMFFIObject));
  return nullptr;
}

template <typename Signature>
class Kernel;

// One `__global__` function of the cubin, with the parameter types of its signature, so that the
// launcher's arguments convert exactly as they would in a `<<<...>>>` launch.
//
// Launches go through the driver (cuLaunchKernel on the kernel's function in the current device's
// context, looked up once per device): the runtime's cudaLaunchKernelExC on a library kernel
// resolves that function on every call. Launches with attributes (clusters) keep the runtime path.
template <typename... Params>
class Kernel<void(Params...)> {
 public:
  static constexpr int kMaxDevices = 64;

  explicit Kernel(const char* name) {
    cudaLibrary_t library;
    status_ = load_library(&library);
    if (status_ == cudaSuccess) status_ = cudaLibraryGetKernel(&kernel_, library, name);
  }

  cudaError_t set_attribute(cudaFuncAttribute attr, int value) const {
    if (status_ != cudaSuccess) return status_;
    int device;
    cudaError_t err = cudaGetDevice(&device);
    if (err != cudaSuccess) return err;
    // The launcher sets the dynamic shared-memory limit before every launch: once per device.
    const bool cached = attr == cudaFuncAttributeMaxDynamicSharedMemorySize && device < kMaxDevices;
    if (cached && smem_limit_[device] == value) return cudaSuccess;
    err = cudaKernelSetAttributeForDevice(kernel_, attr, value, device);
    if (cached && err == cudaSuccess) smem_limit_[device] = value;
    return err;
  }

  // A cooperative launch (the kernel calls tl::sync_grid): all blocks resident at once, the grid
  // barrier's workspace provided by the driver. Through the runtime, which takes the attribute.
  template <typename... Args>
  cudaError_t launch_cooperative(const cudaLaunchConfig_t* config, Args... args) const {
    cudaLaunchAttribute cooperative[1];
    cooperative[0].id = cudaLaunchAttributeCooperative;
    cooperative[0].val.cooperative = 1;
    cudaLaunchConfig_t with = *config;
    with.attrs = cooperative;
    with.numAttrs = 1;
    return launch(&with, args...);
  }

  template <typename... Args>
  cudaError_t launch(const cudaLaunchConfig_t* config, Args... args) const {
    static_assert(sizeof...(Args) == sizeof...(Params), "kernel argument count mismatch");
    if (status_ != cudaSuccess) return status_;
    std::tuple<Params...> values{static_cast<Params>(args)...};
    return launch_tuple(config, values, std::index_sequence_for<Params...>{});
  }

 private:
  using LaunchFn = CUresult (*)(CUfunction, unsigned, unsigned, unsigned, unsigned, unsigned, unsigned, unsigned,
                                CUstream, void**, void**);
  using GetFunctionFn = CUresult (*)(CUfunction*, CUkernel);

  CUfunction function(int device) const {
    if (device < 0 || device >= kMaxDevices) return nullptr;
    if (functions_[device] == nullptr) {
      static const GetFunctionFn get = driver_function<GetFunctionFn>("cuKernelGetFunction");
      CUfunction f = nullptr;
      if (get != nullptr && get(&f, reinterpret_cast<CUkernel>(kernel_)) == CUDA_SUCCESS) functions_[device] = f;
    }
    return functions_[device];
  }

  template <std::size_t... I>
  cudaError_t launch_tuple(const cudaLaunchConfig_t* config, std::tuple<Params...>& values,
                           std::index_sequence<I...>) const {
    void* pointers[sizeof...(Params) + 1] = {static_cast<void*>(&std::get<I>(values))...};
    static const LaunchFn driver_launch = driver_function<LaunchFn>("cuLaunchKernel");
    if (config->numAttrs == 0 && driver_launch != nullptr) {
      int device;
      cudaError_t err = cudaGetDevice(&device);
      if (err != cudaSuccess) return err;
      if (CUfunction f = function(device)) {
        const dim3 g = config->gridDim, b = config->blockDim;
        CUresult r = driver_launch(f, g.x, g.y, g.z, b.x, b.y, b.z, static_cast<unsigned>(config->dynamicSmemBytes),
                                   reinterpret_cast<CUstream>(config->stream), pointers, nullptr);
        return static_cast<cudaError_t>(r);  // the runtime's codes equal the driver's for launch errors
      }
    }
    return cudaLaunchKernelExC(config, reinterpret_cast<const void*>(kernel_), pointers);
  }

  cudaKernel_t kernel_ = nullptr;
  cudaError_t status_ = cudaSuccess;
  mutable CUfunction functions_[kMaxDevices] = {};
  mutable int smem_limit_[kMaxDevices] = {};
};

}  // namespace
}  // namespace tl_host

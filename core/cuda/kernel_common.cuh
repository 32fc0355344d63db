// Internal to the .cu files: element types, their loads and stores, and the
// dtype dispatch shared by the kernel families. Included only by
// nvcc-compiled translation units (it names __half and __device__
// functions).
//
// The arithmetic is not here: every kernel applies core/base/scalar_ops.h's
// functors, the very code the CPU device runs (and CPU CI tests). What is
// here is storage: float16 and bfloat16 load to float32 and store back
// rounding to nearest even (CUDA's intrinsics, which round as core/base/half.h
// does on the host); bool is one byte, any nonzero byte loads as 1,
// kernels write 0 or 1.
// Thread-safety: stateless.
#ifndef TENSORD_CORE_CUDA_KERNEL_COMMON_CUH_
#define TENSORD_CORE_CUDA_KERNEL_COMMON_CUH_

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <cstdint>
#include <type_traits>

#include "core/cuda/kernel_types.h"
#include "core/cuda/launch_geometry.h"
#include "core/base/scalar_ops.h"

namespace tensord::core::cuda {

using scalar::Bool8;

template <typename T>
inline constexpr bool kIsHalfType =
    std::is_same_v<T, __half> || std::is_same_v<T, __nv_bfloat16>;
template <typename T>
inline constexpr bool kIsFloatType =
    std::is_floating_point_v<T> || kIsHalfType<T>;

// The type arithmetic happens in: float for the half types, T otherwise.
template <typename T>
using Compute = std::conditional_t<kIsHalfType<T>, float, T>;

template <typename T>
__device__ __forceinline__ Compute<T> Load(T v) {
  if constexpr (scalar::kIsBool<T>) {
    return v != 0 ? 1 : 0;
  } else if constexpr (std::is_same_v<T, __half>) {
    return __half2float(v);
  } else if constexpr (std::is_same_v<T, __nv_bfloat16>) {
    return __bfloat162float(v);
  } else {
    return v;
  }
}

template <typename T>
__device__ __forceinline__ T Store(Compute<T> v) {
  if constexpr (std::is_same_v<T, __half>) {
    return __float2half_rn(v);
  } else if constexpr (std::is_same_v<T, __nv_bfloat16>) {
    return __float2bfloat16_rn(v);
  } else {
    return v;
  }
}

// One element from storage type From to storage type To, through their
// compute types (scalar::Convert), as the CPU's cast does.
template <typename To, typename From>
__device__ __forceinline__ To CastElement(From v) {
  return Store<To>(scalar::Convert<Compute<To>, Compute<From>>(Load<From>(v)));
}

// A double (a fill value) as storage type T.
template <typename T>
__device__ __forceinline__ T FromDouble(double v) {
  return Store<T>(scalar::Convert<Compute<T>, double>(v));
}

// The first index of a grid-stride loop and its step.
__device__ __forceinline__ int64_t GridStart() {
  return blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x;
}
__device__ __forceinline__ int64_t GridStep() {
  return static_cast<int64_t>(blockDim.x) * gridDim.x;
}

template <typename T>
struct TypeTag {
  using type = T;
};

// Calls f(TypeTag<T>{}) for the element type `t`; false for an unknown one.
template <typename F>
bool DispatchElem(ElemType t, F&& f) {
  switch (t) {
    case ElemType::kF32:
      f(TypeTag<float>{});
      return true;
    case ElemType::kF64:
      f(TypeTag<double>{});
      return true;
    case ElemType::kI32:
      f(TypeTag<int32_t>{});
      return true;
    case ElemType::kI64:
      f(TypeTag<int64_t>{});
      return true;
    case ElemType::kBool:
      f(TypeTag<Bool8>{});
      return true;
    case ElemType::kF16:
      f(TypeTag<__half>{});
      return true;
    case ElemType::kBF16:
      f(TypeTag<__nv_bfloat16>{});
      return true;
  }
  return false;
}

}  // namespace tensord::core::cuda

#endif  // TENSORD_CORE_CUDA_KERNEL_COMMON_CUH_

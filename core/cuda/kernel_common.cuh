// Internal to the .cu files: element types, conversions and the dtype
// dispatch shared by the kernel families. Included only by nvcc-compiled
// translation units (it names __half and __device__ functions).
//
// The arithmetic mirrors core/cpu/cpu_kernels.cc exactly: float16 and
// bfloat16 compute in float32 and round back; integers wrap (computed in
// the unsigned type of the same width); bool is one byte, any nonzero byte
// is true, kernels write 0 or 1; floating -> integer conversion saturates
// and maps NaN to 0.
// Thread-safety: stateless.
#ifndef TENSORD_CORE_CUDA_KERNEL_COMMON_CUH_
#define TENSORD_CORE_CUDA_KERNEL_COMMON_CUH_

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <cstdint>
#include <type_traits>

#include "core/cuda/kernel_types.h"

namespace tensord::core::cuda {

using Bool8 = uint8_t;

template <typename T>
inline constexpr bool kIsHalfType =
    std::is_same_v<T, __half> || std::is_same_v<T, __nv_bfloat16>;
template <typename T>
inline constexpr bool kIsBoolType = std::is_same_v<T, Bool8>;
template <typename T>
inline constexpr bool kIsFloatType =
    std::is_floating_point_v<T> || kIsHalfType<T>;
template <typename T>
inline constexpr bool kIsIntType = std::is_integral_v<T> && !kIsBoolType<T>;

// The type arithmetic happens in: float for the half types, T otherwise.
template <typename T>
using Compute = std::conditional_t<kIsHalfType<T>, float, T>;

template <typename T>
__device__ __forceinline__ Compute<T> Load(T v) {
  if constexpr (std::is_same_v<T, __half>) {
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

template <typename T>
struct IntRange;
template <>
struct IntRange<int32_t> {
  static constexpr int32_t kMin = INT32_MIN, kMax = INT32_MAX;
};
template <>
struct IntRange<int64_t> {
  static constexpr int64_t kMin = INT64_MIN, kMax = INT64_MAX;
};

// ConvertValue of cpu_kernels.cc: anything -> bool is != 0, bool ->
// anything is 0/1, floating -> integer saturates with NaN -> 0, integer
// narrowing wraps. A conversion to a half type goes through float32 (the
// CPU fills round double -> float -> half the same way).
template <typename To, typename From>
__device__ __forceinline__ To Convert(From v) {
  if constexpr (kIsBoolType<To>) {
    if constexpr (kIsBoolType<From>) {
      return v != 0 ? 1 : 0;
    } else {
      return Load<From>(v) != Compute<From>(0) ? 1 : 0;
    }
  } else if constexpr (kIsBoolType<From>) {
    return Store<To>(v != 0 ? Compute<To>(1) : Compute<To>(0));
  } else if constexpr (kIsIntType<To> && kIsFloatType<From>) {
    const auto x = Load<From>(v);
    using X = decltype(x);
    if (x != x) return 0;  // NaN
    if (x <= static_cast<X>(IntRange<To>::kMin)) return IntRange<To>::kMin;
    if (x >= static_cast<X>(IntRange<To>::kMax)) return IntRange<To>::kMax;
    return static_cast<To>(x);
  } else if constexpr (kIsHalfType<To>) {
    return Store<To>(static_cast<float>(Load<From>(v)));
  } else {
    return static_cast<To>(Load<From>(v));
  }
}

// Wrapping integer arithmetic.
template <typename T>
using Unsigned = std::make_unsigned_t<T>;

inline constexpr int kThreads = 256;

// Blocks for a grid-stride loop over `n` elements.
inline unsigned int GridFor(int64_t n) {
  const int64_t blocks = (n + kThreads - 1) / kThreads;
  return static_cast<unsigned int>(
      blocks < 1 ? 1 : (blocks > (1 << 20) ? (1 << 20) : blocks));
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

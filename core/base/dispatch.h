// Internal: turns a runtime DType into a compile-time element type, for the
// CPU device's kernels.
//
// Kernels are written once as a templated lambda and dispatched here:
//   return DispatchDType(dtype, [&]<typename T>() -> absl::Status { ... });
// T is the storage type: float, double, int32_t, int64_t, BoolStorage (one
// byte: any nonzero byte is true, kernels write 0 or 1), Float16 or
// BFloat16 (core/base/half.h). Load/Store move between a storage type and its
// compute type (float for the half types, T itself otherwise; a bool byte
// loads as 0 or 1), where the scalar semantics of core/base/scalar_ops.h apply.
// Thread-safety: stateless.
#ifndef TENSORD_CORE_BASE_DISPATCH_H_
#define TENSORD_CORE_BASE_DISPATCH_H_

#include <cstdint>
#include <type_traits>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "core/base/dtype.h"
#include "core/base/half.h"
#include "core/base/scalar_ops.h"

namespace tensord::core {

using BoolStorage = scalar::Bool8;

template <typename T>
inline constexpr bool kIsBool = std::is_same_v<T, BoolStorage>;
template <typename T>
inline constexpr bool kIsHalf =
    std::is_same_v<T, Float16> || std::is_same_v<T, BFloat16>;

// The type a storage type computes in.
template <typename T>
using Compute = std::conditional_t<kIsHalf<T>, float, T>;

template <typename T>
inline Compute<T> Load(T v) {
  if constexpr (kIsBool<T>) {
    return v != 0 ? 1 : 0;
  } else if constexpr (std::is_same_v<T, Float16>) {
    return HalfBitsToFloat(v.bits);
  } else if constexpr (std::is_same_v<T, BFloat16>) {
    return BFloat16BitsToFloat(v.bits);
  } else {
    return v;
  }
}

template <typename T>
inline T Store(Compute<T> v) {
  if constexpr (std::is_same_v<T, Float16>) {
    return Float16{FloatToHalfBits(v)};
  } else if constexpr (std::is_same_v<T, BFloat16>) {
    return BFloat16{FloatToBFloat16Bits(v)};
  } else {
    return v;
  }
}

template <typename F>
absl::Status DispatchDType(DType dtype, F&& f) {
  switch (dtype) {
    case DType::kFloat32:
      return f.template operator()<float>();
    case DType::kFloat64:
      return f.template operator()<double>();
    case DType::kInt32:
      return f.template operator()<int32_t>();
    case DType::kInt64:
      return f.template operator()<int64_t>();
    case DType::kBool:
      return f.template operator()<BoolStorage>();
    case DType::kFloat16:
      return f.template operator()<Float16>();
    case DType::kBFloat16:
      return f.template operator()<BFloat16>();
  }
  return absl::InternalError(
      absl::StrCat("no kernel dispatch for dtype ", static_cast<int>(dtype)));
}

}  // namespace tensord::core

#endif  // TENSORD_CORE_BASE_DISPATCH_H_

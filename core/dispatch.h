// Internal: turns a runtime DType into a compile-time element type.
//
// Kernels are written once as a templated lambda and dispatched here:
//   return DispatchDType(dtype, [&]<typename T>() -> absl::Status { ... });
// Only the dtypes with arithmetic (float32, float64, int32, int64, bool) are
// dispatched; float16/bfloat16 are storage-only and give INTERNAL, since
// callers check Device::Supports() first. bool elements are bytes
// (BoolStorage): any nonzero byte is true, and kernels write 0 or 1.
// Thread-safety: stateless.
#ifndef TENSORD_CORE_DISPATCH_H_
#define TENSORD_CORE_DISPATCH_H_

#include <cstdint>
#include <type_traits>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "core/absl_compat.h"
#include "core/dtype.h"

namespace tensord::core {

using BoolStorage = uint8_t;

template <typename T>
inline constexpr bool kIsBool = std::is_same_v<T, BoolStorage>;

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
    case DType::kBFloat16:
      break;
  }
  return absl::InternalError(
      absl::StrCat("no kernel dispatch for dtype ", ToAbsl(DTypeName(dtype))));
}

}  // namespace tensord::core

#endif  // TENSORD_CORE_DISPATCH_H_

#include "core/collectives/reduce_kernels.h"

#include <algorithm>
#include <cstdint>

#include "absl/strings/str_cat.h"
#include "core/base/half.h"

namespace tensord::core {
namespace {

// A dtype's storage type and its arithmetic type (float for the 16-bit
// floats, which round once per combination, as NCCL's do).
template <typename Storage>
struct Arith {
  using Type = Storage;
  static Type Load(Storage v) { return v; }
  static Storage Store(Type v) { return v; }
};
template <>
struct Arith<Float16> {
  using Type = float;
  static float Load(Float16 v) { return HalfBitsToFloat(v.bits); }
  static Float16 Store(float v) { return Float16{FloatToHalfBits(v)}; }
};
template <>
struct Arith<BFloat16> {
  using Type = float;
  static float Load(BFloat16 v) { return BFloat16BitsToFloat(v.bits); }
  static BFloat16 Store(float v) { return BFloat16{FloatToBFloat16Bits(v)}; }
};

template <typename T, typename F>
void Combine(void* out, const void* a, const void* b, size_t n, F f) {
  using A = Arith<T>;
  auto* o = static_cast<T*>(out);
  const auto* x = static_cast<const T*>(a);
  const auto* y = static_cast<const T*>(b);
  for (size_t i = 0; i < n; ++i) {
    o[i] = A::Store(f(A::Load(x[i]), A::Load(y[i])));
  }
}

template <typename T>
void Sum(void* o, const void* a, const void* b, size_t n) {
  Combine<T>(o, a, b, n, [](auto x, auto y) { return x + y; });
}
template <typename T>
void Product(void* o, const void* a, const void* b, size_t n) {
  Combine<T>(o, a, b, n, [](auto x, auto y) { return x * y; });
}
// NaN propagates, as torch.maximum's does.
template <typename T>
void Max(void* o, const void* a, const void* b, size_t n) {
  Combine<T>(o, a, b, n, [](auto x, auto y) {
    return (x != x || x > y) ? x : y;  // NOLINT: x != x is NaN
  });
}
template <typename T>
void Min(void* o, const void* a, const void* b, size_t n) {
  Combine<T>(o, a, b, n, [](auto x, auto y) {
    return (x != x || x < y) ? x : y;  // NOLINT
  });
}
void Or(void* o, const void* a, const void* b, size_t n) {
  Combine<uint8_t>(o, a, b, n,
                   [](uint8_t x, uint8_t y) -> uint8_t { return x | y; });
}
void And(void* o, const void* a, const void* b, size_t n) {
  Combine<uint8_t>(o, a, b, n,
                   [](uint8_t x, uint8_t y) -> uint8_t { return x & y; });
}

template <typename T>
ReduceFn Typed(Reduction op) {
  switch (op) {
    case Reduction::kSum:
    case Reduction::kAvg:
      return &Sum<T>;
    case Reduction::kProduct:
      return &Product<T>;
    case Reduction::kMin:
      return &Min<T>;
    case Reduction::kMax:
      return &Max<T>;
  }
  return &Sum<T>;
}

template <typename T>
void DivideTyped(void* data, size_t n, double divisor) {
  using A = Arith<T>;
  auto* d = static_cast<T*>(data);
  using V = typename A::Type;
  const V by = static_cast<V>(divisor);
  for (size_t i = 0; i < n; ++i) d[i] = A::Store(A::Load(d[i]) / by);
}

}  // namespace

absl::Status CheckReduceOp(std::string_view collective, Reduction op,
                           DType dtype) {
  if (op == Reduction::kAvg && !IsFloating(dtype)) {
    return absl::FailedPreconditionError(absl::StrCat(
        std::string(collective), ": ReduceOp.AVG is defined for floating "
        "dtypes only, not ", std::string(DTypeName(dtype))));
  }
  return absl::OkStatus();
}

ReduceFn ReduceFunction(Reduction op, DType dtype) {
  switch (dtype) {
    case DType::kFloat32:
      return Typed<float>(op);
    case DType::kFloat64:
      return Typed<double>(op);
    case DType::kInt32:
      return Typed<int32_t>(op);
    case DType::kInt64:
      return Typed<int64_t>(op);
    case DType::kFloat16:
      return Typed<Float16>(op);
    case DType::kBFloat16:
      return Typed<BFloat16>(op);
    case DType::kBool:
      return (op == Reduction::kProduct || op == Reduction::kMin) ? &And : &Or;
  }
  return Typed<float>(op);
}

void DivideBy(void* data, size_t n, DType dtype, double divisor) {
  switch (dtype) {
    case DType::kFloat32:
      return DivideTyped<float>(data, n, divisor);
    case DType::kFloat64:
      return DivideTyped<double>(data, n, divisor);
    case DType::kFloat16:
      return DivideTyped<Float16>(data, n, divisor);
    case DType::kBFloat16:
      return DivideTyped<BFloat16>(data, n, divisor);
    default:
      return;  // CheckReduceOp refused kAvg on the others
  }
}

}  // namespace tensord::core

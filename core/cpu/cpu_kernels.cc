#include "core/cpu/cpu_kernels.h"

#include <cblas.h>

#include <algorithm>
#include <climits>
#include <cmath>
#include <cstring>
#include <limits>
#include <numbers>
#include <random>
#include <type_traits>
#include <vector>

#include "absl/strings/str_cat.h"
#include "core/absl_compat.h"
#include "core/cpu/half.h"
#include "core/cpu/random.h"
#include "core/dispatch.h"
#include "core/op_checks.h"
#include "core/status.h"

namespace tensord::core::cpu {
namespace {

// Converts one value between element types. Floating -> integer saturates
// and maps NaN to 0 (a plain static_cast would be undefined behaviour out of
// range); anything -> bool is `!= 0`; integer narrowing wraps (C++20).
template <typename To, typename From>
To ConvertValue(From v) {
  if constexpr (kIsBool<To>) {
    return v != From(0) ? 1 : 0;
  } else if constexpr (kIsBool<From>) {
    return v != 0 ? To(1) : To(0);
  } else if constexpr (std::is_integral_v<To> &&
                       std::is_floating_point_v<From>) {
    constexpr To kMin = std::numeric_limits<To>::min();
    constexpr To kMax = std::numeric_limits<To>::max();
    if (std::isnan(v)) return 0;
    if (v <= static_cast<From>(kMin)) return kMin;
    // static_cast<From>(kMax) rounds up to 2^31 / 2^63, so >= catches every
    // value that does not fit.
    if (v >= static_cast<From>(kMax)) return kMax;
    return static_cast<To>(v);
  } else {
    return static_cast<To>(v);
  }
}

// Integer arithmetic that wraps instead of overflowing (undefined behaviour
// for signed types): computed in the unsigned type of the same width.
template <typename T>
using Wrap = std::make_unsigned_t<T>;

template <typename T>
T AddOp(T x, T y) {
  if constexpr (kIsBool<T>) {
    return (x != 0 || y != 0) ? 1 : 0;
  } else if constexpr (std::is_integral_v<T>) {
    return static_cast<T>(static_cast<Wrap<T>>(x) + static_cast<Wrap<T>>(y));
  } else {
    return x + y;
  }
}

template <typename T>
T SubOp(T x, T y) {
  if constexpr (std::is_integral_v<T>) {
    return static_cast<T>(static_cast<Wrap<T>>(x) - static_cast<Wrap<T>>(y));
  } else {
    return x - y;
  }
}

template <typename T>
T MulOp(T x, T y) {
  if constexpr (kIsBool<T>) {
    return (x != 0 && y != 0) ? 1 : 0;
  } else if constexpr (std::is_integral_v<T>) {
    return static_cast<T>(static_cast<Wrap<T>>(x) * static_cast<Wrap<T>>(y));
  } else {
    return x * y;
  }
}

template <typename T>
T DivOp(T x, T y) {
  return x / y;  // floating only; the caller rejects other dtypes
}

// torch.maximum/minimum: NaN propagates; bool is logical or/and.
template <typename T>
T MaxOp(T x, T y) {
  if constexpr (std::is_floating_point_v<T>) {
    if (std::isnan(x) || std::isnan(y)) return x + y;
  }
  return x < y ? y : x;
}

template <typename T>
T MinOp(T x, T y) {
  if constexpr (std::is_floating_point_v<T>) {
    if (std::isnan(x) || std::isnan(y)) return x + y;
  }
  return y < x ? y : x;
}

// Integer powers by squaring with wrapping arithmetic; a negative exponent
// gives 0 except for bases 1 and -1 (PyTorch's integer pow).
template <typename T>
T PowOp(T x, T y) {
  if constexpr (std::is_floating_point_v<T>) {
    return std::pow(x, y);
  } else {
    using U = Wrap<T>;
    if (y < 0) {
      if (x == 1) return 1;
      if (x == -1) return (y % 2 == 0) ? 1 : -1;
      return 0;
    }
    U result = 1, base = static_cast<U>(x);
    for (auto e = static_cast<U>(y); e != 0; e >>= 1) {
      if (e & 1) result *= base;
      base *= base;
    }
    return static_cast<T>(result);
  }
}

template <typename T>
T UnaryValue(UnaryOp op, T x) {
  if constexpr (kIsBool<T>) {
    return x;  // only the floating ops reach here, on float32 (Runtime)
  } else {
    switch (op) {
      case UnaryOp::kNeg:
        if constexpr (std::is_integral_v<T>) {
          return static_cast<T>(Wrap<T>(0) - static_cast<Wrap<T>>(x));
        } else {
          return -x;
        }
      case UnaryOp::kAbs:
        if constexpr (std::is_integral_v<T>) {
          return x < 0 ? static_cast<T>(Wrap<T>(0) - static_cast<Wrap<T>>(x))
                       : x;
        } else {
          return std::abs(x);
        }
      case UnaryOp::kRelu:
        return x > T(0) ? x : T(0);
      case UnaryOp::kExp:
        return static_cast<T>(std::exp(x));
      case UnaryOp::kLog:
        return static_cast<T>(std::log(x));
      case UnaryOp::kSqrt:
        return static_cast<T>(std::sqrt(x));
      case UnaryOp::kSigmoid:
        return static_cast<T>(T(1) / (T(1) + std::exp(-x)));
      case UnaryOp::kTanh:
        return static_cast<T>(std::tanh(x));
    }
    return x;
  }
}

// Accumulator of a sum-like reduction: double for floating, wrapping
// int64 arithmetic for integers and bool.
template <typename T>
using Acc = std::conditional_t<std::is_floating_point_v<T>, double, int64_t>;

template <typename T>
bool Greater(T x, T y) {  // x > y, with NaN greater than everything
  if constexpr (std::is_floating_point_v<T>) {
    if (std::isnan(x)) return !std::isnan(y);
    if (std::isnan(y)) return false;
  }
  return x > y;
}

template <typename T>
void ReduceTyped(ReduceOp op, const Device::ReduceDims& d, const T* in,
                 void* out) {
  for (int64_t o = 0; o < d.outer; ++o) {
    for (int64_t i = 0; i < d.inner; ++i) {
      const T* p = in + o * d.n * d.inner + i;
      const int64_t dst = o * d.inner + i;
      switch (op) {
        case ReduceOp::kSum:
        case ReduceOp::kMean:
        case ReduceOp::kNorm: {
          Acc<T> acc = 0;
          for (int64_t j = 0; j < d.n; ++j) {
            const Acc<T> v = static_cast<Acc<T>>(p[j * d.inner]);
            if constexpr (std::is_floating_point_v<T>) {
              acc += op == ReduceOp::kNorm ? v * v : v;
            } else {
              acc = static_cast<int64_t>(static_cast<uint64_t>(acc) +
                                         static_cast<uint64_t>(v));
            }
          }
          T r;
          if constexpr (std::is_floating_point_v<T>) {
            r = static_cast<T>(op == ReduceOp::kNorm   ? std::sqrt(acc)
                               : op == ReduceOp::kMean ? acc / d.n
                                                       : acc);
          } else {
            r = static_cast<T>(acc);  // kSum only (the Runtime checks)
          }
          static_cast<T*>(out)[dst] = r;
          break;
        }
        case ReduceOp::kMax:
        case ReduceOp::kMin:
        case ReduceOp::kArgmax: {
          int64_t best = 0;
          for (int64_t j = 1; j < d.n; ++j) {
            const T v = p[j * d.inner];
            const T b = p[best * d.inner];
            if (op == ReduceOp::kMin ? Greater(b, v) : Greater(v, b)) best = j;
          }
          if (op == ReduceOp::kArgmax) {
            static_cast<int64_t*>(out)[dst] = best;
          } else {
            static_cast<T*>(out)[dst] = p[best * d.inner];
          }
          break;
        }
      }
    }
  }
}

// Fill value for element i of `spec` in double precision (kind != random).
template <typename T>
void FillTyped(const FillSpec& spec, int64_t numel, T* out) {
  switch (spec.kind) {
    case FillSpec::Kind::kZeros:
    case FillSpec::Kind::kOnes:
    case FillSpec::Kind::kFull: {
      const double v = spec.kind == FillSpec::Kind::kZeros  ? 0.0
                       : spec.kind == FillSpec::Kind::kOnes ? 1.0
                                                            : spec.value;
      const T tv = ConvertValue<T>(v);
      for (int64_t i = 0; i < numel; ++i) out[i] = tv;
      return;
    }
    case FillSpec::Kind::kArange: {
      if constexpr (std::is_integral_v<T> && !kIsBool<T>) {
        // Integral start and step are computed exactly in wrapping int64,
        // as PyTorch does for integer aranges; double would lose precision
        // above 2^53.
        const double lim = 0x1.0p62;
        if (spec.start == std::trunc(spec.start) &&
            spec.step == std::trunc(spec.step) && std::abs(spec.start) < lim &&
            std::abs(spec.step) < lim) {
          const uint64_t start =
              static_cast<uint64_t>(static_cast<int64_t>(spec.start));
          const uint64_t step =
              static_cast<uint64_t>(static_cast<int64_t>(spec.step));
          for (int64_t i = 0; i < numel; ++i) {
            out[i] = static_cast<T>(
                static_cast<int64_t>(start + static_cast<uint64_t>(i) * step));
          }
          return;
        }
      }
      for (int64_t i = 0; i < numel; ++i) {
        out[i] =
            ConvertValue<T>(spec.start + static_cast<double>(i) * spec.step);
      }
      return;
    }
    case FillSpec::Kind::kRand:
    case FillSpec::Kind::kRandn:
      break;  // RandomFill
  }
}

template <typename T>
void RandomFill(const FillSpec& spec, int64_t numel, T* out) {
  uint64_t seed;
  if (spec.seed.has_value()) {
    seed = *spec.seed;
  } else {
    std::random_device rd;
    seed = (static_cast<uint64_t>(rd()) << 32) ^ rd();
  }
  const CounterRandom rng(seed);
  if (spec.kind == FillSpec::Kind::kRand) {
    const T low = static_cast<T>(spec.low);
    const T high = static_cast<T>(spec.high);
    for (int64_t i = 0; i < numel; ++i) {
      T v = static_cast<T>(spec.low + (spec.high - spec.low) * rng.Uniform(i));
      // Rounding to T may land on `high`; keep the interval half-open.
      if (v >= high && high > low) v = std::nextafter(high, low);
      out[i] = v;
    }
    return;
  }
  // Box-Muller on draws 2i and 2i+1: one normal per element, so element i
  // depends only on (seed, i).
  for (int64_t i = 0; i < numel; ++i) {
    const double u1 = rng.UniformOpenZero(2 * static_cast<uint64_t>(i));
    const double u2 = rng.Uniform(2 * static_cast<uint64_t>(i) + 1);
    const double z =
        std::sqrt(-2.0 * std::log(u1)) * std::cos(2.0 * std::numbers::pi * u2);
    out[i] = static_cast<T>(spec.mean + spec.stddev * z);
  }
}

absl::Status FillHalf(const FillSpec& spec, DType dtype, int64_t numel,
                      uint16_t* out) {
  if (spec.kind == FillSpec::Kind::kRand ||
      spec.kind == FillSpec::Kind::kRandn) {
    return NotImplementedError("random fill", dtype, "cpu");
  }
  std::vector<float> values(static_cast<size_t>(numel));
  FillTyped<float>(spec, numel, values.data());
  for (int64_t i = 0; i < numel; ++i) {
    out[i] = dtype == DType::kFloat16 ? FloatToHalfBits(values[i])
                                      : FloatToBFloat16Bits(values[i]);
  }
  return absl::OkStatus();
}

// out[i] = fn(a[.], b[.]) over out_shape, reading a and b through broadcast
// strides. The innermost dimension is a plain loop (contiguous or with a
// broadcast operand) that the compiler can vectorize.
template <typename T, typename O, typename Fn>
void BroadcastLoop(const T* a, const Shape& a_shape, const T* b,
                   const Shape& b_shape, O* out, const Shape& out_shape,
                   Fn fn) {
  const int64_t numel = out_shape.NumElements();
  if (a_shape == out_shape && b_shape == out_shape) {
    for (int64_t i = 0; i < numel; ++i) out[i] = fn(a[i], b[i]);
    return;
  }
  if (numel == 0) return;
  if (out_shape.rank() == 0) {
    out[0] = fn(a[0], b[0]);
    return;
  }
  const std::vector<int64_t> sa = BroadcastStrides(a_shape, out_shape);
  const std::vector<int64_t> sb = BroadcastStrides(b_shape, out_shape);
  const int last = out_shape.rank() - 1;
  const int64_t inner = out_shape.dim(last);
  const int64_t ia = sa[last], ib = sb[last];
  const int64_t outer = numel / inner;
  std::vector<int64_t> index(last, 0);
  int64_t oa = 0, ob = 0;
  for (int64_t o = 0; o < outer; ++o) {
    const T* pa = a + oa;
    const T* pb = b + ob;
    O* dst = out + o * inner;
    if (ia == 1 && ib == 1) {
      for (int64_t j = 0; j < inner; ++j) dst[j] = fn(pa[j], pb[j]);
    } else if (ia == 1 && ib == 0) {
      const T y = pb[0];
      for (int64_t j = 0; j < inner; ++j) dst[j] = fn(pa[j], y);
    } else if (ia == 0 && ib == 1) {
      const T x = pa[0];
      for (int64_t j = 0; j < inner; ++j) dst[j] = fn(x, pb[j]);
    } else {
      for (int64_t j = 0; j < inner; ++j) dst[j] = fn(pa[j * ia], pb[j * ib]);
    }
    // Advance the multi-index over the outer dims, odometer style.
    for (int d = last - 1; d >= 0; --d) {
      oa += sa[d];
      ob += sb[d];
      if (++index[d] < out_shape.dim(d)) break;
      oa -= sa[d] * out_shape.dim(d);
      ob -= sb[d] * out_shape.dim(d);
      index[d] = 0;
    }
  }
}

template <typename T>
void IntegerMatMul(const Device::MatMulDims& dims, const T* a, const T* b,
                   T* out) {
  using U = Wrap<T>;
  for (int64_t p = 0; p < dims.batch; ++p) {
    const T* pa = a + p * dims.a_batch_stride;
    const T* pb = b + p * dims.b_batch_stride;
    T* pc = out + p * dims.out_batch_stride;
    for (int64_t i = 0; i < dims.m; ++i) {
      T* row = pc + i * dims.n;
      for (int64_t j = 0; j < dims.n; ++j) row[j] = 0;
      for (int64_t kk = 0; kk < dims.k; ++kk) {
        const U x = static_cast<U>(pa[i * dims.k + kk]);
        const T* brow = pb + kk * dims.n;
        for (int64_t j = 0; j < dims.n; ++j) {
          row[j] = static_cast<T>(static_cast<U>(row[j]) +
                                  x * static_cast<U>(brow[j]));
        }
      }
    }
  }
}

template <typename T>
void BlasMatMul(const Device::MatMulDims& dims, const T* a, const T* b,
                T* out) {
  const blasint m = static_cast<blasint>(dims.m);
  const blasint n = static_cast<blasint>(dims.n);
  const blasint k = static_cast<blasint>(dims.k);
  for (int64_t p = 0; p < dims.batch; ++p) {
    const T* pa = a + p * dims.a_batch_stride;
    const T* pb = b + p * dims.b_batch_stride;
    T* pc = out + p * dims.out_batch_stride;
    if constexpr (std::is_same_v<T, float>) {
      cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, m, n, k, 1.0f, pa,
                  k, pb, n, 0.0f, pc, n);
    } else {
      cblas_dgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, m, n, k, 1.0, pa,
                  k, pb, n, 0.0, pc, n);
    }
  }
}

}  // namespace

absl::Status FillKernel(const FillSpec& spec, DType dtype, int64_t numel,
                        void* out) {
  if (dtype == DType::kFloat16 || dtype == DType::kBFloat16) {
    return FillHalf(spec, dtype, numel, static_cast<uint16_t*>(out));
  }
  const bool random =
      spec.kind == FillSpec::Kind::kRand || spec.kind == FillSpec::Kind::kRandn;
  return DispatchDType(dtype, [&]<typename T>() -> absl::Status {
    T* dst = static_cast<T*>(out);
    if (!random) {
      FillTyped<T>(spec, numel, dst);
      return absl::OkStatus();
    }
    if constexpr (std::is_floating_point_v<T>) {
      RandomFill<T>(spec, numel, dst);
      return absl::OkStatus();
    } else {
      return NotImplementedError("random fill", dtype, "cpu");
    }
  });
}

absl::Status CastKernel(DType in_dtype, const void* in, DType out_dtype,
                        void* out, int64_t numel) {
  return DispatchDType(in_dtype, [&]<typename From>() -> absl::Status {
    return DispatchDType(out_dtype, [&]<typename To>() -> absl::Status {
      const From* src = static_cast<const From*>(in);
      To* dst = static_cast<To*>(out);
      for (int64_t i = 0; i < numel; ++i) dst[i] = ConvertValue<To>(src[i]);
      return absl::OkStatus();
    });
  });
}

absl::Status BinaryKernel(BinaryOp op, DType dtype, const void* a,
                          const Shape& a_shape, const void* b,
                          const Shape& b_shape, void* out,
                          const Shape& out_shape) {
  RETURN_IF_ERROR(CheckBinaryOpDType(op, dtype));
  return DispatchDType(dtype, [&]<typename T>() -> absl::Status {
    const T* pa = static_cast<const T*>(a);
    const T* pb = static_cast<const T*>(b);
    T* po = static_cast<T*>(out);
    auto run = [&](auto fn) {
      BroadcastLoop<T>(pa, a_shape, pb, b_shape, po, out_shape, fn);
      return absl::OkStatus();
    };
    auto compare = [&](auto fn) {
      BroadcastLoop<T>(pa, a_shape, pb, b_shape, static_cast<BoolStorage*>(out),
                       out_shape, [fn](T x, T y) -> BoolStorage {
                         return fn(x, y) ? 1 : 0;
                       });
      return absl::OkStatus();
    };
    switch (op) {
      case BinaryOp::kEq:
        return compare([](T x, T y) { return x == y; });
      case BinaryOp::kNe:
        return compare([](T x, T y) { return x != y; });
      case BinaryOp::kLt:
        return compare([](T x, T y) { return x < y; });
      case BinaryOp::kLe:
        return compare([](T x, T y) { return x <= y; });
      case BinaryOp::kGt:
        return compare([](T x, T y) { return x > y; });
      case BinaryOp::kGe:
        return compare([](T x, T y) { return x >= y; });
      case BinaryOp::kMaximum:
        return run([](T x, T y) { return MaxOp(x, y); });
      case BinaryOp::kMinimum:
        return run([](T x, T y) { return MinOp(x, y); });
      case BinaryOp::kPow:
        if constexpr (!kIsBool<T>) {
          return run([](T x, T y) { return PowOp(x, y); });
        }
        break;
      case BinaryOp::kAdd:
        return run([](T x, T y) { return AddOp(x, y); });
      case BinaryOp::kSub:
        return run([](T x, T y) { return SubOp(x, y); });
      case BinaryOp::kMul:
        return run([](T x, T y) { return MulOp(x, y); });
      case BinaryOp::kDiv:
        if constexpr (std::is_floating_point_v<T>)
          return run([](T x, T y) { return DivOp(x, y); });
        break;
    }
    return NotImplementedError(BinaryOpName(op), dtype, "cpu");
  });
}

absl::Status UnaryKernel(UnaryOp op, DType dtype, const void* in, void* out,
                         int64_t numel) {
  RETURN_IF_ERROR(CheckUnaryOpDType(op, dtype));
  if (IsFloatingUnary(op) && !IsFloating(dtype)) {
    return NotImplementedError(UnaryOpName(op), dtype, "cpu");
  }
  return DispatchDType(dtype, [&]<typename T>() -> absl::Status {
    const T* src = static_cast<const T*>(in);
    T* dst = static_cast<T*>(out);
    for (int64_t i = 0; i < numel; ++i) dst[i] = UnaryValue<T>(op, src[i]);
    return absl::OkStatus();
  });
}

absl::Status ReduceKernel(ReduceOp op, DType dtype,
                          const Device::ReduceDims& dims, const void* in,
                          void* out) {
  if (dims.n == 0 && (op == ReduceOp::kMax || op == ReduceOp::kMin ||
                      op == ReduceOp::kArgmax)) {
    return absl::InvalidArgumentError(absl::StrCat(
        ToAbsl(ReduceOpName(op)), "(): cannot reduce over an empty dimension"));
  }
  return DispatchDType(dtype, [&]<typename T>() -> absl::Status {
    if constexpr (!std::is_floating_point_v<T>) {
      if (op == ReduceOp::kMean || op == ReduceOp::kNorm) {
        return NotImplementedError(ReduceOpName(op), dtype, "cpu");
      }
    }
    ReduceTyped<T>(op, dims, static_cast<const T*>(in), out);
    return absl::OkStatus();
  });
}

void PermuteKernel(size_t elem_size, const void* in, const Shape& in_shape,
                   const std::vector<int>& perm, void* out) {
  const int rank = in_shape.rank();
  const int64_t numel = in_shape.NumElements();
  if (numel == 0) return;
  // Row-major strides of the input, reordered to walk the output in order.
  std::vector<int64_t> in_strides(rank, 1);
  for (int d = rank - 2; d >= 0; --d) {
    in_strides[d] = in_strides[d + 1] * in_shape.dim(d + 1);
  }
  std::vector<int64_t> out_dims(rank), strides(rank);
  for (int i = 0; i < rank; ++i) {
    out_dims[i] = in_shape.dim(perm[i]);
    strides[i] = in_strides[perm[i]];
  }
  const auto* src = static_cast<const char*>(in);
  auto* dst = static_cast<char*>(out);
  std::vector<int64_t> index(rank, 0);
  int64_t offset = 0;
  for (int64_t i = 0; i < numel; ++i) {
    std::memcpy(dst + i * elem_size, src + offset * elem_size, elem_size);
    for (int d = rank - 1; d >= 0; --d) {
      offset += strides[d];
      if (++index[d] < out_dims[d]) break;
      offset -= strides[d] * out_dims[d];
      index[d] = 0;
    }
  }
}

absl::Status MatMulKernel(const Device::MatMulDims& dims, DType dtype,
                          const void* a, const void* b, void* out) {
  if (dims.batch == 0 || dims.m == 0 || dims.n == 0) return absl::OkStatus();
  return DispatchDType(dtype, [&]<typename T>() -> absl::Status {
    const T* pa = static_cast<const T*>(a);
    const T* pb = static_cast<const T*>(b);
    T* po = static_cast<T*>(out);
    if constexpr (kIsBool<T>) {
      return NotImplementedError("matmul", dtype, "cpu");
    } else if constexpr (std::is_integral_v<T>) {
      IntegerMatMul<T>(dims, pa, pb, po);
      return absl::OkStatus();
    } else {
      // BLAS rejects a leading dimension of 0 and sizes past its int.
      const bool blas_ok = dims.k > 0 && dims.m <= INT_MAX &&
                           dims.n <= INT_MAX && dims.k <= INT_MAX;
      if (blas_ok) {
        BlasMatMul<T>(dims, pa, pb, po);
      } else if (dims.k == 0) {
        for (int64_t p = 0; p < dims.batch; ++p) {
          std::fill_n(po + p * dims.out_batch_stride, dims.m * dims.n, T(0));
        }
      } else {
        return absl::InvalidArgumentError(
            absl::StrCat("matmul dimensions (", dims.m, "x", dims.k, " and ",
                         dims.k, "x", dims.n, ") exceed the BLAS index range"));
      }
      return absl::OkStatus();
    }
  });
}

}  // namespace tensord::core::cpu

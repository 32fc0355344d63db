// The scalar semantics of every elementwise, unary, reduction, cast and
// fill op, written once for the CPU kernels (core/cpu/cpu_kernels.cc) and
// the CUDA kernels (core/cuda/*.cu) alike, so that CPU CI tests the very
// arithmetic the GPU runs (tests/core/scalar_ops_test.cc).
//
// Everything here works on *compute* values: float, double, int32_t,
// int64_t and Bool8 (0 or 1: a device's Load reads any nonzero bool byte as
// 1, and kernels write 0 or 1). float16 and bfloat16 are not compute types
// here: a device loads them to float, applies the functor and rounds the
// result back to nearest even (its own Load/Store), as PyTorch computes half
// precision.
//
// PyTorch's semantics: integers wrap around (computed in the unsigned type
// of the same width); bool add/mul/maximum/minimum are or/and/or/and;
// maximum/minimum propagate NaN; integer pow is by squaring, a negative
// exponent giving 0 except for the bases 1 and -1; floating -> integer
// conversion saturates and maps NaN to 0, anything -> bool is `!= 0`;
// floating sums accumulate in double, integer sums wrap in 64 bits;
// max/min/argmax propagate NaN and break ties by the first index; relu
// keeps NaN.
//
// Each functor says which compute types it is defined for (`kDefined<T>`);
// the planner (core/planner/planner.h) never plans an op for a dtype it is not
// defined on, and kernels instantiate only the defined pairs.
//
// C++17 without Abseil: nvcc compiles core/cuda that way. Under nvcc every
// function is __host__ __device__.
// Thread-safety: stateless.
#ifndef TENSORD_CORE_BASE_SCALAR_OPS_H_
#define TENSORD_CORE_BASE_SCALAR_OPS_H_

#include <math.h>

#include <cstdint>
#include <type_traits>

#include "core/base/op_kinds.h"

#if defined(__CUDACC__)
#define TENSORD_HOST_DEVICE __host__ __device__ __forceinline__
#else
#define TENSORD_HOST_DEVICE inline
#endif

namespace tensord::core::scalar {

using Bool8 = uint8_t;

template <typename T>
inline constexpr bool kIsBool = std::is_same_v<T, Bool8>;
template <typename T>
inline constexpr bool kIsInt = std::is_integral_v<T> && !kIsBool<T>;
template <typename T>
inline constexpr bool kIsFloat = std::is_floating_point_v<T>;

template <typename T>
using Unsigned = std::make_unsigned_t<T>;

// Math in the operand's own precision: float in float, double in double
// (the C names exist in host and device code alike).
TENSORD_HOST_DEVICE float Abs(float x) { return fabsf(x); }
TENSORD_HOST_DEVICE double Abs(double x) { return fabs(x); }
TENSORD_HOST_DEVICE float Exp(float x) { return expf(x); }
TENSORD_HOST_DEVICE double Exp(double x) { return exp(x); }
TENSORD_HOST_DEVICE float Expm1(float x) { return expm1f(x); }
TENSORD_HOST_DEVICE double Expm1(double x) { return expm1(x); }
TENSORD_HOST_DEVICE float Log(float x) { return logf(x); }
TENSORD_HOST_DEVICE double Log(double x) { return log(x); }
TENSORD_HOST_DEVICE float Sqrt(float x) { return sqrtf(x); }
TENSORD_HOST_DEVICE double Sqrt(double x) { return sqrt(x); }
TENSORD_HOST_DEVICE float Tanh(float x) { return tanhf(x); }
TENSORD_HOST_DEVICE double Tanh(double x) { return tanh(x); }
TENSORD_HOST_DEVICE float Erf(float x) { return erff(x); }
TENSORD_HOST_DEVICE double Erf(double x) { return erf(x); }
TENSORD_HOST_DEVICE float Pow(float x, float y) { return powf(x, y); }
TENSORD_HOST_DEVICE double Pow(double x, double y) { return pow(x, y); }

template <typename T>
TENSORD_HOST_DEVICE bool IsNan(T x) {
  if constexpr (kIsFloat<T>) {
    return x != x;
  } else {
    return false;
  }
}

// ---- Conversion -----------------------------------------------------------

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

// One value from compute type From to compute type To (a half type
// converts through float: its compute type).
template <typename To, typename From>
TENSORD_HOST_DEVICE To Convert(From v) {
  if constexpr (kIsBool<To>) {
    return v != From(0) ? 1 : 0;
  } else if constexpr (kIsBool<From>) {
    return v != 0 ? To(1) : To(0);
  } else if constexpr (kIsInt<To> && kIsFloat<From>) {
    if (v != v) return 0;  // NaN
    if (v <= static_cast<From>(IntRange<To>::kMin)) return IntRange<To>::kMin;
    // static_cast<From>(kMax) rounds up to 2^31 / 2^63, so >= catches every
    // value that does not fit.
    if (v >= static_cast<From>(IntRange<To>::kMax)) return IntRange<To>::kMax;
    return static_cast<To>(v);
  } else {
    return static_cast<To>(v);  // integer narrowing wraps (C++20's rule)
  }
}

// ---- Elementwise binary ops ----------------------------------------------
// Each: `T operator()(T x, T y)` (comparisons return Bool8) and
// `kDefined<T>`; `kComparison` tells the output type.

template <typename T>
TENSORD_HOST_DEVICE T WrapAdd(T x, T y) {
  return static_cast<T>(static_cast<Unsigned<T>>(x) +
                        static_cast<Unsigned<T>>(y));
}

struct Add {
  static constexpr bool kComparison = false;
  template <typename T>
  static constexpr bool kDefined = true;
  template <typename T>
  TENSORD_HOST_DEVICE T operator()(T x, T y) const {
    if constexpr (kIsBool<T>) {
      return (x != 0 || y != 0) ? 1 : 0;
    } else if constexpr (kIsInt<T>) {
      return WrapAdd(x, y);
    } else {
      return x + y;
    }
  }
};

struct Sub {
  static constexpr bool kComparison = false;
  template <typename T>
  static constexpr bool kDefined = !kIsBool<T>;
  template <typename T>
  TENSORD_HOST_DEVICE T operator()(T x, T y) const {
    if constexpr (kIsInt<T>) {
      return static_cast<T>(static_cast<Unsigned<T>>(x) -
                            static_cast<Unsigned<T>>(y));
    } else {
      return x - y;
    }
  }
};

struct Mul {
  static constexpr bool kComparison = false;
  template <typename T>
  static constexpr bool kDefined = true;
  template <typename T>
  TENSORD_HOST_DEVICE T operator()(T x, T y) const {
    if constexpr (kIsBool<T>) {
      return (x != 0 && y != 0) ? 1 : 0;
    } else if constexpr (kIsInt<T>) {
      return static_cast<T>(static_cast<Unsigned<T>>(x) *
                            static_cast<Unsigned<T>>(y));
    } else {
      return x * y;
    }
  }
};

// True division: floating only (the planner computes integer division in
// float32).
struct Div {
  static constexpr bool kComparison = false;
  template <typename T>
  static constexpr bool kDefined = kIsFloat<T>;
  template <typename T>
  TENSORD_HOST_DEVICE T operator()(T x, T y) const {
    return x / y;
  }
};

// torch.maximum / torch.minimum: NaN propagates; bool is or / and.
struct Maximum {
  static constexpr bool kComparison = false;
  template <typename T>
  static constexpr bool kDefined = true;
  template <typename T>
  TENSORD_HOST_DEVICE T operator()(T x, T y) const {
    if constexpr (kIsFloat<T>) {
      if (IsNan(x) || IsNan(y)) return x + y;
    }
    return x < y ? y : x;
  }
};

struct Minimum {
  static constexpr bool kComparison = false;
  template <typename T>
  static constexpr bool kDefined = true;
  template <typename T>
  TENSORD_HOST_DEVICE T operator()(T x, T y) const {
    if constexpr (kIsFloat<T>) {
      if (IsNan(x) || IsNan(y)) return x + y;
    }
    return y < x ? y : x;
  }
};

struct PowOp {
  static constexpr bool kComparison = false;
  template <typename T>
  static constexpr bool kDefined = !kIsBool<T>;
  template <typename T>
  TENSORD_HOST_DEVICE T operator()(T x, T y) const {
    if constexpr (kIsFloat<T>) {
      return Pow(x, y);
    } else {
      using U = Unsigned<T>;
      if (y < 0) {
        if (x == 1) return 1;
        if (x == -1) return (y % 2 == 0) ? 1 : -1;
        return 0;
      }
      U result = 1, base = static_cast<U>(x);
      for (U e = static_cast<U>(y); e != 0; e >>= 1) {
        if (e & 1) result *= base;
        base *= base;
      }
      return static_cast<T>(result);
    }
  }
};

#define TENSORD_COMPARISON(Name, expr)                     \
  struct Name {                                            \
    static constexpr bool kComparison = true;              \
    template <typename T>                                  \
    static constexpr bool kDefined = true;                 \
    template <typename T>                                  \
    TENSORD_HOST_DEVICE Bool8 operator()(T x, T y) const { \
      return (expr) ? 1 : 0;                               \
    }                                                      \
  };
TENSORD_COMPARISON(Eq, x == y)
TENSORD_COMPARISON(Ne, x != y)
TENSORD_COMPARISON(Lt, x < y)
TENSORD_COMPARISON(Le, x <= y)
TENSORD_COMPARISON(Gt, x > y)
TENSORD_COMPARISON(Ge, x >= y)
#undef TENSORD_COMPARISON

// Calls f(Functor{}) for `op`; false for a value outside the enum. Host
// code: kernels are instantiated per functor inside `f`.
template <typename F>
inline bool VisitBinaryOp(BinaryOp op, F&& f) {
  switch (op) {
    case BinaryOp::kAdd:
      f(Add{});
      return true;
    case BinaryOp::kSub:
      f(Sub{});
      return true;
    case BinaryOp::kMul:
      f(Mul{});
      return true;
    case BinaryOp::kDiv:
      f(Div{});
      return true;
    case BinaryOp::kMaximum:
      f(Maximum{});
      return true;
    case BinaryOp::kMinimum:
      f(Minimum{});
      return true;
    case BinaryOp::kPow:
      f(PowOp{});
      return true;
    case BinaryOp::kEq:
      f(Eq{});
      return true;
    case BinaryOp::kNe:
      f(Ne{});
      return true;
    case BinaryOp::kLt:
      f(Lt{});
      return true;
    case BinaryOp::kLe:
      f(Le{});
      return true;
    case BinaryOp::kGt:
      f(Gt{});
      return true;
    case BinaryOp::kGe:
      f(Ge{});
      return true;
  }
  return false;
}

// ---- Elementwise unary ops -----------------------------------------------
// Each: `T operator()(T x)` and `kDefined<T>`. None is defined on bool;
// the floating functions only on floating types.

struct Neg {
  template <typename T>
  static constexpr bool kDefined = !kIsBool<T>;
  template <typename T>
  TENSORD_HOST_DEVICE T operator()(T x) const {
    if constexpr (kIsInt<T>) {
      return static_cast<T>(Unsigned<T>(0) - static_cast<Unsigned<T>>(x));
    } else {
      return -x;
    }
  }
};

struct AbsOp {
  template <typename T>
  static constexpr bool kDefined = !kIsBool<T>;
  template <typename T>
  TENSORD_HOST_DEVICE T operator()(T x) const {
    if constexpr (kIsInt<T>) {
      return x < 0 ? Neg{}(x) : x;
    } else {
      return Abs(x);
    }
  }
};

// NaN stays NaN (PyTorch's relu).
struct Relu {
  template <typename T>
  static constexpr bool kDefined = !kIsBool<T>;
  template <typename T>
  TENSORD_HOST_DEVICE T operator()(T x) const {
    return (x > T(0) || IsNan(x)) ? x : T(0);
  }
};

#define TENSORD_FLOATING_UNARY(Name, expr)        \
  struct Name {                                   \
    template <typename T>                         \
    static constexpr bool kDefined = kIsFloat<T>; \
    template <typename T>                         \
    TENSORD_HOST_DEVICE T operator()(T x) const { \
      return expr;                                \
    }                                             \
  };
TENSORD_FLOATING_UNARY(ExpOp, Exp(x))
TENSORD_FLOATING_UNARY(LogOp, Log(x))
TENSORD_FLOATING_UNARY(SqrtOp, Sqrt(x))
TENSORD_FLOATING_UNARY(Sigmoid, T(1) / (T(1) + Exp(-x)))
TENSORD_FLOATING_UNARY(TanhOp, Tanh(x))
// PyTorch's silu: x / (1 + exp(-x)).
TENSORD_FLOATING_UNARY(Silu, x / (T(1) + Exp(-x)))
// gelu(x) = x/2 (1 + erf(x / sqrt 2)); approximate='tanh':
// x/2 (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3))), PyTorch's constants.
TENSORD_FLOATING_UNARY(Gelu,
                       T(0.5) * x * (T(1) + Erf(x * T(0.70710678118654752440))))
TENSORD_FLOATING_UNARY(GeluTanh,
                       T(0.5) * x *
                           (T(1) + Tanh(T(0.79788456080286535588) *
                                        (x + T(0.044715) * x * x * x))))
#undef TENSORD_FLOATING_UNARY

// F.leaky_relu: x, or x * negative_slope below 0 (NaN stays NaN).
struct LeakyRelu {
  double negative_slope;
  template <typename T>
  static constexpr bool kDefined = kIsFloat<T>;
  template <typename T>
  TENSORD_HOST_DEVICE T operator()(T x) const {
    return x > T(0) ? x : x * T(negative_slope);
  }
};

// F.elu: x above 0, alpha * (exp(x) - 1) elsewhere (PyTorch's expm1).
struct Elu {
  double alpha;
  template <typename T>
  static constexpr bool kDefined = kIsFloat<T>;
  template <typename T>
  TENSORD_HOST_DEVICE T operator()(T x) const {
    return x > T(0) ? x : T(alpha) * Expm1(x);
  }
};

// F.hardtanh: x clamped to [min_val, max_val] (NaN stays NaN); integers
// too.
struct Hardtanh {
  double min_val, max_val;
  template <typename T>
  static constexpr bool kDefined = !kIsBool<T>;
  template <typename T>
  TENSORD_HOST_DEVICE T operator()(T x) const {
    const T lo = static_cast<T>(min_val), hi = static_cast<T>(max_val);
    return x < lo ? lo : (x > hi ? hi : x);
  }
};

#include "core/op_visit.inc"  // generated: VisitUnaryOp over the rows

// torch.where's element: x where the condition holds, y elsewhere (any
// type; a pure selection, no arithmetic).
struct Select {
  template <typename T>
  TENSORD_HOST_DEVICE T operator()(Bool8 cond, T x, T y) const {
    return cond != 0 ? x : y;
  }
};

// ---- Reductions -----------------------------------------------------------
// Sum-like (sum, mean, norm): acc = sum of ReduceTerm over the elements,
// then ReduceFinish. Max-like (max, min, argmax): the element that Wins.

TENSORD_HOST_DEVICE constexpr bool IsSumLike(ReduceOp op) {
  return op == ReduceOp::kSum || op == ReduceOp::kMean || op == ReduceOp::kNorm;
}

// Whether `op` is defined on compute type T: mean and norm need floating.
template <typename T>
inline constexpr bool ReduceDefined(ReduceOp op) {
  return kIsFloat<T> || (op != ReduceOp::kMean && op != ReduceOp::kNorm);
}

// double for floating, wrapping uint64 for integers and bool.
template <typename T>
using SumAccumulator = std::conditional_t<kIsFloat<T>, double, uint64_t>;

template <typename T>
TENSORD_HOST_DEVICE SumAccumulator<T> ReduceTerm(ReduceOp op, T v) {
  if constexpr (kIsFloat<T>) {
    const double x = static_cast<double>(v);
    return op == ReduceOp::kNorm ? x * x : x;
  } else {
    return static_cast<uint64_t>(static_cast<int64_t>(v));
  }
}

// The result of a sum-like op over `n` terms.
template <typename T>
TENSORD_HOST_DEVICE T ReduceFinish(ReduceOp op, SumAccumulator<T> acc,
                                   int64_t n) {
  if constexpr (kIsFloat<T>) {
    const double r = op == ReduceOp::kNorm   ? Sqrt(acc)
                     : op == ReduceOp::kMean ? acc / static_cast<double>(n)
                                             : acc;
    return static_cast<T>(r);
  } else {
    return static_cast<T>(static_cast<int64_t>(acc));
  }
}

// Whether candidate (v at index i) beats the best so far (b at index j) for
// max/argmax, or min/argmin when `min`: PyTorch's GreaterOrNan/LessOrNan.
// NaN beats every number both ways (max and min propagate NaN, argmax and
// argmin point at it); equal values (NaN with NaN included) go to the
// smaller index.
template <typename T>
TENSORD_HOST_DEVICE bool Wins(bool min, T v, int64_t i, T b, int64_t j) {
  if (IsNan(v)) return IsNan(b) ? i < j : true;
  if (IsNan(b)) return false;
  if (v == b) return i < j;
  return min ? v < b : b < v;
}

// ---- Fills ----------------------------------------------------------------

// arange's element i = start + i * step. Integral start and step are exact
// in wrapping int64 for integer tensors (PyTorch's integer arange); double
// would lose precision above 2^53.
struct Arange {
  double start = 0, step = 1;
  bool exact = false;  // start and step integral and below 2^62
  uint64_t istart = 0, istep = 0;

  static Arange Make(double start, double step) {
    Arange a;
    a.start = start;
    a.step = step;
    const double lim = 0x1.0p62;
    a.exact = start == trunc(start) && step == trunc(step) &&
              fabs(start) < lim && fabs(step) < lim;
    if (a.exact) {
      a.istart = static_cast<uint64_t>(static_cast<int64_t>(start));
      a.istep = static_cast<uint64_t>(static_cast<int64_t>(step));
    }
    return a;
  }

  // Element i as compute type T.
  template <typename T>
  TENSORD_HOST_DEVICE T At(int64_t i) const {
    if constexpr (kIsInt<T>) {
      if (exact) {
        return static_cast<T>(
            static_cast<int64_t>(istart + static_cast<uint64_t>(i) * istep));
      }
    }
    return Convert<T, double>(start + static_cast<double>(i) * step);
  }
};

}  // namespace tensord::core::scalar

#endif  // TENSORD_CORE_BASE_SCALAR_OPS_H_

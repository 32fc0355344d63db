// Pins the PyTorch scalar semantics core/base/scalar_ops.h promises to the CPU and
// CUDA kernels alike: wrapping integers, bool as or/and, NaN propagation,
// saturating casts, double-accumulated reductions, exact integer arange.
#include "core/base/scalar_ops.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <limits>
#include <type_traits>

#include "core/base/half.h"
#include "core/base/op_kinds.h"

namespace tensord::core::scalar {
namespace {

constexpr float kNanF = std::numeric_limits<float>::quiet_NaN();
constexpr double kNan = std::numeric_limits<double>::quiet_NaN();
constexpr double kInf = std::numeric_limits<double>::infinity();

TEST(ScalarOpsTest, IntegerArithmeticWraps) {
  EXPECT_EQ(Add{}(INT32_MAX, 1), INT32_MIN);
  EXPECT_EQ(Add{}(INT64_MAX, int64_t{1}), INT64_MIN);
  EXPECT_EQ(Sub{}(INT32_MIN, 1), INT32_MAX);
  EXPECT_EQ(Sub{}(INT64_MIN, int64_t{1}), INT64_MAX);
  EXPECT_EQ(Mul{}(INT64_MIN, int64_t{-1}), INT64_MIN);
  EXPECT_EQ(Mul{}(65536, 65536), 0);
  EXPECT_EQ(Mul{}(-3, 7), -21);
  EXPECT_EQ(Neg{}(INT32_MIN), INT32_MIN);
  EXPECT_EQ(Neg{}(INT64_MIN), INT64_MIN);
  EXPECT_EQ(Neg{}(5), -5);
  EXPECT_EQ(AbsOp{}(INT32_MIN), INT32_MIN);
  EXPECT_EQ(AbsOp{}(INT64_MIN), INT64_MIN);
  EXPECT_EQ(AbsOp{}(-7), 7);
  EXPECT_EQ(Relu{}(-7), 0);
  EXPECT_EQ(Relu{}(int64_t{7}), 7);
}

TEST(ScalarOpsTest, SiluAndGeluAgainstKnownValues) {
  // Values from the definitions, computed independently in double.
  EXPECT_DOUBLE_EQ(Silu{}(1.0), 0.7310585786300049);
  EXPECT_DOUBLE_EQ(Silu{}(-2.0), -0.2384058440442351);
  EXPECT_DOUBLE_EQ(Gelu{}(1.0), 0.8413447460685429);
  EXPECT_DOUBLE_EQ(Gelu{}(-0.5), -0.15426876936299344);
  EXPECT_NEAR(GeluTanh{}(1.0), 0.8411919906082768, 1e-15);
  EXPECT_NEAR(GeluTanh{}(-0.5), -0.15428599017485606, 1e-15);
  EXPECT_FLOAT_EQ(Gelu{}(1.0f), 0.84134475f);
  EXPECT_EQ(Silu{}(0.0), 0.0);
  EXPECT_EQ(Gelu{}(0.0f), 0.0f);
  EXPECT_TRUE(std::isnan(Gelu{}(kNan)));
  EXPECT_FALSE(Silu::kDefined<int32_t>);
  EXPECT_FALSE(GeluTanh::kDefined<Bool8>);
}

TEST(ScalarOpsTest, ReluKeepsNan) {
  EXPECT_TRUE(std::isnan(Relu{}(kNan)));
  EXPECT_TRUE(std::isnan(Relu{}(kNanF)));
  EXPECT_EQ(Relu{}(-kInf), 0.0);
  EXPECT_EQ(Relu{}(2.5f), 2.5f);
}

TEST(ScalarOpsTest, BoolIsOrAndOnAnyNonzeroByte) {
  const Bool8 f = 0, t = 1, t7 = 7, t2 = 2;
  EXPECT_EQ(Add{}(f, f), 0);
  EXPECT_EQ(Add{}(t, t), 1);  // or, not 2
  EXPECT_EQ(Add{}(f, t7), 1);
  EXPECT_EQ(Add{}(t7, t2), 1);  // 7 + 2 would be 9
  EXPECT_EQ(Mul{}(t, f), 0);
  EXPECT_EQ(Mul{}(t7, t2), 1);                // and, not 14
  EXPECT_EQ(Mul{}(Bool8{16}, Bool8{16}), 1);  // 256 would wrap to 0
  EXPECT_EQ(Maximum{}(f, t), 1);
  EXPECT_EQ(Maximum{}(t, f), 1);
  EXPECT_EQ(Maximum{}(f, f), 0);
  EXPECT_EQ(Minimum{}(f, t), 0);
  EXPECT_EQ(Minimum{}(t, t), 1);
}

TEST(ScalarOpsTest, DefinedTypes) {
  EXPECT_TRUE(Add::kDefined<Bool8>);
  EXPECT_TRUE(Mul::kDefined<Bool8>);
  EXPECT_FALSE(Sub::kDefined<Bool8>);
  EXPECT_TRUE(Sub::kDefined<int32_t>);
  EXPECT_FALSE(PowOp::kDefined<Bool8>);
  EXPECT_TRUE(PowOp::kDefined<int64_t>);
  EXPECT_FALSE(Div::kDefined<int32_t>);
  EXPECT_FALSE(Div::kDefined<int64_t>);
  EXPECT_FALSE(Div::kDefined<Bool8>);
  EXPECT_TRUE(Div::kDefined<float>);
  EXPECT_TRUE(Eq::kDefined<Bool8>);
  EXPECT_TRUE(Ge::kComparison);
  EXPECT_FALSE(Maximum::kComparison);
  EXPECT_FALSE(Neg::kDefined<Bool8>);
  EXPECT_FALSE(AbsOp::kDefined<Bool8>);
  EXPECT_FALSE(Relu::kDefined<Bool8>);
  EXPECT_TRUE(Relu::kDefined<int32_t>);
  EXPECT_TRUE(ExpOp::kDefined<float>);
  EXPECT_TRUE(TanhOp::kDefined<double>);
  EXPECT_FALSE(ExpOp::kDefined<int32_t>);
  EXPECT_FALSE(LogOp::kDefined<int64_t>);
  EXPECT_FALSE(SqrtOp::kDefined<int32_t>);
  EXPECT_FALSE(Sigmoid::kDefined<int64_t>);
  EXPECT_FALSE(TanhOp::kDefined<Bool8>);
}

TEST(ScalarOpsTest, MaximumMinimumPropagateNan) {
  EXPECT_TRUE(std::isnan(Maximum{}(kNanF, 1.0f)));
  EXPECT_TRUE(std::isnan(Maximum{}(1.0f, kNanF)));
  EXPECT_TRUE(std::isnan(Minimum{}(kNan, -kInf)));
  EXPECT_TRUE(std::isnan(Minimum{}(-kInf, kNan)));
  EXPECT_EQ(Maximum{}(2.5, -3.0), 2.5);
  EXPECT_EQ(Maximum{}(-3.0, 2.5), 2.5);
  EXPECT_EQ(Minimum{}(2.5f, -3.0f), -3.0f);
  EXPECT_EQ(Minimum{}(-3.0f, 2.5f), -3.0f);
  EXPECT_EQ(Maximum{}(INT64_MIN, int64_t{-1}), -1);
  EXPECT_EQ(Minimum{}(INT32_MAX, -1), -1);
}

TEST(ScalarOpsTest, ComparisonsWithNan) {
  EXPECT_EQ(Eq{}(kNan, kNan), 0);
  EXPECT_EQ(Ne{}(kNan, kNan), 1);
  EXPECT_EQ(Lt{}(kNanF, 1.0f), 0);
  EXPECT_EQ(Le{}(1.0f, kNanF), 0);
  EXPECT_EQ(Gt{}(kNan, 1.0), 0);
  EXPECT_EQ(Ge{}(kNan, kNan), 0);
  EXPECT_EQ(Le{}(2, 2), 1);
  EXPECT_EQ(Lt{}(2, 2), 0);
  EXPECT_EQ(Gt{}(INT64_MAX, INT64_MIN), 1);
}

TEST(ScalarOpsTest, IntegerPowBySquaringWraps) {
  uint64_t want = 1;
  for (int k = 0; k < 40; ++k) want *= 3;
  EXPECT_EQ(PowOp{}(int64_t{3}, int64_t{40}), static_cast<int64_t>(want));
  EXPECT_LT(PowOp{}(int64_t{3}, int64_t{40}), 0);  // it did wrap
  EXPECT_EQ(PowOp{}(int64_t{3}, int64_t{39}), 4052555153018976267);
  EXPECT_EQ(PowOp{}(2, 31), INT32_MIN);
  EXPECT_EQ(PowOp{}(2, 32), 0);
  EXPECT_EQ(PowOp{}(-2, 3), -8);
  EXPECT_EQ(PowOp{}(0, 0), 1);
  EXPECT_EQ(PowOp{}(7, 0), 1);
  EXPECT_EQ(PowOp{}(-1, INT32_MAX), -1);
  // Negative exponents: 0, except for the bases 1 and -1.
  EXPECT_EQ(PowOp{}(2, -1), 0);
  EXPECT_EQ(PowOp{}(0, -1), 0);
  EXPECT_EQ(PowOp{}(1, -5), 1);
  EXPECT_EQ(PowOp{}(-1, -3), -1);
  EXPECT_EQ(PowOp{}(-1, -2), 1);
  EXPECT_EQ(PowOp{}(int64_t{-1}, INT64_MIN), 1);
  EXPECT_FLOAT_EQ(PowOp{}(2.0f, 0.5f), std::sqrt(2.0f));
}

TEST(ScalarOpsTest, FloatingUnaryInOwnPrecision) {
  EXPECT_TRUE(std::isinf(ExpOp{}(89.0f)));  // overflows float, not double
  EXPECT_FALSE(std::isinf(ExpOp{}(89.0)));
  EXPECT_DOUBLE_EQ(LogOp{}(std::exp(2.0)), 2.0);
  EXPECT_EQ(SqrtOp{}(16.0f), 4.0f);
  EXPECT_EQ(Sigmoid{}(0.0), 0.5);
  EXPECT_EQ(Sigmoid{}(-1000.0f), 0.0f);
  EXPECT_EQ(Sigmoid{}(1000.0f), 1.0f);
  EXPECT_EQ(TanhOp{}(-30.0), -1.0);
  EXPECT_FALSE(std::signbit(AbsOp{}(-0.0f)));
}

TEST(ScalarOpsTest, ConvertFloatingToIntegerSaturates) {
  EXPECT_EQ(Convert<int32_t>(1e30f), INT32_MAX);
  EXPECT_EQ(Convert<int32_t>(-1e30f), INT32_MIN);
  EXPECT_EQ(Convert<int32_t>(2147483648.0f), INT32_MAX);
  EXPECT_EQ(Convert<int32_t>(-2147483648.0f), INT32_MIN);
  EXPECT_EQ(Convert<int32_t>(2147483647.0), INT32_MAX);
  EXPECT_EQ(Convert<int32_t>(2147483646.9), 2147483646);
  EXPECT_EQ(Convert<int64_t>(9.3e18), INT64_MAX);
  EXPECT_EQ(Convert<int64_t>(9223372036854775808.0f), INT64_MAX);
  EXPECT_EQ(Convert<int64_t>(-9223372036854775808.0), INT64_MIN);
  EXPECT_EQ(Convert<int32_t>(kInf), INT32_MAX);
  EXPECT_EQ(Convert<int64_t>(-kInf), INT64_MIN);
  EXPECT_EQ(Convert<int32_t>(kNanF), 0);
  EXPECT_EQ(Convert<int64_t>(kNan), 0);
  // Truncation toward zero.
  EXPECT_EQ(Convert<int32_t>(-2.7), -2);
  EXPECT_EQ(Convert<int32_t>(2.7f), 2);
  EXPECT_EQ(Convert<int64_t>(-0.5), 0);
}

TEST(ScalarOpsTest, ConvertBoolAndIntegers) {
  EXPECT_EQ(Convert<Bool8>(kNan), 1);
  EXPECT_EQ(Convert<Bool8>(0.5f), 1);
  EXPECT_EQ(Convert<Bool8>(-0.0), 0);
  EXPECT_EQ(Convert<Bool8>(256), 1);  // not the low byte
  EXPECT_EQ(Convert<Bool8>(int64_t{1} << 40), 1);
  EXPECT_EQ(Convert<Bool8>(Bool8{7}), 1);
  EXPECT_EQ(Convert<Bool8>(Bool8{0}), 0);
  EXPECT_EQ(Convert<int32_t>(Bool8{7}), 1);
  EXPECT_EQ(Convert<int64_t>(Bool8{0}), 0);
  EXPECT_EQ(Convert<float>(Bool8{255}), 1.0f);
  EXPECT_EQ(Convert<double>(Bool8{1}), 1.0);
  // int64 -> int32 narrowing keeps the low 32 bits.
  EXPECT_EQ(Convert<int32_t>((int64_t{1} << 32) + 5), 5);
  EXPECT_EQ(Convert<int32_t>(int64_t{INT32_MAX} + 1), INT32_MIN);
  EXPECT_EQ(Convert<int32_t>(int64_t{-7}), -7);
  EXPECT_EQ(Convert<int64_t>(INT32_MIN), int64_t{INT32_MIN});
  EXPECT_EQ(Convert<float>(int64_t{(1 << 24) + 1}), 16777216.0f);
}

TEST(ScalarOpsTest, HalfComputesInFloatAndRoundsToNearestEven) {
  auto half = [](float x) { return HalfBitsToFloat(FloatToHalfBits(x)); };
  auto bf16 = [](float x) {
    return BFloat16BitsToFloat(FloatToBFloat16Bits(x));
  };
  EXPECT_EQ(half(Add{}(half(2048.0f), half(1.0f))), 2048.0f);  // tie: even
  EXPECT_EQ(half(Add{}(half(2048.0f), half(3.0f))), 2052.0f);
  EXPECT_TRUE(std::isinf(half(Mul{}(half(300.0f), half(300.0f)))));
  EXPECT_EQ(bf16(Add{}(bf16(256.0f), bf16(1.0f))), 256.0f);
  EXPECT_EQ(bf16(Add{}(bf16(256.0f), bf16(3.0f))), 260.0f);
  EXPECT_TRUE(std::isnan(half(Maximum{}(HalfBitsToFloat(0x7e00), 1.0f))));
  EXPECT_EQ(Convert<int32_t>(HalfBitsToFloat(0x7c00)), INT32_MAX);  // +inf
  EXPECT_EQ(Convert<Bool8>(HalfBitsToFloat(0x8000)), 0);            // -0
}

TEST(ScalarOpsTest, ReduceDefinedAndSumLike) {
  for (ReduceOp op : {ReduceOp::kMean, ReduceOp::kNorm}) {
    EXPECT_FALSE(ReduceDefined<int32_t>(op));
    EXPECT_FALSE(ReduceDefined<int64_t>(op));
    EXPECT_FALSE(ReduceDefined<Bool8>(op));
    EXPECT_TRUE(ReduceDefined<float>(op));
    EXPECT_TRUE(ReduceDefined<double>(op));
  }
  for (ReduceOp op :
       {ReduceOp::kSum, ReduceOp::kMax, ReduceOp::kMin, ReduceOp::kArgmax}) {
    EXPECT_TRUE(ReduceDefined<int32_t>(op));
    EXPECT_TRUE(ReduceDefined<Bool8>(op));
  }
  EXPECT_TRUE(IsSumLike(ReduceOp::kSum));
  EXPECT_TRUE(IsSumLike(ReduceOp::kMean));
  EXPECT_TRUE(IsSumLike(ReduceOp::kNorm));
  EXPECT_FALSE(IsSumLike(ReduceOp::kMax));
  EXPECT_FALSE(IsSumLike(ReduceOp::kMin));
  EXPECT_FALSE(IsSumLike(ReduceOp::kArgmax));
  EXPECT_TRUE((std::is_same_v<SumAccumulator<float>, double>));
  EXPECT_TRUE((std::is_same_v<SumAccumulator<int32_t>, uint64_t>));
  EXPECT_TRUE((std::is_same_v<SumAccumulator<Bool8>, uint64_t>));
}

TEST(ScalarOpsTest, IntegerSumsWrapIn64Bits) {
  const ReduceOp kSum = ReduceOp::kSum;
  SumAccumulator<int64_t> acc = 0;
  acc += ReduceTerm(kSum, INT64_MAX);
  acc += ReduceTerm(kSum, int64_t{1});
  EXPECT_EQ(ReduceFinish<int64_t>(kSum, acc, 2), INT64_MIN);
  SumAccumulator<int32_t> acc32 = 0;
  for (int32_t v : {INT32_MAX, INT32_MAX, -5}) acc32 += ReduceTerm(kSum, v);
  // Widened before summing: the int64 result does not wrap at 32 bits.
  EXPECT_EQ(static_cast<int64_t>(acc32), int64_t{2} * INT32_MAX - 5);
  EXPECT_EQ(ReduceFinish<int32_t>(kSum, ReduceTerm(kSum, -3), 1), -3);
  SumAccumulator<Bool8> bacc = 0;
  for (int k = 0; k < 300; ++k) bacc += ReduceTerm(kSum, Bool8{1});
  EXPECT_EQ(static_cast<int64_t>(bacc), 300);
}

TEST(ScalarOpsTest, FloatingReductionsAccumulateInDouble) {
  const ReduceOp kSum = ReduceOp::kSum;
  SumAccumulator<float> acc = ReduceTerm(kSum, 1e8f);
  float naive = 1e8f;
  for (int k = 0; k < 1000; ++k) {
    acc += ReduceTerm(kSum, 1.0f);
    naive += 1.0f;
  }
  EXPECT_EQ(naive, 1e8f);  // float alone loses every term
  EXPECT_EQ(acc, 100001000.0);
  EXPECT_EQ(ReduceFinish<float>(kSum, acc, 1001), 100001000.0f);
  // Mean divides by n in double: 4e38 overflows float, the mean does not.
  SumAccumulator<float> big = 0;
  for (int k = 0; k < 4; ++k) big += ReduceTerm(ReduceOp::kMean, 1e38f);
  EXPECT_FLOAT_EQ(ReduceFinish<float>(ReduceOp::kMean, big, 4), 1e38f);
  EXPECT_EQ(ReduceFinish<double>(ReduceOp::kMean, 10.0, 4), 2.5);
  // Norm: sqrt of the sum of squares, squared in double.
  const ReduceOp kNorm = ReduceOp::kNorm;
  EXPECT_EQ(ReduceFinish<float>(
                kNorm, ReduceTerm(kNorm, 3.0f) + ReduceTerm(kNorm, -4.0f), 2),
            5.0f);
  const double sq = ReduceTerm(kNorm, 1e20f) + ReduceTerm(kNorm, 1e20f);
  EXPECT_FLOAT_EQ(ReduceFinish<float>(kNorm, sq, 2),
                  static_cast<float>(std::sqrt(2.0) * 1e20f));
  EXPECT_EQ(ReduceTerm(kSum, -2.0), -2.0);  // sum does not square
}

TEST(ScalarOpsTest, WinsBreaksTiesByFirstIndex) {
  for (bool min : {false, true}) {
    EXPECT_TRUE(Wins(min, 3, 1, 3, 4)) << min;   // tie, smaller index
    EXPECT_FALSE(Wins(min, 3, 4, 3, 1)) << min;  // tie, larger index
    EXPECT_TRUE(Wins(min, kNan, 1, kNan, 4)) << min;
    EXPECT_FALSE(Wins(min, kNan, 4, kNan, 1)) << min;
    EXPECT_TRUE(Wins(min, INT64_MIN, 0, INT64_MIN, 1)) << min;
  }
  EXPECT_TRUE(Wins(false, 5, 9, 3, 0));  // max: larger wins at any index
  EXPECT_FALSE(Wins(false, 3, 0, 5, 9));
  EXPECT_TRUE(Wins(true, 3, 9, 5, 0));  // min: smaller wins at any index
  EXPECT_FALSE(Wins(true, 5, 0, 3, 9));
  EXPECT_TRUE(Wins(true, -kInf, 9, 1.0, 0));
}

TEST(ScalarOpsTest, MaxAndMinPropagateNan) {
  // PyTorch's GreaterOrNan / LessOrNan: NaN beats any number for max and
  // for min alike, whatever the index; a number never beats NaN.
  for (bool min : {false, true}) {
    EXPECT_TRUE(Wins(min, kNan, 9, kInf, 0)) << min;
    EXPECT_TRUE(Wins(min, kNan, 9, -kInf, 0)) << min;
    EXPECT_FALSE(Wins(min, kInf, 0, kNan, 9)) << min;
    EXPECT_FALSE(Wins(min, -kInf, 0, kNan, 9)) << min;
    EXPECT_TRUE(Wins(min, kNanF, 3, 0.0f, 1)) << min;
  }
}

TEST(ScalarOpsTest, ArangeExactForIntegralStartAndStep) {
  const Arange a = Arange::Make(0x1.0p53, 1);
  ASSERT_TRUE(a.exact);
  // In double, 2^53 + 1 would round back to 2^53.
  EXPECT_EQ(a.At<int64_t>(1), (int64_t{1} << 53) + 1);
  EXPECT_EQ(a.At<int64_t>(3), (int64_t{1} << 53) + 3);
  const Arange b = Arange::Make(1, 1);
  EXPECT_EQ(b.At<int64_t>(int64_t{1} << 53), (int64_t{1} << 53) + 1);
  const Arange c = Arange::Make(-5, -3);
  ASSERT_TRUE(c.exact);
  EXPECT_EQ(c.At<int32_t>(4), -17);
  EXPECT_EQ(c.At<float>(4), -17.0f);
  EXPECT_TRUE(Arange::Make(0x1.0p62 - 1024, 1).exact);
}

TEST(ScalarOpsTest, ArangeUsesDoubleOtherwise) {
  const Arange half_step = Arange::Make(0, 0.5);
  EXPECT_FALSE(half_step.exact);
  EXPECT_EQ(half_step.At<float>(3), 1.5f);
  EXPECT_EQ(half_step.At<double>(5), 2.5);
  EXPECT_EQ(half_step.At<int64_t>(3), 1);  // Convert truncates
  EXPECT_EQ(half_step.At<Bool8>(1), 1);
  EXPECT_FALSE(Arange::Make(0.5, 1).exact);
  EXPECT_FALSE(Arange::Make(0x1.0p62, 1).exact);
  EXPECT_FALSE(Arange::Make(-0x1.0p62, 1).exact);
  EXPECT_FALSE(Arange::Make(0, 0x1.0p62).exact);
  EXPECT_EQ(Arange::Make(0x1.0p62, 1).At<int64_t>(0), int64_t{1} << 62);
  EXPECT_EQ(Arange::Make(1e30, 1).At<int64_t>(0), INT64_MAX);  // saturates
  EXPECT_FALSE(Arange::Make(kInf, 1).exact);
  EXPECT_EQ(Arange::Make(-kInf, 1).At<int32_t>(0), INT32_MIN);
  EXPECT_FALSE(Arange::Make(kNan, 1).exact);
  EXPECT_EQ(Arange::Make(kNan, 1).At<int32_t>(0), 0);
}

// The value each binary op gives on (7, 2) and on (2, 2), in double.
double BinaryExpected(BinaryOp op, bool equal) {
  constexpr double kDistinct[] = {9, 5, 14, 3.5, 7, 2, 49, 0, 1, 0, 0, 1, 1};
  constexpr double kEqual[] = {4, 0, 4, 1, 2, 2, 4, 1, 0, 0, 1, 0, 1};
  return (equal ? kEqual : kDistinct)[static_cast<int>(op)];
}

TEST(ScalarOpsTest, VisitBinaryOpCallsTheMatchingFunctor) {
  for (int i = static_cast<int>(BinaryOp::kAdd);
       i <= static_cast<int>(BinaryOp::kGe); ++i) {
    const BinaryOp op = static_cast<BinaryOp>(i);
    for (bool equal : {false, true}) {
      double got = -1;
      const double x = equal ? 2 : 7;
      EXPECT_TRUE(VisitBinaryOp(op, [&](auto fn) {
        got = static_cast<double>(fn(x, 2.0));
        EXPECT_EQ(decltype(fn)::kComparison, op >= BinaryOp::kEq);
      }));
      EXPECT_EQ(got, BinaryExpected(op, equal)) << i << " " << equal;
    }
  }
  int calls = 0;
  EXPECT_FALSE(
      VisitBinaryOp(static_cast<BinaryOp>(99), [&](auto) { ++calls; }));
  EXPECT_EQ(calls, 0);
}

TEST(ScalarOpsTest, VisitUnaryOpCallsTheMatchingFunctor) {
  for (double x : {4.0, 0.25}) {
    const double want[] = {-x,
                           x,
                           std::exp(x),
                           std::log(x),
                           std::sqrt(x),
                           x,
                           1 / (1 + std::exp(-x)),
                           std::tanh(x)};
    for (int i = static_cast<int>(UnaryOp::kNeg);
         i <= static_cast<int>(UnaryOp::kTanh); ++i) {
      const UnaryOp op = static_cast<UnaryOp>(i);
      double got = kNan;
      bool int_defined = true;
      EXPECT_TRUE(VisitUnaryOp(op, 0, 0, [&](auto fn) {
        got = fn(x);
        int_defined = decltype(fn)::template kDefined<int32_t>;
      }));
      EXPECT_DOUBLE_EQ(got, want[i]) << i << " " << x;
      EXPECT_EQ(int_defined, op == UnaryOp::kNeg || op == UnaryOp::kAbs ||
                                 op == UnaryOp::kRelu)
          << i;
    }
  }
  // Relu and Abs differ on negatives.
  double relu = 1;
  VisitUnaryOp(UnaryOp::kRelu, 0, 0, [&](auto fn) { relu = fn(-3.0); });
  EXPECT_EQ(relu, 0.0);
  // The ops with arguments get them: leaky_relu's negative_slope, elu's
  // alpha, hardtanh's min_val and max_val (which alone takes integers).
  auto at = [](UnaryOp op, double a, double b, double x) {
    double got = kNan;
    EXPECT_TRUE(VisitUnaryOp(op, a, b, [&](auto fn) { got = fn(x); }));
    return got;
  };
  EXPECT_DOUBLE_EQ(at(UnaryOp::kLeakyRelu, 0.2, 0, -2), -0.4);
  EXPECT_DOUBLE_EQ(at(UnaryOp::kLeakyRelu, 0.2, 0, 3), 3);
  EXPECT_DOUBLE_EQ(at(UnaryOp::kElu, 1.5, 0, -1), 1.5 * std::expm1(-1.0));
  EXPECT_DOUBLE_EQ(at(UnaryOp::kElu, 1.5, 0, 2), 2);
  EXPECT_DOUBLE_EQ(at(UnaryOp::kHardtanh, -0.5, 1.25, 3), 1.25);
  EXPECT_DOUBLE_EQ(at(UnaryOp::kHardtanh, -0.5, 1.25, -3), -0.5);
  EXPECT_DOUBLE_EQ(at(UnaryOp::kHardtanh, -0.5, 1.25, 0.75), 0.75);
  EXPECT_TRUE(std::isnan(at(UnaryOp::kHardtanh, -1, 1, kNan)));
  EXPECT_TRUE(std::isnan(at(UnaryOp::kLeakyRelu, 0.1, 0, kNan)));
  int32_t clamped = 0;
  VisitUnaryOp(UnaryOp::kHardtanh, -1, 1, [&](auto fn) {
    if constexpr (decltype(fn)::template kDefined<int32_t>) {
      clamped = fn(int32_t{-7});
    }
  });
  EXPECT_EQ(clamped, -1);
  VisitUnaryOp(UnaryOp::kLeakyRelu, 0.1, 0, [&](auto fn) {
    EXPECT_FALSE(decltype(fn)::template kDefined<int32_t>);
  });
  int calls = 0;
  EXPECT_FALSE(
      VisitUnaryOp(static_cast<UnaryOp>(-1), 0, 0, [&](auto) { ++calls; }));
  EXPECT_EQ(calls, 0);
}

}  // namespace
}  // namespace tensord::core::scalar

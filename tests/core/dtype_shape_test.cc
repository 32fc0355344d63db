#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cstdint>
#include <vector>

#include "core/base/dtype.h"
#include "core/base/shape.h"

namespace tensord::core {
namespace {

using ::testing::HasSubstr;

constexpr DType kF32 = DType::kFloat32, kF64 = DType::kFloat64,
                kI32 = DType::kInt32, kI64 = DType::kInt64,
                kBool = DType::kBool, kF16 = DType::kFloat16,
                kBF16 = DType::kBFloat16;

Shape S(std::vector<int64_t> dims) { return Shape::Make(dims).value(); }

TEST(DTypeTest, SizesAndNames) {
  EXPECT_EQ(DTypeSize(kF32), 4u);
  EXPECT_EQ(DTypeSize(kF64), 8u);
  EXPECT_EQ(DTypeSize(kI32), 4u);
  EXPECT_EQ(DTypeSize(kI64), 8u);
  EXPECT_EQ(DTypeSize(kBool), 1u);
  EXPECT_EQ(DTypeSize(kF16), 2u);
  EXPECT_EQ(DTypeSize(kBF16), 2u);
  EXPECT_EQ(DTypeName(kBF16), "bfloat16");
  EXPECT_EQ(DTypeName(kI64), "int64");
}

TEST(DTypeTest, ParseAcceptsNamesAndAliases) {
  EXPECT_EQ(ParseDType("float").value(), kF32);
  EXPECT_EQ(ParseDType("double").value(), kF64);
  EXPECT_EQ(ParseDType("long").value(), kI64);
  EXPECT_EQ(ParseDType("int").value(), kI32);
  EXPECT_EQ(ParseDType("half").value(), kF16);
  EXPECT_EQ(ParseDType("bfloat16").value(), kBF16);
  EXPECT_EQ(ParseDType("bool").value(), kBool);
  auto bad = ParseDType("complex64");
  EXPECT_EQ(bad.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(bad.status().message()), HasSubstr("'complex64'"));
}

TEST(DTypeTest, Categories) {
  EXPECT_TRUE(IsFloating(kF16));
  EXPECT_TRUE(IsFloating(kBF16));
  EXPECT_FALSE(IsFloating(kI64));
  EXPECT_TRUE(IsIntegral(kI32));
  EXPECT_FALSE(IsIntegral(kBool));
}

TEST(DTypeTest, PromoteTypesTable) {
  // torch.promote_types, row by row.
  struct Case {
    DType a, b, want;
  };
  const Case cases[] = {
      {kBool, kBool, kBool}, {kBool, kI32, kI32}, {kBool, kF16, kF16},
      {kI32, kI64, kI64},    {kI64, kF16, kF16},  {kI64, kBF16, kBF16},
      {kI32, kF32, kF32},    {kI64, kF32, kF32},  {kF16, kBF16, kF32},
      {kF16, kF32, kF32},    {kBF16, kF64, kF64}, {kF32, kF64, kF64},
      {kI64, kF64, kF64},    {kBool, kF64, kF64},
  };
  for (const Case& c : cases) {
    EXPECT_EQ(PromoteTypes(c.a, c.b), c.want)
        << DTypeName(c.a) << " " << DTypeName(c.b);
    EXPECT_EQ(PromoteTypes(c.b, c.a), c.want)
        << DTypeName(c.b) << " " << DTypeName(c.a);
  }
}

TEST(DTypeTest, ResultTypeZeroDimRules) {
  // Same "dimensionedness": plain promotion.
  EXPECT_EQ(ResultType(kI32, false, kF64, false), kF64);
  EXPECT_EQ(ResultType(kI32, true, kI64, true), kI64);
  // A 0-d operand of the same category does not raise the dtype.
  EXPECT_EQ(ResultType(kI32, false, kI64, true), kI32);
  EXPECT_EQ(ResultType(kF32, false, kF64, true), kF32);
  EXPECT_EQ(ResultType(kF16, true, kF32, false), kF32);
  EXPECT_EQ(ResultType(kF64, true, kF16, false), kF16);
  // ... nor one of a lower category.
  EXPECT_EQ(ResultType(kF32, false, kI64, true), kF32);
  EXPECT_EQ(ResultType(kI32, false, kBool, true), kI32);
  // A 0-d operand of a higher category does.
  EXPECT_EQ(ResultType(kI32, false, kF64, true), kF64);
  EXPECT_EQ(ResultType(kBool, false, kI64, true), kI64);
  EXPECT_EQ(ResultType(kF32, true, kI32, false), kF32);
}

TEST(ShapeTest, MakeValid) {
  Shape s = S({2, 3, 4});
  EXPECT_EQ(s.rank(), 3);
  EXPECT_EQ(s.NumElements(), 24);
  EXPECT_EQ(s.ToString(), "[2, 3, 4]");
  EXPECT_EQ(s.ByteSize(kF64).value(), 192u);
  Shape scalar;
  EXPECT_EQ(scalar.rank(), 0);
  EXPECT_EQ(scalar.NumElements(), 1);
  EXPECT_EQ(scalar.ToString(), "[]");
  EXPECT_EQ(S({}), scalar);
  EXPECT_EQ(S({0, 3}).NumElements(), 0);
  EXPECT_EQ(S({0, 3}).ByteSize(kF32).value(), 0u);
  EXPECT_EQ(S({1, 1, 1, 1, 1, 1, 1, 1}).rank(), 8);
}

TEST(ShapeTest, RejectsNegativeDim) {
  auto s = Shape::Make(std::vector<int64_t>{2, -3});
  EXPECT_EQ(s.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(s.status().message(), "dimension 1 is -3; dims must be >= 0");
}

TEST(ShapeTest, RejectsRankNine) {
  auto s = Shape::Make(std::vector<int64_t>(9, 1));
  EXPECT_EQ(s.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(s.status().message(), "rank 9 exceeds the maximum rank 8");
}

TEST(ShapeTest, RejectsElementCountOverflow) {
  auto s =
      Shape::Make(std::vector<int64_t>{int64_t{1} << 40, int64_t{1} << 40});
  EXPECT_EQ(s.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(s.status().message()),
              HasSubstr("[1099511627776, 1099511627776]"));
  EXPECT_THAT(std::string(s.status().message()), HasSubstr("overflow"));
  // A zero dim anywhere makes any shape empty and valid.
  EXPECT_TRUE(
      Shape::Make(std::vector<int64_t>{int64_t{1} << 40, int64_t{1} << 40, 0})
          .ok());
}

TEST(ShapeTest, ByteSizeLimit) {
  EXPECT_FALSE(Shape::Make(std::vector<int64_t>{int64_t{1} << 62, 4}).ok());
  Shape big = S({int64_t{1} << 46, 4});  // 2^48 elements
  auto bytes = big.ByteSize(kF32);
  EXPECT_EQ(bytes.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(bytes.status().message()),
              HasSubstr("shape [70368744177664, 4] with dtype float32 is too "
                        "large"));
  EXPECT_EQ(big.ByteSize(kBool).value(), uint64_t{1} << 48);
}

TEST(BroadcastTest, Shapes) {
  EXPECT_EQ(BroadcastShapes(S({2, 3}), S({3})).value(), S({2, 3}));
  EXPECT_EQ(BroadcastShapes(S({4, 1, 3}), S({2, 1})).value(), S({4, 2, 3}));
  EXPECT_EQ(BroadcastShapes(S({}), S({5})).value(), S({5}));
  EXPECT_EQ(BroadcastShapes(S({0, 1}), S({1, 4})).value(), S({0, 4}));
  EXPECT_EQ(BroadcastShapes(S({}), S({})).value(), S({}));
}

TEST(BroadcastTest, MismatchMessage) {
  auto r = BroadcastShapes(S({2, 3}), S({4}));
  EXPECT_EQ(r.status().code(), absl::StatusCode::kInvalidArgument);
  // torch's words (infer_size), the first mismatch from the right.
  EXPECT_EQ(r.status().message(),
            "The size of tensor a (3) must match the size of tensor b (4) at "
            "non-singleton dimension 1");
  EXPECT_EQ(BroadcastShapes(S({2, 3}), S({3, 2})).status().message(),
            "The size of tensor a (3) must match the size of tensor b (2) at "
            "non-singleton dimension 1");
  auto r2 = BroadcastShapes(S({5, 2, 3}), S({4, 3}));
  EXPECT_THAT(std::string(r2.status().message()),
              HasSubstr("tensor a (2) must match the size of tensor b (4) at "
                        "non-singleton dimension 1"));
}

TEST(BroadcastTest, Strides) {
  EXPECT_EQ(BroadcastStrides(S({2, 3}), S({2, 3})),
            (std::vector<int64_t>{3, 1}));
  EXPECT_EQ(BroadcastStrides(S({3}), S({2, 3})), (std::vector<int64_t>{0, 1}));
  EXPECT_EQ(BroadcastStrides(S({2, 1}), S({2, 3})),
            (std::vector<int64_t>{1, 0}));
  EXPECT_EQ(BroadcastStrides(S({}), S({2, 3})), (std::vector<int64_t>{0, 0}));
  EXPECT_EQ(BroadcastStrides(S({4, 1, 3}), S({2, 4, 5, 3})),
            (std::vector<int64_t>{0, 3, 0, 1}));
}

TEST(ShapeTest, NumElementsOfADimRange) {
  const Shape s = *Shape::Make(std::vector<int64_t>{2, 3, 4});
  EXPECT_EQ(s.NumElements(0, 1), 2);
  EXPECT_EQ(s.NumElements(1, 3), 12);
  EXPECT_EQ(s.NumElements(2, 2), 1);  // empty range
  EXPECT_EQ(s.NumElements(0, 3), s.NumElements());
  // A zero dim makes any range holding it 0; a range past int64 (possible
  // only beside a zero dim) saturates instead of overflowing.
  const int64_t big = int64_t{1} << 40;
  const Shape empty = *Shape::Make(std::vector<int64_t>{0, big, big});
  EXPECT_EQ(empty.NumElements(0, 3), 0);
  EXPECT_EQ(empty.NumElements(1, 2), big);
  EXPECT_EQ(empty.NumElements(1, 3), INT64_MAX);
  const Shape late = *Shape::Make(std::vector<int64_t>{big, big, 0});
  EXPECT_EQ(late.NumElements(0, 3), 0);  // the zero after the overflow
  // Broadcast strides of such a shape saturate too (never followed).
  EXPECT_EQ(BroadcastStrides(empty, empty),
            (std::vector<int64_t>{INT64_MAX, big, 1}));
}

}  // namespace
}  // namespace tensord::core

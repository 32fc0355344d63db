// The planner's rules, each with its message, with no device and no
// runtime (core/planner/planner.h).
#include "core/planner/planner.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cstdint>
#include <string>
#include <vector>

#include "core/base/error_kind.h"

namespace tensord::core {
namespace {

using ::testing::HasSubstr;

Shape S(std::vector<int64_t> dims) { return *Shape::Make(dims); }

std::string Message(const absl::Status& s) { return std::string(s.message()); }

// A device that computes every op in every dtype: the op's own rules alone.
Capabilities Everything() {
  Capabilities caps;
  for (int op = 0; op < kOpKindCount; ++op) {
    caps.AllowAll(static_cast<OpKind>(op));
  }
  return caps;
}
const Capabilities kEverything = Everything();
const Target kAnyDevice{kEverything, "test:0"};

TEST(PlannerTest, WrapDim) {
  EXPECT_EQ(*WrapDim(-1, 3), 2);
  EXPECT_EQ(*WrapDim(0, 0), 0);  // a 0-d tensor accepts 0 and -1
  EXPECT_EQ(*WrapDim(-1, 0), 0);
  absl::StatusOr<int> bad = WrapDim(2, 2);
  EXPECT_EQ(bad.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(Message(bad.status()),
            "Dimension out of range (expected to be in range of [-2, 1], but "
            "got 2)");
}

TEST(PlannerTest, MatMulShapes) {
  auto p = PlanMatMul(DType::kFloat32, S({2, 3}), DType::kFloat32, S({3, 4}),
                      kAnyDevice);
  ASSERT_TRUE(p.ok());
  EXPECT_EQ(p->out, S({2, 4}));
  EXPECT_EQ(p->m, 2);
  EXPECT_EQ(p->n, 4);
  EXPECT_EQ(p->k, 3);
  // 1-D operands: row and column, the added dim dropped.
  EXPECT_EQ(
      PlanMatMul(DType::kFloat32, S({3}), DType::kFloat32, S({3}), kAnyDevice)
          ->out,
      S({}));
  EXPECT_EQ(PlanMatMul(DType::kFloat32, S({3}), DType::kFloat32, S({3, 5}),
                       kAnyDevice)
                ->out,
            S({5}));
  EXPECT_EQ(PlanMatMul(DType::kFloat32, S({2, 3}), DType::kFloat32, S({3}),
                       kAnyDevice)
                ->out,
            S({2}));
  // Batch dims broadcast.
  auto batched = PlanMatMul(DType::kFloat64, S({5, 1, 2, 3}), DType::kFloat64,
                            S({4, 3, 6}), kAnyDevice);
  ASSERT_TRUE(batched.ok());
  EXPECT_EQ(batched->out, S({5, 4, 2, 6}));
  EXPECT_EQ(batched->batch, S({5, 4}));
  EXPECT_EQ(batched->a_batch, S({5, 1}));
  EXPECT_EQ(batched->b_batch, S({4}));
}

TEST(PlannerTest, MatMulErrorsNameTheShapes) {
  auto scalar =
      PlanMatMul(DType::kFloat32, S({}), DType::kFloat32, S({3}), kAnyDevice);
  EXPECT_EQ(scalar.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(Message(scalar.status()),
              HasSubstr("both arguments to matmul need to be at least 1D, but "
                        "they are 0D and 1D"));
  // torch.matmul's words for each of its paths (mv, dot, mm, a folded
  // batch, bmm over broadcast batch dims).
  auto dtypes =
      PlanMatMul(DType::kFloat32, S({2, 3}), DType::kInt64, S({3}), kAnyDevice);
  EXPECT_EQ(Message(dtypes.status()),
            "expected scalar type Float but found Long");
  auto dot =
      PlanMatMul(DType::kFloat32, S({3}), DType::kFloat32, S({4}), kAnyDevice);
  EXPECT_EQ(Message(dot.status()),
            "inconsistent tensor size, expected tensor [3] and src [4] to have "
            "the same number of elements, but got 3 and 4 elements "
            "respectively");
  auto inner = PlanMatMul(DType::kFloat32, S({2, 3}), DType::kFloat32,
                          S({4, 5}), kAnyDevice);
  EXPECT_EQ(inner.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(Message(inner.status()),
            "mat1 and mat2 shapes cannot be multiplied (2x3 and 4x5)");
  auto folded = PlanMatMul(DType::kFloat32, S({2, 2, 3}), DType::kFloat32,
                           S({4}), kAnyDevice);
  EXPECT_EQ(Message(folded.status()), "size mismatch, got 4, 4x3,4");
  auto batch = PlanMatMul(DType::kFloat32, S({2, 2, 3}), DType::kFloat32,
                          S({3, 3, 4}), kAnyDevice);
  EXPECT_EQ(Message(batch.status()),
            "The size of tensor a (2) must match the size of tensor b (3) at "
            "non-singleton dimension 0");
  auto bmm = PlanMatMul(DType::kFloat32, S({2, 2, 3}), DType::kFloat32,
                        S({2, 4, 5}), kAnyDevice);
  EXPECT_EQ(Message(bmm.status()),
            "Expected size for first two dimensions of batch2 tensor to be: "
            "[2, 3] but got: [2, 4].");
}

TEST(PlannerTest, ReduceDtypesAndDims) {
  auto sum = PlanReduce(ReduceOp::kSum, DType::kInt32, S({2, 3, 4}), 1, false,
                        kAnyDevice);
  ASSERT_TRUE(sum.ok());
  EXPECT_EQ(sum->compute, DType::kInt64);  // integer sums widen
  EXPECT_EQ(sum->out_dtype, DType::kInt64);
  EXPECT_EQ(sum->out, S({2, 4}));
  EXPECT_EQ(sum->dims.outer, 2);
  EXPECT_EQ(sum->dims.n, 3);
  EXPECT_EQ(sum->dims.inner, 4);
  auto keep = PlanReduce(ReduceOp::kMax, DType::kFloat32, S({2, 3}), -1, true,
                         kAnyDevice);
  EXPECT_EQ(keep->out, S({2, 1}));
  EXPECT_EQ(keep->compute, DType::kFloat32);
  auto all = PlanReduce(ReduceOp::kMean, DType::kFloat64, S({2, 3}),
                        std::nullopt, true, kAnyDevice);
  EXPECT_EQ(all->out, S({1, 1}));
  EXPECT_EQ(all->dims.n, 6);
  auto argmax = PlanReduce(ReduceOp::kArgmax, DType::kFloat32, S({4}),
                           std::nullopt, false, kAnyDevice);
  EXPECT_EQ(argmax->out_dtype, DType::kInt64);
  EXPECT_EQ(argmax->out, S({}));
}

TEST(PlannerTest, ReduceErrors) {
  auto mean = PlanReduce(ReduceOp::kMean, DType::kInt64, S({3}), std::nullopt,
                         false, kAnyDevice);
  EXPECT_EQ(mean.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(Message(mean.status()),
              HasSubstr("mean(): could not infer output dtype. Input dtype "
                        "must be either a floating point or complex dtype. "
                        "Got: Long"));
  auto norm = PlanReduce(ReduceOp::kNorm, DType::kBool, S({3}), std::nullopt,
                         false, kAnyDevice);
  EXPECT_EQ(norm.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(Message(norm.status()),
              HasSubstr("norm(): input dtype should be either floating point "
                        "or complex. Got Bool instead."));
  auto empty = PlanReduce(ReduceOp::kMax, DType::kFloat32, S({2, 0}), 1, false,
                          kAnyDevice);
  EXPECT_EQ(empty.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(Message(empty.status()),
            "max(): Expected reduction dim 1 to have non-zero size.");
  EXPECT_EQ(ErrorKindOf(empty.status()), ErrorKind::kIndexError);
  auto all = PlanReduce(ReduceOp::kMax, DType::kFloat32, S({2, 0}),
                        std::nullopt, false, kAnyDevice);
  EXPECT_EQ(Message(all.status()),
            "max(): Expected reduction dim to be specified for input.numel() "
            "== 0. Specify the reduction dim with the 'dim' argument.");
  EXPECT_EQ(ErrorKindOf(all.status()), ErrorKind::kRuntimeError);
  // Sum over an empty dim is fine (zeros); a bad dim is not.
  EXPECT_TRUE(PlanReduce(ReduceOp::kSum, DType::kFloat32, S({2, 0}), 1, false,
                         kAnyDevice)
                  .ok());
  EXPECT_EQ(
      PlanReduce(ReduceOp::kSum, DType::kFloat32, S({2}), 3, false, kAnyDevice)
          .status()
          .code(),
      absl::StatusCode::kInvalidArgument);
}

TEST(PlannerTest, ReduceOverSeveralDims) {
  const Shape x = S({2, 3, 4, 5});
  // Adjacent dims: one [outer, n, inner] view, no permute.
  const int64_t mid[] = {2, 1};
  auto adjacent =
      PlanReduce(ReduceOp::kSum, DType::kFloat32, x, mid, false, kAnyDevice);
  ASSERT_TRUE(adjacent.ok()) << adjacent.status();
  EXPECT_TRUE(adjacent->perm.empty());
  EXPECT_EQ(adjacent->dims.outer, 2);
  EXPECT_EQ(adjacent->dims.n, 12);
  EXPECT_EQ(adjacent->dims.inner, 5);
  EXPECT_EQ(adjacent->out, S({2, 5}));
  // Apart: the kept dims first, the reduced ones last, after a permute.
  const int64_t apart[] = {0, -2};
  auto mean =
      PlanReduce(ReduceOp::kMean, DType::kFloat64, x, apart, true, kAnyDevice);
  ASSERT_TRUE(mean.ok()) << mean.status();
  EXPECT_EQ(mean->perm, (std::vector<int64_t>{1, 3, 0, 2}));
  EXPECT_EQ(mean->dims.outer, 15);
  EXPECT_EQ(mean->dims.n, 8);
  EXPECT_EQ(mean->dims.inner, 1);
  EXPECT_EQ(mean->out, S({1, 3, 1, 5}));
  // ... or, a sum or mean in float32/64 or int64, one reduction per run,
  // the last first: dim 2 of [2, 3, 4, 5], then dim 0 of [2, 3, 5].
  ASSERT_EQ(mean->stages.size(), 2u);
  EXPECT_EQ(mean->stages[0].outer, 6);
  EXPECT_EQ(mean->stages[0].n, 4);
  EXPECT_EQ(mean->stages[0].inner, 5);
  EXPECT_EQ(mean->stages[1].outer, 1);
  EXPECT_EQ(mean->stages[1].n, 2);
  EXPECT_EQ(mean->stages[1].inner, 15);
  const int64_t batch_norm[] = {0, 2, 3};  // two runs: {2, 3}, then {0}
  auto bn = PlanReduce(ReduceOp::kSum, DType::kInt32, x, batch_norm, false,
                       kAnyDevice);
  ASSERT_EQ(bn->stages.size(), 2u);
  EXPECT_EQ(bn->stages[0].outer, 6);
  EXPECT_EQ(bn->stages[0].n, 20);
  EXPECT_EQ(bn->stages[0].inner, 1);
  EXPECT_EQ(bn->stages[1].outer, 1);
  EXPECT_EQ(bn->stages[1].n, 2);
  EXPECT_EQ(bn->stages[1].inner, 3);
  // A half type's partial sums would round: it permutes instead.
  EXPECT_TRUE(
      PlanReduce(ReduceOp::kSum, DType::kFloat16, x, apart, false, kAnyDevice)
          ->stages.empty());
  // Every dim named is all of them; none named is all too.
  const int64_t every[] = {3, 0, 1, 2};
  auto all =
      PlanReduce(ReduceOp::kNorm, DType::kFloat32, x, every, false, kAnyDevice);
  EXPECT_TRUE(all->perm.empty());
  EXPECT_EQ(all->dims.n, 120);
  EXPECT_EQ(all->out, S({}));
  // A 0-d tensor reduces over its one element, for dim 0 or -1; both at
  // once name one dim twice (PyTorch's error).
  const int64_t zero[] = {0, -1};
  for (int i = 0; i < 2; ++i) {
    auto scalar =
        PlanReduce(ReduceOp::kSum, DType::kInt32, S({}),
                   std::span<const int64_t>(zero + i, 1), true, kAnyDevice);
    EXPECT_EQ(scalar->dims.n, 1);
    EXPECT_EQ(scalar->out, S({}));
  }
  EXPECT_EQ(Message(PlanReduce(ReduceOp::kSum, DType::kInt32, S({}), zero,
                               false, kAnyDevice)
                        .status()),
            "dim 0 appears multiple times in the list of dims");
}

// A tensor with a zero dim may have blocks of dims whose product exceeds
// int64: the plan saturates them (no work reads them) instead of
// overflowing (UBSan), and the results are the empty shapes PyTorch gives.
TEST(PlannerTest, ReduceOfAnEmptyTensorWithHugeDims) {
  const int64_t big = int64_t{1} << 40;
  const Shape x = S({0, big, big});
  const int64_t apart[] = {0, 2};
  auto sum =
      PlanReduce(ReduceOp::kSum, DType::kFloat32, x, apart, false, kAnyDevice);
  ASSERT_TRUE(sum.ok()) << sum.status();
  EXPECT_EQ(sum->out, S({big}));
  EXPECT_EQ(sum->dims.n, 0);
  const int64_t tail[] = {1, 2};
  auto mean =
      PlanReduce(ReduceOp::kMean, DType::kFloat32, x, tail, false, kAnyDevice);
  ASSERT_TRUE(mean.ok()) << mean.status();
  EXPECT_EQ(mean->out, S({0}));
  EXPECT_EQ(mean->dims.outer, 0);
  EXPECT_EQ(mean->dims.n, INT64_MAX);  // saturated: over an empty output
  auto inner = PlanReduce(ReduceOp::kSum, DType::kFloat32, S({big, big, 0}),
                          std::span<const int64_t>(), false, kAnyDevice);
  EXPECT_EQ(inner->dims.n, 0);
  // Over dim 0 the result would have 2^80 elements: refused, not wrapped.
  EXPECT_EQ(PlanReduce(ReduceOp::kSum, DType::kFloat32, x, 0, false, kAnyDevice)
                .status()
                .code(),
            absl::StatusCode::kInvalidArgument);
}

TEST(PlannerTest, ReduceOverSeveralDimsErrors) {
  const Shape x = S({2, 3, 4});
  const int64_t twice[] = {1, -2};
  auto dup =
      PlanReduce(ReduceOp::kSum, DType::kFloat32, x, twice, false, kAnyDevice);
  EXPECT_EQ(dup.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(Message(dup.status()),
            "dim 1 appears multiple times in the list of dims");
  const int64_t two[] = {0, 1};
  auto max =
      PlanReduce(ReduceOp::kMax, DType::kFloat32, x, two, false, kAnyDevice);
  EXPECT_EQ(max.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(Message(max.status()), "max() reduces over one dim, got 2 dims");
  const int64_t bad[] = {0, 3};
  EXPECT_THAT(
      Message(
          PlanReduce(ReduceOp::kSum, DType::kFloat32, x, bad, false, kAnyDevice)
              .status()),
      HasSubstr("Dimension out of range (expected to be in range of [-3, 2], "
                "but got 3)"));
  auto mean =
      PlanReduce(ReduceOp::kMean, DType::kInt32, x, two, false, kAnyDevice);
  EXPECT_EQ(mean.status().code(), absl::StatusCode::kFailedPrecondition);
}

TEST(PlannerTest, Where) {
  const OperandDesc cond{DType::kBool, S({2, 1})};
  const OperandDesc f{DType::kFloat32, S({3})};
  const OperandDesc i{DType::kInt64, S({})};
  auto both = PlanWhere(cond, &f, nullptr, &i, nullptr, kAnyDevice);
  ASSERT_TRUE(both.ok()) << both.status();
  EXPECT_EQ(both->dtype, DType::kFloat32);
  EXPECT_EQ(both->out, S({2, 3}));
  const Scalar zero = Scalar::Int(0), half = Scalar::Float(0.5);
  const OperandDesc i32{DType::kInt32, S({2, 1})};
  EXPECT_EQ(PlanWhere(cond, &i32, nullptr, nullptr, &zero, kAnyDevice)->dtype,
            DType::kInt32);  // an integer number keeps int32
  EXPECT_EQ(PlanWhere(cond, nullptr, &half, &i32, nullptr, kAnyDevice)->dtype,
            DType::kFloat32);
  EXPECT_EQ(PlanWhere(cond, nullptr, &zero, nullptr, &zero, kAnyDevice)->dtype,
            DType::kInt64);
  EXPECT_EQ(PlanWhere(cond, nullptr, &zero, nullptr, &half, kAnyDevice)->dtype,
            DType::kFloat32);
  EXPECT_EQ(PlanWhere(cond, nullptr, &zero, nullptr, &half, kAnyDevice)->out,
            S({2, 1}));
  const OperandDesc not_bool{DType::kFloat32, S({3})};
  auto bad = PlanWhere(not_bool, &f, nullptr, &f, nullptr, kAnyDevice);
  EXPECT_EQ(bad.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_EQ(Message(bad.status()),
            "where expected condition to be a boolean tensor, but got a "
            "tensor with dtype Float");
  const OperandDesc four{DType::kFloat32, S({4})};
  EXPECT_EQ(
      PlanWhere(cond, &f, nullptr, &four, nullptr, kAnyDevice).status().code(),
      absl::StatusCode::kInvalidArgument);
}

// torch.clamp's dtype is result_type over x and both bounds at once, not
// two promotions one after the other.
TEST(PlannerTest, ClampResultTypeOverAllOperands) {
  const OperandDesc i32{DType::kInt32, S({3})};
  const OperandDesc f64_0d{DType::kFloat64, S({})};
  const OperandDesc f16{DType::kFloat16, S({3})};
  // Dimensioned int32 and float16 give float16; the 0-d float64 is of no
  // higher category. (Two pairwise steps gave float64.)
  EXPECT_EQ(*PlanClamp(i32, &f64_0d, nullptr, &f16, nullptr), DType::kFloat16);
  const OperandDesc f32_0d{DType::kFloat32, S({})};
  const OperandDesc i64{DType::kInt64, S({3})};
  EXPECT_EQ(*PlanClamp(f32_0d, &i64, nullptr, &f16, nullptr), DType::kFloat16);
  const Scalar zero = Scalar::Int(0), half = Scalar::Float(0.5);
  EXPECT_EQ(*PlanClamp(i32, nullptr, &zero, nullptr, &zero), DType::kInt32);
  EXPECT_EQ(*PlanClamp(i32, nullptr, &zero, nullptr, &half), DType::kFloat32);
  EXPECT_EQ(*PlanClamp(f16, nullptr, &half, nullptr, nullptr), DType::kFloat16);
  EXPECT_EQ(*PlanClamp(i32, &i64, nullptr, nullptr, nullptr), DType::kInt64);
  const OperandDesc b{DType::kBool, S({3})};
  EXPECT_EQ(*PlanClamp(b, nullptr, nullptr, nullptr, &zero), DType::kInt64);
  auto none = PlanClamp(i32, nullptr, nullptr, nullptr, nullptr);
  EXPECT_EQ(none.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(Message(none.status()),
            "torch.clamp: At least one of 'min' or 'max' must not be None");
}

TEST(PlannerTest, Softmax) {
  auto f = PlanSoftmax(DType::kFloat32, S({2, 3}), -1, false);
  ASSERT_TRUE(f.ok());
  EXPECT_EQ(f->compute, DType::kFloat32);
  EXPECT_EQ(f->axis, 1);
  EXPECT_EQ(PlanSoftmax(DType::kFloat64, S({2}), 0, true)->compute,
            DType::kFloat64);
  // Half precision computes in float32.
  EXPECT_EQ(PlanSoftmax(DType::kBFloat16, S({2}), 0, false)->compute,
            DType::kFloat32);
  EXPECT_EQ(PlanSoftmax(DType::kFloat32, S({}), -1, false)->axis, 0);
  auto ints = PlanSoftmax(DType::kInt64, S({3}), 0, false);
  EXPECT_EQ(ints.status().code(), absl::StatusCode::kFailedPrecondition);
  // torch names its CPU kernel, which depends on the dim.
  EXPECT_EQ(Message(ints.status()),
            "\"softmax_lastdim_kernel_impl\" not implemented for 'Long'");
  EXPECT_EQ(Message(PlanSoftmax(DType::kBool, S({3}), 0, true).status()),
            "\"log_softmax_lastdim_kernel_impl\" not implemented for 'Bool'");
  EXPECT_EQ(Message(PlanSoftmax(DType::kInt32, S({2, 3}), 0, true).status()),
            "\"softmax_kernel_impl\" not implemented for 'Int'");
  const auto bad_dim = PlanSoftmax(DType::kFloat32, S({3}), 1, false).status();
  EXPECT_EQ(bad_dim.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(ErrorKindOf(bad_dim), ErrorKind::kIndexError);
}

TEST(PlannerTest, Permute) {
  const int64_t order[] = {2, 0, -2};
  auto p = PlanPermute(S({2, 3, 4}), order);
  ASSERT_TRUE(p.ok());
  EXPECT_EQ(p->out, S({4, 2, 3}));
  EXPECT_EQ(p->perm, (std::vector<int>{2, 0, 1}));
  const int64_t short_order[] = {1, 0};
  EXPECT_EQ(Message(PlanPermute(S({2, 3, 4}), short_order).status()),
            "permute(sparse_coo): number of dimensions in the tensor input "
            "does not match the length of the desired ordering of dimensions "
            "i.e. input.dim() = 3 is not equal to len(dims) = 2");
  const int64_t repeated[] = {0, 0, 1};
  EXPECT_EQ(Message(PlanPermute(S({2, 3, 4}), repeated).status()),
            "permute(): duplicate dims are not allowed.");
}

TEST(PlannerTest, Reshape) {
  const int64_t infer[] = {3, -1};
  EXPECT_EQ(*PlanReshape(S({2, 6}), infer), S({3, 4}));
  const int64_t bad[] = {5, -1};
  EXPECT_EQ(Message(PlanReshape(S({2, 6}), bad).status()),
            "shape '[5, -1]' is invalid for input of size 12");
  const int64_t two[] = {-1, -1};
  EXPECT_THAT(Message(PlanReshape(S({4}), two).status()),
              HasSubstr("only one dimension can be inferred"));
  const int64_t negative[] = {-3, 2};
  EXPECT_THAT(Message(PlanReshape(S({6}), negative).status()),
              HasSubstr("invalid shape dimension -3"));
  const int64_t zero_infer[] = {0, -1};
  EXPECT_FALSE(PlanReshape(S({0}), zero_infer).ok());  // -1 ambiguous
  const int64_t huge[] = {INT64_MAX, 2};
  EXPECT_FALSE(PlanReshape(S({4}), huge).ok());  // overflow, not a crash
}

TEST(PlannerTest, BinaryPromotesAndBroadcasts) {
  const Shape a = S({2, 3}), b = S({3}), scalar0 = S({});
  const OperandDesc floats{DType::kFloat32, b};
  auto p = PlanBinary(BinaryOp::kAdd, {DType::kInt32, a}, &floats, nullptr,
                      nullptr, kAnyDevice);
  ASSERT_TRUE(p.ok());
  EXPECT_EQ(p->compute, DType::kFloat32);
  EXPECT_EQ(p->out, S({2, 3}));
  // A 0-d tensor of the same category does not raise the dtype.
  const OperandDesc zero_d{DType::kInt64, scalar0};
  EXPECT_EQ(PlanBinary(BinaryOp::kMul, {DType::kInt32, a}, &zero_d, nullptr,
                       nullptr, kAnyDevice)
                ->compute,
            DType::kInt32);
  // Python numbers promote by category only.
  const Scalar two = Scalar::Int(2), half = Scalar::Float(0.5);
  EXPECT_EQ(PlanBinary(BinaryOp::kMul, {DType::kInt32, a}, nullptr, &two,
                       nullptr, kAnyDevice)
                ->compute,
            DType::kInt32);
  EXPECT_EQ(PlanBinary(BinaryOp::kMul, {DType::kInt32, a}, nullptr, &half,
                       nullptr, kAnyDevice)
                ->compute,
            DType::kFloat32);
  EXPECT_EQ(PlanBinary(BinaryOp::kAdd, {DType::kBool, a}, nullptr, &two,
                       nullptr, kAnyDevice)
                ->compute,
            DType::kInt64);
  // An integer tensor to a negative integer power is refused; a negative
  // integer base is not ((-2) ** x: scalar_first).
  const Scalar minus_two = Scalar::Int(-2);
  EXPECT_EQ(PlanBinary(BinaryOp::kPow, {DType::kInt64, a}, nullptr, &minus_two,
                       nullptr, kAnyDevice)
                .status()
                .message(),
            "Integers to negative integer powers are not allowed.");
  EXPECT_EQ(PlanBinary(BinaryOp::kPow, {DType::kInt64, a}, nullptr, &minus_two,
                       nullptr, kAnyDevice, /*scalar_first=*/true)
                ->compute,
            DType::kInt64);
  // True division of integers is float32; comparisons give bool.
  EXPECT_EQ(PlanBinary(BinaryOp::kDiv, {DType::kInt64, a}, nullptr, &two,
                       nullptr, kAnyDevice)
                ->compute,
            DType::kFloat32);
  auto lt = PlanBinary(BinaryOp::kLt, {DType::kFloat64, a}, nullptr, &half,
                       nullptr, kAnyDevice);
  EXPECT_EQ(lt->compute, DType::kFloat64);
  EXPECT_EQ(lt->out_dtype, DType::kBool);
}

TEST(PlannerTest, BinaryErrors) {
  const Shape a = S({2, 3}), b = S({4});
  const OperandDesc bad{DType::kFloat32, b};
  auto shapes = PlanBinary(BinaryOp::kAdd, {DType::kFloat32, a}, &bad, nullptr,
                           nullptr, kAnyDevice);
  EXPECT_EQ(shapes.status().code(), absl::StatusCode::kInvalidArgument);
  const OperandDesc bools{DType::kBool, a};
  auto sub = PlanBinary(BinaryOp::kSub, {DType::kBool, a}, &bools, nullptr,
                        nullptr, kAnyDevice);
  EXPECT_EQ(sub.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_EQ(sub.status().message(),
            "Subtraction, the `-` operator, with two bool tensors is not "
            "supported. Use the `^` or `logical_xor()` operator instead.");
  // In place: the broadcast shape must be the target's, and the result
  // castable to its dtype.
  const Shape row = S({3});
  const OperandDesc small_target{DType::kFloat32, row};
  const OperandDesc full{DType::kFloat32, a};
  auto shape_mismatch = PlanBinary(BinaryOp::kAdd, {DType::kFloat32, row},
                                   &full, nullptr, &small_target, kAnyDevice);
  EXPECT_EQ(Message(shape_mismatch.status()),
            "output with shape [3] doesn't match the broadcast shape [2, 3]");
  const OperandDesc int_target{DType::kInt64, a};
  const Scalar half = Scalar::Float(0.5);
  auto cast = PlanBinary(BinaryOp::kMul, {DType::kInt64, a}, nullptr, &half,
                         &int_target, kAnyDevice);
  EXPECT_EQ(Message(cast.status()),
            "result type Float can't be cast to the desired output type "
            "Long");
  EXPECT_TRUE(CanCast(DType::kInt32, DType::kFloat32));
  EXPECT_FALSE(CanCast(DType::kInt32, DType::kBool));
  EXPECT_TRUE(CanCast(DType::kBool, DType::kBool));
}

TEST(PlannerTest, Unary) {
  EXPECT_EQ(*PlanUnary(UnaryOp::kExp, DType::kInt64, kAnyDevice),
            DType::kFloat32);
  EXPECT_EQ(*PlanUnary(UnaryOp::kSigmoid, DType::kBool, kAnyDevice),
            DType::kFloat32);
  EXPECT_EQ(*PlanUnary(UnaryOp::kRelu, DType::kInt32, kAnyDevice),
            DType::kInt32);
  EXPECT_EQ(*PlanUnary(UnaryOp::kSqrt, DType::kFloat64, kAnyDevice),
            DType::kFloat64);
  auto neg = PlanUnary(UnaryOp::kNeg, DType::kBool, kAnyDevice);
  EXPECT_EQ(neg.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_EQ(PlanUnary(UnaryOp::kRelu, DType::kBool, kAnyDevice).status().code(),
            absl::StatusCode::kFailedPrecondition);
}

TEST(PlannerTest, LinearShapes) {
  EXPECT_TRUE(CheckLinearShapes(S({8, 3}), S({4, 3})).ok());
  EXPECT_TRUE(CheckLinearShapes(S({3}), S({4, 3})).ok());
  EXPECT_THAT(Message(CheckLinearShapes(S({8, 3}), S({3}))),
              HasSubstr("weight must be 2-D [out_features, in_features], but "
                        "has shape [3]"));
  // The product's own shapes are PlanMatMul's (torch's matmul of x and
  // w.t()); these are w.t()'s and the 0-d input's.
  EXPECT_TRUE(CheckLinearShapes(S({8, 2}), S({4, 3})).ok());
  EXPECT_EQ(Message(CheckLinearShapes(S({8, 3}), S({4, 3, 1}))),
            "t() expects a tensor with <= 2 dimensions, but self is 3D");
  EXPECT_EQ(Message(CheckLinearShapes(S({}), S({4, 3}))),
            "both arguments to matmul need to be at least 1D, but they are 0D "
            "and 2D");
}

TEST(PlannerTest, Cat) {
  const Shape a = S({2, 3}), b = S({4, 3}), c = S({2, 5}), d = S({3});
  const OperandDesc ints{DType::kInt32, a}, floats{DType::kFloat32, b};
  const OperandDesc rows[] = {ints, floats};
  auto p = PlanCat(rows, 0, kAnyDevice);
  ASSERT_TRUE(p.ok());
  EXPECT_EQ(p->out, S({6, 3}));
  EXPECT_EQ(p->dtype, DType::kFloat32);  // promoted
  EXPECT_EQ(p->axis, 0);
  const OperandDesc cols[] = {ints, {DType::kInt32, c}};
  EXPECT_EQ(PlanCat(cols, -1, kAnyDevice)->out, S({2, 8}));
  EXPECT_EQ(Message(PlanCat(cols, 0, kAnyDevice).status()),
            "Sizes of tensors must match except in dimension 0. Expected size "
            "3 but got size 5 for tensor number 1 in the list.");
  const OperandDesc ranks[] = {ints, {DType::kInt32, d}};
  EXPECT_EQ(Message(PlanCat(ranks, 0, kAnyDevice).status()),
            "Tensors must have same number of dimensions: got 2 and 1");
  const Shape zero_d = S({});
  const OperandDesc scalars[] = {ints, {DType::kInt32, zero_d}};
  EXPECT_THAT(Message(PlanCat(scalars, 0, kAnyDevice).status()),
              HasSubstr("zero-dimensional tensor (at position 1)"));
  EXPECT_FALSE(PlanCat({}, 0, kAnyDevice).ok());
  EXPECT_FALSE(PlanCat(rows, 2, kAnyDevice).ok());
}

TEST(PlannerTest, NarrowAndSelect) {
  auto n = PlanNarrow(S({4, 6}), 1, -4, 3);  // start counts from the end
  ASSERT_TRUE(n.ok()) << n.status();
  EXPECT_EQ(n->axis, 1);
  EXPECT_EQ(n->start, 2);
  EXPECT_EQ(n->length, 3);
  EXPECT_EQ(n->out, S({4, 3}));
  EXPECT_EQ(PlanNarrow(S({4, 6}), -2, 4, 0)->out, S({0, 6}));  // empty, at end
  auto bad = PlanNarrow(S({4, 6}), 1, 5, 2);
  EXPECT_EQ(bad.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(Message(bad.status()),
            "start (5) + length (2) exceeds dimension size (6).");
  // A start past the dim is an IndexError, as a dim would be (torch).
  EXPECT_EQ(ErrorKindOf(PlanNarrow(S({4}), 0, -5, 1).status()),
            ErrorKind::kIndexError);
  // Starts past 2^31 in a long dim wrap as int64 (no shape is allocated).
  auto far = PlanNarrow(S({3000000000}), 0, -500000000, 2);
  ASSERT_TRUE(far.ok()) << far.status();
  EXPECT_EQ(far->start, 2500000000);
  EXPECT_FALSE(PlanNarrow(S({4}), 0, 0, -1).ok());
  EXPECT_FALSE(PlanNarrow(S({4}), 0, -5, 1).ok());
  EXPECT_EQ(Message(PlanNarrow(S({}), 0, 0, 1).status()),
            "narrow() cannot be applied to a 0-dim tensor.");
  EXPECT_EQ(PlanNarrow(S({4}), 1, 0, 1).status().code(),
            absl::StatusCode::kInvalidArgument);  // bad dim

  auto sel = PlanSelect(S({2, 3, 5}), 1, -1);
  ASSERT_TRUE(sel.ok()) << sel.status();
  EXPECT_EQ(sel->axis, 1);
  EXPECT_EQ(sel->start, 2);
  EXPECT_EQ(sel->length, 1);
  EXPECT_EQ(sel->out, S({2, 5}));
  EXPECT_EQ(PlanSelect(S({3}), 0, 0)->out, S({}));
  EXPECT_EQ(Message(PlanSelect(S({2, 3}), 1, 3).status()),
            "select(): index 3 out of range for tensor of size [2, 3] at "
            "dimension 1");
  EXPECT_EQ(ErrorKindOf(PlanSelect(S({2, 3}), 1, 3).status()),
            ErrorKind::kIndexError);
  EXPECT_FALSE(PlanSelect(S({2, 3}), 1, -4).ok());
  EXPECT_EQ(Message(PlanSelect(S({}), 0, 0).status()),
            "select() cannot be applied to a 0-dim tensor.");
}

TEST(PlannerTest, AxpyAlpha) {
  EXPECT_TRUE(CheckAxpyAlpha(DType::kInt32, Scalar::Int(2)).ok());
  EXPECT_TRUE(CheckAxpyAlpha(DType::kFloat16, Scalar::Float(0.5)).ok());
  const absl::Status st = CheckAxpyAlpha(DType::kInt64, Scalar::Float(0.5));
  EXPECT_EQ(st.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(Message(st),
              HasSubstr("axpy_: for integral input tensors, alpha must not be "
                        "a floating point number (got 0.5"));
}

// --- The target's capability table -------------------------------------------

TEST(CapabilitiesTest, AllowHasAndCheck) {
  Capabilities caps;
  EXPECT_FALSE(caps.Has(OpKind::kMatMul, DType::kFloat32));
  caps.Allow(OpKind::kMatMul, DType::kFloat32).AllowAll(OpKind::kCast);
  EXPECT_TRUE(caps.Has(OpKind::kMatMul, DType::kFloat32));
  EXPECT_FALSE(caps.Has(OpKind::kMatMul, DType::kFloat64));
  EXPECT_FALSE(caps.Has(OpKind::kBinary, DType::kFloat32));
  for (DType dtype : kEveryDType) EXPECT_TRUE(caps.Has(OpKind::kCast, dtype));
  // A value outside the enum (a cast integer) is never supported.
  EXPECT_FALSE(caps.Has(OpKind::kCast, static_cast<DType>(0)));
  EXPECT_FALSE(caps.Has(OpKind::kCast, static_cast<DType>(40)));
  const absl::Status no = caps.Check(OpKind::kMatMul, DType::kBool, "cuda:1");
  EXPECT_EQ(no.code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_EQ(Message(no), "\"matmul\" not implemented for 'Bool' on cuda:1");
  EXPECT_TRUE(caps.Check(OpKind::kCast, DType::kInt32, "cuda:1").ok());
  Capabilities same;
  same.Allow(OpKind::kMatMul, DType::kFloat32).AllowAll(OpKind::kCast);
  EXPECT_TRUE(caps == same);
  EXPECT_FALSE(caps == Capabilities());
}

// A target that computes everything but what `drop` names.
Capabilities EverythingBut(OpKind op, DType dtype) {
  Capabilities caps;
  for (int k = 0; k < kOpKindCount; ++k) {
    for (DType d : kEveryDType) {
      if (static_cast<OpKind>(k) != op || d != dtype) {
        caps.Allow(static_cast<OpKind>(k), d);
      }
    }
  }
  return caps;
}

TEST(PlannerTargetTest, EachPlanAsksForItsKernelsAndCasts) {
  const Shape v = S({3});
  const auto failed = [](const absl::Status& st, const std::string& want) {
    EXPECT_EQ(st.code(), absl::StatusCode::kFailedPrecondition) << st;
    EXPECT_EQ(Message(st), want);
  };
  {  // matmul in its dtype
    const Capabilities caps = EverythingBut(OpKind::kMatMul, DType::kFloat16);
    const Target gpu{caps, "gpu:1"};
    // torch's words: the kernel its matmul picks for the shapes (dot).
    failed(PlanMatMul(DType::kFloat16, v, DType::kFloat16, v, gpu).status(),
           "\"dot\" not implemented for 'Half'");
    EXPECT_TRUE(PlanMatMul(DType::kFloat32, v, DType::kFloat32, v, gpu).ok());
  }
  {  // int32 + float32 computes in float32: the int32 operand is cast
    const Capabilities caps = EverythingBut(OpKind::kCast, DType::kInt32);
    const Target gpu{caps, "gpu:1"};
    const OperandDesc i{DType::kInt32, v}, f{DType::kFloat32, v};
    failed(PlanBinary(BinaryOp::kAdd, i, &f, nullptr, nullptr, gpu).status(),
           "\"cast\" not implemented for 'Int' on gpu:1");
    EXPECT_TRUE(PlanBinary(BinaryOp::kAdd, f, &f, nullptr, nullptr, gpu).ok());
    // A number goes to the device as int64/float64 and is cast there.
    const Scalar two = Scalar::Int(2);
    EXPECT_TRUE(
        PlanBinary(BinaryOp::kMul, f, nullptr, &two, nullptr, gpu).ok());
    failed(PlanBinary(BinaryOp::kMul, i, nullptr, &two, nullptr, gpu).status(),
           "\"cast\" not implemented for 'Int' on gpu:1");
    // The result cast into an in-place output.
    const OperandDesc into{DType::kInt32, v};
    const OperandDesc i64{DType::kInt64, v};
    failed(PlanBinary(BinaryOp::kAdd, i64, &i64, nullptr, &into, gpu).status(),
           "\"cast\" not implemented for 'Int' on gpu:1");
  }
  {  // the op's own rules come first: bool subtraction says so on any target
    const Capabilities none;
    const Target empty{none, "gpu:2"};
    const OperandDesc b{DType::kBool, v};
    const absl::Status sub =
        PlanBinary(BinaryOp::kSub, b, &b, nullptr, nullptr, empty).status();
    EXPECT_THAT(Message(sub), HasSubstr("Subtraction"));
    failed(PlanBinary(BinaryOp::kAdd, b, &b, nullptr, nullptr, empty).status(),
           "\"binary\" not implemented for 'Bool' on gpu:2");
  }
  {  // exp of int32 computes in float32
    const Capabilities caps = EverythingBut(OpKind::kUnary, DType::kFloat32);
    const Target gpu{caps, "gpu:1"};
    failed(PlanUnary(UnaryOp::kExp, DType::kInt32, gpu).status(),
           "\"unary\" not implemented for 'Float' on gpu:1");
    EXPECT_EQ(*PlanUnary(UnaryOp::kNeg, DType::kInt32, gpu), DType::kInt32);
  }
  {  // sum of bool reduces in int64
    const Capabilities caps = EverythingBut(OpKind::kReduce, DType::kInt64);
    const Target gpu{caps, "gpu:1"};
    failed(PlanReduce(ReduceOp::kSum, DType::kBool, v, std::nullopt, false, gpu)
               .status(),
           "\"reduce\" not implemented for 'Long' on gpu:1");
    EXPECT_TRUE(
        PlanReduce(ReduceOp::kMax, DType::kBool, v, std::nullopt, false, gpu)
            .ok());
  }
  {  // where in the result dtype; a number branch is cast from float64
    const Capabilities caps = EverythingBut(OpKind::kWhere, DType::kInt64);
    const Target gpu{caps, "gpu:1"};
    const OperandDesc cond{DType::kBool, v}, l{DType::kInt64, v};
    failed(PlanWhere(cond, &l, nullptr, &l, nullptr, gpu).status(),
           "\"where\" not implemented for 'Long' on gpu:1");
    const Capabilities no_f64 = EverythingBut(OpKind::kCast, DType::kFloat64);
    const Target gpu2{no_f64, "gpu:2"};
    const OperandDesc f{DType::kFloat32, v};
    const Scalar half = Scalar::Float(0.5);
    failed(PlanWhere(cond, &f, nullptr, nullptr, &half, gpu2).status(),
           "\"cast\" not implemented for 'Double' on gpu:2");
  }
  {  // cat promotes: the int32 input is cast
    const Capabilities caps = EverythingBut(OpKind::kCast, DType::kInt32);
    const Target gpu{caps, "gpu:1"};
    const OperandDesc xs[] = {{DType::kFloat32, v}, {DType::kInt32, v}};
    failed(PlanCat(xs, 0, gpu).status(),
           "\"cast\" not implemented for 'Int' on gpu:1");
    const OperandDesc same[] = {{DType::kInt32, v}, {DType::kInt32, v}};
    EXPECT_TRUE(PlanCat(same, 0, gpu).ok());
  }
  {  // a cast to the same dtype is a copy: no cast kernel
    const Capabilities none;
    EXPECT_TRUE(
        PlanCast(DType::kInt32, DType::kInt32, Target{none, "gpu:3"}).ok());
    failed(PlanCast(DType::kInt32, DType::kInt64, Target{none, "gpu:3"}),
           "\"cast\" not implemented for 'Int' on gpu:3");
  }
}

}  // namespace
}  // namespace tensord::core

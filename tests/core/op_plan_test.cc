// PlanOp (core/planner/op_plan.h): a whole op's result metadata or error, before
// anything runs. First its own rules (arity, the same-device rule, in-place
// results); then that it agrees with what the Runtime does, op by op and
// operand by operand, on the CPU device: the same dtype and shape, or the
// same code and message. The eager client relies on that agreement.
#include "core/planner/op_plan.h"
#include "core/planner/loss_plan.h"
#include "core/planner/window_plan.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "core/runtime/runtime.h"

namespace tensord::core {
namespace {

Shape S(std::vector<int64_t> dims) { return *Shape::Make(dims); }

Capabilities Everything() {
  Capabilities caps;
  for (int op = 0; op < kOpKindCount; ++op) {
    caps.AllowAll(static_cast<OpKind>(op));
  }
  return caps;
}
const Capabilities kEverything = Everything();
const Target kAnyDevice{kEverything, "cpu"};

OpSpec Binary(BinaryOp op) {
  OpSpec spec;
  spec.kind = OpSpec::Kind::kBinary;
  spec.binary = op;
  return spec;
}

TEST(OpPlanTest, ArityAndTheSameDeviceRule) {
  const Shape s = S({2, 3});
  const OpInput cpu{DType::kFloat32, s, "cpu"};
  const OpInput gpu{DType::kFloat32, s, "cuda:0"};
  OpSpec add = Binary(BinaryOp::kAdd);
  auto one = PlanOp(add, std::vector<OpInput>{cpu}, kAnyDevice);
  EXPECT_EQ(one.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(one.status().message(), "add takes 2 tensor operands, got 1");
  auto two = PlanOp(add, std::vector<OpInput>{gpu, cpu}, kAnyDevice);
  EXPECT_EQ(two.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_EQ(two.status().message(),
            "Expected all tensors to be on the same device, but found at "
            "least two devices, cuda:0 and cpu!");
  // Arity comes first: no operand at all.
  auto none = PlanOp(add, std::vector<OpInput>{}, kAnyDevice);
  EXPECT_EQ(none.status().message(), "add takes 2 tensor operands, got 0");

  OpSpec where;
  where.kind = OpSpec::Kind::kWhere;
  where.where_input.kind = OpSpec::Bound::Kind::kScalar;
  const Shape b = S({3});
  auto w = PlanOp(where, std::vector<OpInput>{{DType::kBool, b, "cpu"}},
                  kAnyDevice);
  EXPECT_EQ(w.status().message(),
            "where takes an input and an other (each a tensor or a number)");
}

TEST(OpPlanTest, ResultsOfEachFamily) {
  const Shape m23 = S({2, 3}), m34 = S({3, 4}), v3 = S({3}), m53 = S({5, 3});
  const OpInput x{DType::kInt64, m23, "cpu"};
  const OpInput y{DType::kFloat32, v3, "cpu"};
  // Broadcast and promotion.
  auto add = PlanOp(Binary(BinaryOp::kAdd), std::vector<OpInput>{x, y},
                    kAnyDevice);
  ASSERT_TRUE(add.ok()) << add.status();
  EXPECT_EQ(add->dtype, DType::kFloat32);
  EXPECT_EQ(add->shape, m23);
  EXPECT_FALSE(add->in_place);
  // Comparisons give bool.
  auto lt = PlanOp(Binary(BinaryOp::kLt), std::vector<OpInput>{x, y},
                   kAnyDevice);
  EXPECT_EQ(lt->dtype, DType::kBool);
  // matmul and linear (x [2,3] . W[5,3]^T + b[5]).
  OpSpec mm;
  mm.kind = OpSpec::Kind::kMatMul;
  const OpInput f23{DType::kFloat32, m23, "cpu"};
  auto p = PlanOp(mm, std::vector<OpInput>{f23, {DType::kFloat32, m34, "cpu"}},
                  kAnyDevice);
  EXPECT_EQ(p->shape, S({2, 4}));
  OpSpec linear;
  linear.kind = OpSpec::Kind::kLinear;
  const Shape b5 = S({5});
  auto l = PlanOp(linear,
                  std::vector<OpInput>{f23,
                                       {DType::kFloat32, m53, "cpu"},
                                       {DType::kFloat32, b5, "cpu"}},
                  kAnyDevice);
  ASSERT_TRUE(l.ok()) << l.status();
  EXPECT_EQ(l->shape, S({2, 5}));
  // In place: the target, unchanged; a float into an int64 is refused.
  OpSpec add_;
  add_.kind = OpSpec::Kind::kInPlace;
  add_.in_place = InPlaceOp::kAdd;
  auto ip = PlanOp(add_, std::vector<OpInput>{f23, y}, kAnyDevice);
  ASSERT_TRUE(ip.ok()) << ip.status();
  EXPECT_TRUE(ip->in_place);
  EXPECT_EQ(ip->dtype, DType::kFloat32);
  EXPECT_EQ(ip->shape, m23);
  EXPECT_EQ(PlanOp(add_, std::vector<OpInput>{x, y}, kAnyDevice).status().code(),
            absl::StatusCode::kInvalidArgument);
  // transpose, reduce with keepdim, cast.
  OpSpec t;
  t.kind = OpSpec::Kind::kTranspose;
  t.dim = 0;
  t.dim1 = -1;
  EXPECT_EQ(PlanOp(t, std::vector<OpInput>{x}, kAnyDevice)->shape, S({3, 2}));
  OpSpec mean;
  mean.kind = OpSpec::Kind::kReduce;
  mean.reduce = ReduceOp::kMean;
  mean.dim = 1;
  mean.keepdim = true;
  auto r = PlanOp(mean, std::vector<OpInput>{f23}, kAnyDevice);
  EXPECT_EQ(r->shape, S({2, 1}));
  EXPECT_EQ(PlanOp(mean, std::vector<OpInput>{x}, kAnyDevice).status().code(),
            absl::StatusCode::kFailedPrecondition);  // mean of int64
  OpSpec cast;
  cast.kind = OpSpec::Kind::kCast;
  cast.dtype = DType::kFloat16;
  EXPECT_EQ(PlanOp(cast, std::vector<OpInput>{x}, kAnyDevice)->dtype,
            DType::kFloat16);
}

// What the runtime answers for `op` on the tensors `handles`: the result's
// dtype and shape, or the status.
struct Outcome {
  absl::Status status;
  DType dtype = DType::kFloat32;
  Shape shape;
};

class OpPlanAgreesWithTheRuntime : public ::testing::Test {
 protected:
  void SetUp() override {
    RuntimeOptions options;
    options.host_memory_budget = 64 << 20;
    rt_ = Runtime::Create(std::move(options)).value();
    session_ = rt_->OpenSession("test").value();
    device_ = rt_->FindDevice("cpu").value();
  }

  TensorMeta Make(DType dtype, const std::vector<int64_t>& dims) {
    return rt_->CreateFilled(session_, "cpu", dtype, dims, FillSpec{}, 0, "")
        .value();
  }

  // Runs `op` on `tensors` both ways and compares.
  void Check(OpSpec op, const std::vector<TensorMeta>& tensors) {
    std::vector<OpInput> inputs;
    op.inputs.clear();
    for (const TensorMeta& t : tensors) {
      inputs.push_back(OpInput{t.dtype, t.shape, t.device});
      op.inputs.push_back(Operand::Handle(t.handle));
    }
    const absl::StatusOr<OpResult> planned =
        PlanOp(op, inputs, TargetOf(*device_));
    const absl::StatusOr<TensorMeta> ran = rt_->Run(session_, op);
    std::string what = OpName(op);
    for (const TensorMeta& t : tensors) {
      what.append(" ").append(t.shape.ToString()).append(":");
      what.append(DTypeName(t.dtype));
    }
    ++checked_;
    if (!ran.ok()) {
      ASSERT_FALSE(planned.ok()) << what << ": the runtime said "
                                 << ran.status() << ", the plan "
                                 << planned->shape.ToString();
      EXPECT_EQ(planned.status(), ran.status()) << what;
      return;
    }
    ASSERT_TRUE(planned.ok()) << what << ": " << planned.status();
    EXPECT_EQ(planned->dtype, ran->dtype) << what;
    EXPECT_EQ(planned->shape, ran->shape) << what;
    EXPECT_EQ(planned->in_place, ran->handle == tensors[0].handle) << what;
    if (ran->handle != tensors[0].handle) {
      ASSERT_TRUE(rt_->Release(session_, ran->handle).ok());
    }
  }

  std::unique_ptr<Runtime> rt_;
  std::string session_;
  Device* device_ = nullptr;
  int checked_ = 0;
};

TEST_F(OpPlanAgreesWithTheRuntime, OnEveryOpFamilyAndOperandMix) {
  const std::vector<DType> dtypes = {DType::kFloat32, DType::kFloat64,
                                     DType::kInt64, DType::kBool,
                                     DType::kFloat16};
  const std::vector<std::vector<int64_t>> shapes = {
      {2, 3}, {3}, {}, {3, 2}, {1, 3}, {0, 3}};
  std::vector<TensorMeta> pool;
  for (DType d : dtypes) {
    for (const auto& s : shapes) pool.push_back(Make(d, s));
  }

  std::vector<OpSpec> unary_ops, binary_ops;
  for (UnaryOp u : {UnaryOp::kNeg, UnaryOp::kExp, UnaryOp::kRelu,
                    UnaryOp::kSigmoid}) {
    OpSpec op;
    op.kind = OpSpec::Kind::kUnary;
    op.unary = u;
    unary_ops.push_back(op);
  }
  for (ReduceOp r : {ReduceOp::kSum, ReduceOp::kMean, ReduceOp::kMax}) {
    OpSpec op;
    op.kind = OpSpec::Kind::kReduce;
    op.reduce = r;
    unary_ops.push_back(op);
    op.dim = -1;
    unary_ops.push_back(op);
    op.dim = 2;  // out of range for most
    unary_ops.push_back(op);
  }
  {
    OpSpec op;
    op.kind = OpSpec::Kind::kSoftmax;
    op.dim = 0;
    unary_ops.push_back(op);
    op.kind = OpSpec::Kind::kTranspose;
    op.dim = 0;
    op.dim1 = 1;
    unary_ops.push_back(op);
    op.kind = OpSpec::Kind::kReshape;
    op.dims = {-1};
    unary_ops.push_back(op);
    op.dims = {3, -1};
    unary_ops.push_back(op);
    op.kind = OpSpec::Kind::kPermute;
    op.dims = {1, 0};
    unary_ops.push_back(op);
    op.kind = OpSpec::Kind::kNarrow;
    op.dim = 0;
    op.start = 0;
    op.length = 1;
    unary_ops.push_back(op);
    op.kind = OpSpec::Kind::kSelect;
    op.start = 1;
    unary_ops.push_back(op);
    op.kind = OpSpec::Kind::kCast;
    op.dtype = DType::kInt32;
    unary_ops.push_back(op);
    op.kind = OpSpec::Kind::kClamp;
    op.clamp_min = {OpSpec::Bound::Kind::kScalar, Scalar::Float(0.5)};
    unary_ops.push_back(op);
    op = Binary(BinaryOp::kMul);
    op.scalar = Scalar::Float(2.5);
    unary_ops.push_back(op);
    op.kind = OpSpec::Kind::kInPlace;
    op.in_place = InPlaceOp::kDiv;
    unary_ops.push_back(op);
  }
  for (BinaryOp b : {BinaryOp::kAdd, BinaryOp::kSub, BinaryOp::kDiv,
                     BinaryOp::kPow, BinaryOp::kEq}) {
    binary_ops.push_back(Binary(b));
  }
  {
    OpSpec op;
    op.kind = OpSpec::Kind::kMatMul;
    binary_ops.push_back(op);
    op.kind = OpSpec::Kind::kLinear;
    binary_ops.push_back(op);
    op.kind = OpSpec::Kind::kCat;
    op.dim = 0;
    binary_ops.push_back(op);
    op.kind = OpSpec::Kind::kInPlace;
    op.in_place = InPlaceOp::kSub;
    binary_ops.push_back(op);
    op.in_place = InPlaceOp::kAxpy;
    op.alpha = Scalar::Float(0.5);
    binary_ops.push_back(op);
    op.kind = OpSpec::Kind::kClamp;
    op.clamp_min = {OpSpec::Bound::Kind::kTensor, {}};
    binary_ops.push_back(op);
    op.kind = OpSpec::Kind::kWhere;
    op.where_input = {OpSpec::Bound::Kind::kTensor, {}};
    op.where_other = {OpSpec::Bound::Kind::kScalar, Scalar::Int(3)};
    binary_ops.push_back(op);
  }

  for (const OpSpec& op : unary_ops) {
    for (const TensorMeta& x : pool) Check(op, {x});
  }
  for (const OpSpec& op : binary_ops) {
    for (const TensorMeta& a : pool) {
      for (const TensorMeta& b : pool) Check(op, {a, b});
    }
  }
  // Wrong arity and mixed devices need no second device to plan; the
  // runtime's same-device case is in runtime_test.
  Check(Binary(BinaryOp::kAdd), {pool[0]});
  EXPECT_GT(checked_, 2000);
}

// Window arguments in WindowArgs' field order.
WindowArgs W(std::vector<int64_t> kernel_size, std::vector<int64_t> stride = {},
             std::vector<int64_t> padding = {},
             std::vector<int64_t> dilation = {}, int64_t groups = 1) {
  WindowArgs w;
  w.kernel_size = std::move(kernel_size);
  w.stride = std::move(stride);
  w.padding = std::move(padding);
  w.dilation = std::move(dilation);
  w.groups = groups;
  return w;
}

TEST_F(OpPlanAgreesWithTheRuntime, OnTheWindowOps) {
  std::vector<TensorMeta> images, weights, biases;
  for (DType d : {DType::kFloat32, DType::kFloat64, DType::kInt64}) {
    for (const auto& s : std::vector<std::vector<int64_t>>{
             {2, 4, 7, 6}, {4, 5, 5}, {1, 2, 3, 3}, {0, 4, 6, 6}, {3, 7},
             {2, 0, 5, 5}}) {
      images.push_back(Make(d, s));
    }
    for (const auto& s : std::vector<std::vector<int64_t>>{
             {6, 4, 3, 3}, {6, 2, 2, 3}, {4, 1, 5, 5}, {3, 4, 3}, {5, 2, 1, 1}}) {
      weights.push_back(Make(d, s));
    }
    biases.push_back(Make(d, {6}));
    biases.push_back(Make(d, {5}));
  }
  biases.push_back(Make(DType::kFloat32, {6, 1}));
  std::vector<OpSpec> convs, pools;
  for (const WindowArgs& w : std::vector<WindowArgs>{
           W({}), W({}, {2}, {1}), W({}, {1, 2}, {2, 0}, {2}, 2),
           W({}, {}, {}, {}, 4), W({}, {0}), W({}, {1, 1, 1}), W({}, {}, {-1}),
           W({}, {}, {}, {}, 0), W({}, {3}, {9})}) {
    OpSpec op;
    op.kind = OpSpec::Kind::kConv2d;
    op.window = w;
    convs.push_back(op);
  }
  for (OpSpec::Kind kind :
       {OpSpec::Kind::kMaxPool2d, OpSpec::Kind::kAvgPool2d}) {
    for (const WindowArgs& w : std::vector<WindowArgs>{
             W({2}), W({3}, {2}, {1}), W({3, 2}, {1, 2}, {1, 0}),
             W({2}, {}, {}, {2}), W({5}), W({0}), W({2}, {0}), W({3}, {}, {2}),
             W({2, 2, 2}), W({})}) {
      OpSpec op;
      op.kind = kind;
      op.window = w;
      pools.push_back(op);
      op.window.count_include_pad = false;
      pools.push_back(op);
    }
  }
  for (const auto& size : std::vector<std::vector<int64_t>>{
           {2}, {3, 1}, {0}, {-1}, {1, 2, 3}, {}}) {
    OpSpec op;
    op.kind = OpSpec::Kind::kAdaptiveAvgPool2d;
    op.window.output_size = size;
    pools.push_back(op);
  }
  for (double p : {0.0, 0.5, 1.0, -0.1, 1.5}) {
    OpSpec op;
    op.kind = OpSpec::Kind::kDropout;
    op.dropout_p = p;
    op.seed = 3;
    pools.push_back(op);
    op.train = false;
    pools.push_back(op);
  }
  for (const OpSpec& op : pools) {
    for (const TensorMeta& x : images) Check(op, {x});
  }
  for (const OpSpec& op : convs) {
    for (const TensorMeta& x : images) {
      for (const TensorMeta& w : weights) {
        Check(op, {x, w});
        for (const TensorMeta& b : biases) Check(op, {x, w, b});
      }
    }
  }
  EXPECT_GT(checked_, 5000);
}

TEST_F(OpPlanAgreesWithTheRuntime, OnTheLosses) {
  std::vector<TensorMeta> inputs, targets;
  for (DType d : {DType::kFloat32, DType::kFloat64, DType::kInt64,
                  DType::kInt32}) {
    for (const auto& s : std::vector<std::vector<int64_t>>{
             {4, 3}, {3}, {}, {2, 3, 2}, {0, 3}, {4}, {4, 1}, {1, 3}}) {
      inputs.push_back(Make(d, s));
    }
  }
  // Zeros: in range whenever there is a class.
  for (DType d : {DType::kInt64, DType::kInt32, DType::kFloat32}) {
    for (const auto& s : std::vector<std::vector<int64_t>>{
             {4}, {}, {3}, {0}, {4, 3}}) {
      targets.push_back(Make(d, s));
    }
  }
  for (LossKind kind :
       {LossKind::kNll, LossKind::kCrossEntropy, LossKind::kMse}) {
    for (LossReduction r : {LossReduction::kMean, LossReduction::kSum,
                            LossReduction::kNone}) {
      OpSpec op;
      op.kind = OpSpec::Kind::kLoss;
      op.loss = kind;
      op.reduction = r;
      for (const TensorMeta& x : inputs) {
        for (const TensorMeta& t : kind == LossKind::kMse ? inputs : targets) {
          Check(op, {x, t});
        }
      }
    }
  }
  EXPECT_GT(checked_, 2000);
}

TEST(WindowPlanTest, PyTorchsMessages) {
  auto conv = [](std::vector<int64_t> x, std::vector<int64_t> w,
                 WindowArgs args = WindowArgs(), DType wdtype = DType::kFloat32) {
    const Shape xs = S(x), ws = S(w);
    return PlanConv2d(OperandDesc{DType::kFloat32, xs},
                      OperandDesc{wdtype, ws}, nullptr, args, kAnyDevice)
        .status();
  };
  EXPECT_EQ(conv({8, 8}, {6, 3, 5, 5}).message(),
            "Expected 3D (unbatched) or 4D (batched) input to conv2d, but got "
            "input of size: [8, 8]");
  // torch sizes stride by the weight's rank before it checks the rank.
  EXPECT_EQ(conv({1, 3, 8, 8}, {6, 3, 5}).message(),
            "expected stride to be a single integer value or a list of 1 "
            "values to match the convolution dimensions, but got stride=[1, "
            "1]");
  EXPECT_EQ(conv({1, 3, 8, 8}, {6, 3, 5}, W({}, {1, 1, 1})).message(),
            "expected stride to be a single integer value or a list of 1 "
            "values to match the convolution dimensions, but got stride=[1, "
            "1, 1]");
  EXPECT_EQ(conv({1, 3, 8, 8}, {6, 3}).message(),
            "Expected 4-dimensional weight for 4-dimensional input [1, 3, 8, "
            "8], but got 2-dimensional weight of size [6, 3] instead");
  // (torch prints the weight's size in double brackets here.)
  EXPECT_EQ(conv({1, 6, 8, 8}, {5, 3, 3, 3}, W({}, {}, {}, {}, 2)).message(),
            "Given groups=2, expected weight to be divisible by 2 at dimension "
            "0, but got weight of size [[5, 3, 3, 3]] instead");
  EXPECT_EQ(conv({1, 6, 8, 8}, {0, 3, 3, 3}).message(),
            "Given groups=1, expected weight to be at least 1 at dimension 0, "
            "but got weight of size [[0, 3, 3, 3]] instead");
  EXPECT_EQ(conv({1, 3, 8, 8}, {6, 3, 5, 5}, W({}, {1, 2, 3})).message(),
            "expected stride to be a single integer value or a list of 2 "
            "values to match the convolution dimensions, but got stride=[1, "
            "2, 3]");
  EXPECT_EQ(conv({1, 3, 8, 8}, {6, 3, 5, 5}, W({}), DType::kFloat64).message(),
            "expected scalar type Float but found Double");
  const Shape i8 = S({1, 3, 8, 8});
  const absl::Status ints =
      PlanConv2d(OperandDesc{DType::kInt64, i8}, OperandDesc{DType::kInt64, i8},
                 nullptr, W({}), kAnyDevice)
          .status();
  EXPECT_EQ(ints.code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_EQ(ints.message(), "\"conv2d\" not implemented for 'Long'");
  // The unbatched result drops the batch dim.
  const Shape x3 = S({3, 6, 6}), w = S({5, 3, 3, 3});
  auto plan = PlanConv2d(OperandDesc{DType::kFloat32, x3},
                         OperandDesc{DType::kFloat32, w}, nullptr,
                         W({}, {}, {2}, {2}), kAnyDevice);
  ASSERT_TRUE(plan.ok()) << plan.status();
  EXPECT_EQ(plan->out, S({5, 6, 6}));

  auto pool = [](PoolKind kind, std::vector<int64_t> x, WindowArgs args) {
    return PlanPool2d(kind, DType::kFloat32, S(x), args, kAnyDevice).status();
  };
  EXPECT_EQ(pool(PoolKind::kMax, {1, 0, 8, 8}, W({2})).message(),
            "Expected 3D or 4D (batch mode) tensor with optional 0 dim batch "
            "size for input, but got:[1, 0, 8, 8]");
  EXPECT_EQ(pool(PoolKind::kMax, {1, 3, 8, 8}, W({2, 2, 2})).message(),
            "max_pool2d: kernel_size must either be a single int, or a tuple "
            "of two ints");
  EXPECT_EQ(pool(PoolKind::kAvg, {1, 3, 8, 8}, W({2}, {}, {}, {2})).message(),
            "avg_pool2d takes no dilation");
  EXPECT_EQ(pool(PoolKind::kMax, {1, 3, 8, 8}, W({2}, {}, {}, {0})).message(),
            "dilation should be greater than zero, but got dilationH: 0 "
            "dilationW: 0");
  EXPECT_EQ(pool(PoolKind::kMax, {1, 3, 8, 8}, W({})).message(),
            "max_pool2d needs a kernel_size");
  // The stride (the kernel's when omitted) first, as torch's
  // pooling_output_shape, then the kernel.
  EXPECT_EQ(pool(PoolKind::kAvg, {1, 3, 8, 8}, W({0, 2})).message(),
            "stride should not be zero");
  EXPECT_EQ(pool(PoolKind::kAvg, {1, 3, 8, 8}, W({0, 2}, {1, 1})).message(),
            "kernel size should be greater than zero, but got kH: 0 kW: 2");
}

}  // namespace
}  // namespace tensord::core

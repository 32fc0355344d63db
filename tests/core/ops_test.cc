// The op set through core::Runtime (Run and Execute) on CPU devices, against
// hand-computed reference values. tests/python/test_ops_numpy.py compares
// the same ops with numpy over the wire.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <vector>

#include "core/runtime/runtime.h"

namespace tensord::core {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;

template <typename T>
constexpr DType DTypeOf() {
  if constexpr (std::is_same_v<T, float>) return DType::kFloat32;
  if constexpr (std::is_same_v<T, double>) return DType::kFloat64;
  if constexpr (std::is_same_v<T, int32_t>) return DType::kInt32;
  if constexpr (std::is_same_v<T, int64_t>) return DType::kInt64;
  return DType::kBool;
}

class OpsTest : public ::testing::Test {
 protected:
  void SetUp() override {
    RuntimeOptions options;
    options.host_devices = 2;
    options.host_memory_budget = 64 << 20;
    rt_ = Runtime::Create(std::move(options)).value();
    session_ = rt_->OpenSession("ops").value();
  }

  template <typename T>
  uint64_t Make(std::vector<int64_t> dims, const std::vector<T>& v,
                std::string_view device = "cpu:0") {
    auto m = rt_->CreateFromData(
        session_, device, DTypeOf<T>(), dims,
        {reinterpret_cast<const uint8_t*>(v.data()), v.size() * sizeof(T)}, "");
    EXPECT_TRUE(m.ok()) << m.status();
    return m->handle;
  }

  template <typename T>
  std::vector<T> Fetch(const TensorMeta& m) {
    EXPECT_EQ(m.dtype, DTypeOf<T>());
    auto reader = rt_->OpenReader(session_, m.handle).value();
    std::vector<T> out(m.nbytes / sizeof(T));
    EXPECT_TRUE(reader
                    ->Read(0, {reinterpret_cast<uint8_t*>(out.data()),
                               out.size() * sizeof(T)})
                    .ok());
    return out;
  }

  static OpSpec Bin(BinaryOp op, uint64_t a, uint64_t b) {
    OpSpec s;
    s.kind = OpSpec::Kind::kBinary;
    s.binary = op;
    s.inputs = {Operand::Handle(a), Operand::Handle(b)};
    return s;
  }
  static OpSpec BinS(BinaryOp op, uint64_t a, Scalar v) {
    OpSpec s;
    s.kind = OpSpec::Kind::kBinary;
    s.binary = op;
    s.inputs = {Operand::Handle(a)};
    s.scalar = v;
    return s;
  }
  static OpSpec One(OpSpec::Kind kind, uint64_t a) {
    OpSpec s;
    s.kind = kind;
    s.inputs = {Operand::Handle(a)};
    return s;
  }
  static OpSpec Red(ReduceOp op, Operand a, std::optional<int64_t> dim = {},
                    bool keepdim = false) {
    OpSpec s;
    s.kind = OpSpec::Kind::kReduce;
    s.reduce = op;
    s.inputs = {a};
    s.dim = dim;
    s.keepdim = keepdim;
    return s;
  }
  TensorMeta Run(const OpSpec& s) {
    auto m = rt_->Run(session_, s);
    EXPECT_TRUE(m.ok()) << m.status();
    return m.ok() ? *m : TensorMeta{};
  }
  absl::Status RunError(const OpSpec& s) {
    return rt_->Run(session_, s).status();
  }
  uint64_t Held() {
    uint64_t held = 0;
    for (const DeviceStatus& d : rt_->ListDevices()) held += d.held_bytes;
    return held;
  }

  std::unique_ptr<Runtime> rt_;
  std::string session_;
};

TEST_F(OpsTest, BinaryOpsAgainstHandValues) {
  const uint64_t a = Make<float>({4}, {1, -2, 3, 0.5});
  const uint64_t b = Make<float>({4}, {2, 2, -1, 4});
  EXPECT_THAT(Fetch<float>(Run(Bin(BinaryOp::kMaximum, a, b))),
              ElementsAre(2, 2, 3, 4));
  EXPECT_THAT(Fetch<float>(Run(Bin(BinaryOp::kMinimum, a, b))),
              ElementsAre(1, -2, -1, 0.5));
  EXPECT_THAT(Fetch<float>(Run(Bin(BinaryOp::kPow, a, b))),
              ElementsAre(1, 4, 1.0f / 3, 0.0625));
  EXPECT_THAT(Fetch<uint8_t>(Run(Bin(BinaryOp::kLt, a, b))),
              ElementsAre(1, 1, 0, 1));
  EXPECT_THAT(Fetch<uint8_t>(Run(Bin(BinaryOp::kGe, a, b))),
              ElementsAre(0, 0, 1, 0));
  EXPECT_THAT(Fetch<uint8_t>(Run(Bin(BinaryOp::kEq, a, a))),
              ElementsAre(1, 1, 1, 1));
  const uint64_t i = Make<int64_t>({4}, {2, -3, 5, 1});
  const uint64_t e = Make<int64_t>({4}, {10, 3, 0, -1});
  EXPECT_THAT(Fetch<int64_t>(Run(Bin(BinaryOp::kPow, i, e))),
              ElementsAre(1024, -27, 1, 1));
}

TEST_F(OpsTest, ScalarPromotionTable) {
  const uint64_t i32 = Make<int32_t>({3}, {1, 2, 3});
  const uint64_t f64 = Make<double>({3}, {1, 2, 3});
  const uint64_t b = Make<uint8_t>({3}, {1, 0, 1});
  // int scalar keeps int32; float scalar makes float32 (not float64).
  TensorMeta m = Run(BinS(BinaryOp::kMul, i32, Scalar::Int(2)));
  EXPECT_EQ(m.dtype, DType::kInt32);
  EXPECT_THAT(Fetch<int32_t>(m), ElementsAre(2, 4, 6));
  m = Run(BinS(BinaryOp::kMul, i32, Scalar::Float(0.5)));
  EXPECT_EQ(m.dtype, DType::kFloat32);
  EXPECT_THAT(Fetch<float>(m), ElementsAre(0.5, 1, 1.5));
  EXPECT_EQ(Run(BinS(BinaryOp::kAdd, f64, Scalar::Float(1))).dtype,
            DType::kFloat64);
  EXPECT_EQ(Run(BinS(BinaryOp::kAdd, b, Scalar::Int(1))).dtype, DType::kInt64);
  EXPECT_EQ(Run(BinS(BinaryOp::kDiv, i32, Scalar::Int(2))).dtype,
            DType::kFloat32);
  EXPECT_EQ(Run(BinS(BinaryOp::kGt, i32, Scalar::Float(1.5))).dtype,
            DType::kBool);
  EXPECT_THAT(Fetch<uint8_t>(Run(BinS(BinaryOp::kGt, i32, Scalar::Float(1.5)))),
              ElementsAre(0, 1, 1));
  OpSpec rsub = BinS(BinaryOp::kSub, i32, Scalar::Int(10));
  rsub.scalar_first = true;
  EXPECT_THAT(Fetch<int32_t>(Run(rsub)), ElementsAre(9, 8, 7));
}

TEST_F(OpsTest, UnaryOps) {
  const uint64_t x = Make<float>({3}, {-1, 0, 4});
  auto unary = [&](UnaryOp op, uint64_t h) {
    OpSpec s = One(OpSpec::Kind::kUnary, h);
    s.unary = op;
    return s;
  };
  EXPECT_THAT(Fetch<float>(Run(unary(UnaryOp::kNeg, x))),
              ElementsAre(1, 0, -4));
  EXPECT_THAT(Fetch<float>(Run(unary(UnaryOp::kAbs, x))), ElementsAre(1, 0, 4));
  EXPECT_THAT(Fetch<float>(Run(unary(UnaryOp::kRelu, x))),
              ElementsAre(0, 0, 4));
  EXPECT_THAT(Fetch<float>(Run(unary(UnaryOp::kSigmoid, x)))[1], 0.5f);
  EXPECT_FLOAT_EQ(Fetch<float>(Run(unary(UnaryOp::kTanh, x)))[0],
                  std::tanh(-1.0f));
  const uint64_t i = Make<int64_t>({2}, {1, 4});
  TensorMeta s = Run(unary(UnaryOp::kSqrt, i));
  EXPECT_EQ(s.dtype, DType::kFloat32);
  EXPECT_THAT(Fetch<float>(s), ElementsAre(1, 2));
  EXPECT_EQ(Run(unary(UnaryOp::kNeg, i)).dtype, DType::kInt64);
  const uint64_t b = Make<uint8_t>({1}, {1});
  absl::Status st = RunError(unary(UnaryOp::kNeg, b));
  EXPECT_EQ(st.code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(st.message(), HasSubstr("Negation"));
}

TEST_F(OpsTest, Reductions) {
  const uint64_t x = Make<float>({2, 3}, {1, 5, 2, 7, 0, 3});
  EXPECT_THAT(Fetch<float>(Run(Red(ReduceOp::kSum, Operand::Handle(x)))),
              ElementsAre(18));
  TensorMeta m = Run(Red(ReduceOp::kSum, Operand::Handle(x), 0));
  EXPECT_EQ(m.shape.ToString(), "[3]");
  EXPECT_THAT(Fetch<float>(m), ElementsAre(8, 5, 5));
  m = Run(Red(ReduceOp::kMean, Operand::Handle(x), -1, true));
  EXPECT_EQ(m.shape.ToString(), "[2, 1]");
  EXPECT_THAT(Fetch<float>(m), ElementsAre(8.0f / 3, 10.0f / 3));
  EXPECT_THAT(Fetch<float>(Run(Red(ReduceOp::kMax, Operand::Handle(x), 1))),
              ElementsAre(5, 7));
  EXPECT_THAT(Fetch<float>(Run(Red(ReduceOp::kMin, Operand::Handle(x)))),
              ElementsAre(0));
  EXPECT_THAT(Fetch<int64_t>(Run(Red(ReduceOp::kArgmax, Operand::Handle(x)))),
              ElementsAre(3));
  EXPECT_THAT(
      Fetch<int64_t>(Run(Red(ReduceOp::kArgmax, Operand::Handle(x), 0))),
      ElementsAre(1, 0, 1));
  EXPECT_FLOAT_EQ(
      Fetch<float>(Run(Red(ReduceOp::kNorm, Operand::Handle(x))))[0],
      std::sqrt(88.0f));
  // Integer sums are int64; mean of integers is refused like PyTorch.
  const uint64_t i = Make<int32_t>({3}, {1, 2, 3});
  m = Run(Red(ReduceOp::kSum, Operand::Handle(i)));
  EXPECT_EQ(m.dtype, DType::kInt64);
  EXPECT_THAT(Fetch<int64_t>(m), ElementsAre(6));
  absl::Status st = RunError(Red(ReduceOp::kMean, Operand::Handle(i)));
  EXPECT_EQ(st.code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(st.message(), HasSubstr("mean(): could not infer output dtype"));
  st = RunError(Red(ReduceOp::kSum, Operand::Handle(x), 2));
  EXPECT_EQ(st.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(st.message(), HasSubstr("Dimension out of range"));
}

TEST_F(OpsTest, ShapeOps) {
  const uint64_t x = Make<int64_t>({2, 3}, {0, 1, 2, 3, 4, 5});
  OpSpec t = One(OpSpec::Kind::kTranspose, x);
  t.dim = 0;
  t.dim1 = 1;
  TensorMeta m = Run(t);
  EXPECT_EQ(m.shape.ToString(), "[3, 2]");
  EXPECT_THAT(Fetch<int64_t>(m), ElementsAre(0, 3, 1, 4, 2, 5));
  OpSpec r = One(OpSpec::Kind::kReshape, x);
  r.dims = {3, -1};
  EXPECT_EQ(Run(r).shape.ToString(), "[3, 2]");
  r.dims = {4, -1};
  absl::Status st = RunError(r);
  EXPECT_EQ(st.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(st.message(), HasSubstr("invalid for input of size 6"));
  OpSpec n = One(OpSpec::Kind::kNarrow, x);
  n.dim = 1;
  n.start = 1;
  n.length = 2;
  EXPECT_THAT(Fetch<int64_t>(Run(n)), ElementsAre(1, 2, 4, 5));
  OpSpec sel = One(OpSpec::Kind::kSelect, x);
  sel.dim = 0;
  sel.start = -1;
  m = Run(sel);
  EXPECT_EQ(m.shape.ToString(), "[3]");
  EXPECT_THAT(Fetch<int64_t>(m), ElementsAre(3, 4, 5));
  const uint64_t y = Make<int32_t>({2, 1}, {7, 8});
  OpSpec c;
  c.kind = OpSpec::Kind::kCat;
  c.inputs = {Operand::Handle(x), Operand::Handle(y)};
  c.dim = 1;
  m = Run(c);
  EXPECT_EQ(m.shape.ToString(), "[2, 4]");
  EXPECT_THAT(Fetch<int64_t>(m), ElementsAre(0, 1, 2, 7, 3, 4, 5, 8));
  c.dim = 0;
  st = RunError(c);
  EXPECT_EQ(st.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(st.message(),
            "Sizes of tensors must match except in dimension 0. Expected size "
            "3 but got size 1 for tensor number 1 in the list.");
  OpSpec cast = One(OpSpec::Kind::kCast, x);
  cast.dtype = DType::kFloat64;
  EXPECT_THAT(Fetch<double>(Run(cast)), ElementsAre(0, 1, 2, 3, 4, 5));
}

TEST_F(OpsTest, LinearAndErrors) {
  const uint64_t x = Make<float>({2, 3}, {1, 2, 3, 4, 5, 6});
  const uint64_t w = Make<float>({2, 3}, {1, 0, 0, 0, 1, 1});
  const uint64_t b = Make<float>({2}, {10, 20});
  OpSpec l;
  l.kind = OpSpec::Kind::kLinear;
  l.inputs = {Operand::Handle(x), Operand::Handle(w), Operand::Handle(b)};
  EXPECT_THAT(Fetch<float>(Run(l)), ElementsAre(11, 25, 14, 31));
  const uint64_t bad = Make<float>({2, 4}, std::vector<float>(8, 1));
  l.inputs = {Operand::Handle(x), Operand::Handle(bad)};
  absl::Status st = RunError(l);
  EXPECT_EQ(st.code(), absl::StatusCode::kInvalidArgument);
  // torch's words: linear is x @ w.t().
  EXPECT_EQ(st.message(),
            "mat1 and mat2 shapes cannot be multiplied (2x3 and 4x2)");
  // A shape mismatch is torch's broadcast message.
  const uint64_t v4 = Make<float>({4}, {1, 2, 3, 4});
  st = RunError(Bin(BinaryOp::kAdd, x, v4));
  EXPECT_EQ(st.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(st.message(),
            "The size of tensor a (3) must match the size of tensor b (4) at "
            "non-singleton dimension 1");
  // An op not defined for a dtype.
  const uint64_t bools = Make<uint8_t>({2}, {1, 0});
  EXPECT_EQ(RunError(Bin(BinaryOp::kPow, bools, bools)).code(),
            absl::StatusCode::kFailedPrecondition);
}

TEST_F(OpsTest, InPlaceOpsKeepTheHandle) {
  const uint64_t w = Make<float>({3}, {1, 2, 3});
  const uint64_t g = Make<float>({3}, {10, 10, 10});
  OpSpec axpy;
  axpy.kind = OpSpec::Kind::kInPlace;
  axpy.in_place = InPlaceOp::kAxpy;
  axpy.inputs = {Operand::Handle(w), Operand::Handle(g)};
  axpy.alpha = Scalar::Float(-0.1);
  const uint64_t held = Held();
  TensorMeta m = Run(axpy);
  EXPECT_EQ(m.handle, w);
  EXPECT_EQ(Held(), held);
  EXPECT_THAT(Fetch<float>(m), ElementsAre(0, 1, 2));
  OpSpec sub = axpy;
  sub.in_place = InPlaceOp::kSub;
  EXPECT_THAT(Fetch<float>(Run(sub)), ElementsAre(-10, -9, -8));
  // int64 target: a float result cannot be written back.
  const uint64_t i = Make<int64_t>({2}, {1, 2});
  OpSpec mul;
  mul.kind = OpSpec::Kind::kInPlace;
  mul.in_place = InPlaceOp::kMul;
  mul.inputs = {Operand::Handle(i)};
  mul.scalar = Scalar::Float(0.5);
  absl::Status st = RunError(mul);
  EXPECT_EQ(st.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(st.message(), HasSubstr("Float can't be cast"));
  mul.scalar = Scalar::Int(3);
  EXPECT_THAT(Fetch<int64_t>(Run(mul)), ElementsAre(3, 6));
  // Broadcast shape must be the target's.
  const uint64_t m23 = Make<float>({2, 3}, std::vector<float>(6, 1));
  st = RunError(Bin(BinaryOp::kAdd, w, m23));
  EXPECT_TRUE(st.ok());
  OpSpec add = sub;
  add.in_place = InPlaceOp::kAdd;
  add.inputs = {Operand::Handle(w), Operand::Handle(m23)};
  EXPECT_EQ(RunError(add).code(), absl::StatusCode::kInvalidArgument);
}

TEST_F(OpsTest, ExecuteWithDependenciesKeepsOnlyWhatIsAsked) {
  const uint64_t x = Make<float>({2, 2}, {1, 2, 3, 4});
  const uint64_t held = Held();
  std::vector<OpSpec> ops;
  OpSpec mm;
  mm.kind = OpSpec::Kind::kMatMul;
  mm.inputs = {Operand::Handle(x), Operand::Handle(x)};  // #0 = x @ x
  ops.push_back(mm);
  mm.inputs = {Operand::Result(0), Operand::Handle(x)};  // #1 = #0 @ x
  ops.push_back(mm);
  ops.push_back(Red(ReduceOp::kSum, Operand::Result(1)));  // #2
  const uint32_t keep[] = {2};
  auto kept = rt_->Execute(session_, ops, keep);
  ASSERT_TRUE(kept.ok()) << kept.status();
  ASSERT_EQ(kept->size(), 1u);
  // x^3 = [[37, 54], [81, 118]]
  EXPECT_THAT(Fetch<float>((*kept)[0]), ElementsAre(290));
  EXPECT_EQ(rt_->ListTensors(session_)->size(), 2u);
  ASSERT_TRUE(rt_->Release(session_, (*kept)[0].handle).ok());
  EXPECT_EQ(Held(), held);
}

TEST_F(OpsTest, ExecuteErrorMidListNamesTheOpAndLeaksNothing) {
  const uint64_t x = Make<float>({2, 3}, std::vector<float>(6, 1));
  const uint64_t held = Held();
  const size_t tensors = rt_->ListTensors(session_)->size();
  std::vector<OpSpec> ops;
  OpSpec mm;
  mm.kind = OpSpec::Kind::kMatMul;
  OpSpec t = One(OpSpec::Kind::kTranspose, x);
  t.dim = 0;
  t.dim1 = 1;
  ops.push_back(t);  // #0: [3, 2]
  mm.inputs = {Operand::Handle(x), Operand::Result(0)};
  ops.push_back(mm);  // #1: [2, 2]
  mm.inputs = {Operand::Result(1), Operand::Handle(x)};
  ops.push_back(mm);  // #2: [2, 3]
  mm.inputs = {Operand::Result(2), Operand::Handle(x)};
  ops.push_back(mm);  // #3: [2, 3] @ [2, 3] fails
  ops.push_back(Red(ReduceOp::kNorm, Operand::Result(3)));
  const uint32_t keep[] = {1, 4};
  auto kept = rt_->Execute(session_, ops, keep);
  ASSERT_FALSE(kept.ok());
  EXPECT_EQ(kept.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(kept.status().message(), HasSubstr("op #3 (matmul; operands: "
                                                 "result of op #2 [2, 3] "
                                                 "float32, handle "));
  EXPECT_THAT(kept.status().message(), HasSubstr("cannot be multiplied"));
  EXPECT_EQ(Held(), held);
  EXPECT_EQ(rt_->ListTensors(session_)->size(), tensors);
  // A forward reference and a bad keep index are refused.
  ops.resize(1);
  ops[0].inputs = {Operand::Result(0)};
  EXPECT_THAT(rt_->Execute(session_, ops, {}).status().message(),
              HasSubstr("not an earlier op"));
  const uint32_t bad_keep[] = {7};
  EXPECT_EQ(rt_->Execute(session_, ops, bad_keep).status().code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(Held(), held);
}

TEST_F(OpsTest, SameDeviceRuleForEveryOp) {
  const uint64_t a = Make<float>({2}, {1, 2}, "cpu:0");
  const uint64_t b = Make<float>({2}, {1, 2}, "cpu:1");
  OpSpec c;
  c.kind = OpSpec::Kind::kCat;
  c.inputs = {Operand::Handle(a), Operand::Handle(b)};
  absl::Status st = RunError(c);
  EXPECT_EQ(st.code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(st.message(), HasSubstr("cpu:0 and cpu:1"));
}

}  // namespace
}  // namespace tensord::core

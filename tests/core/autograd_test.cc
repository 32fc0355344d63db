// Autograd in the Runtime (core/autograd/autograd.h): every backward against central
// finite differences in float64, and PyTorch's rules (retain_graph, in-place
// changes to saved tensors, leaves in in-place ops, non-scalar roots,
// detach, no_grad, zero_grad) with their codes and messages.
// tests/python/test_autograd_torch.py compares the same against PyTorch
// through the proto.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cmath>
#include <functional>
#include <random>
#include <string>
#include <vector>

#include "core/base/op_table.h"
#include "core/planner/planner.h"
#include "core/runtime/runtime.h"

namespace tensord::core {
namespace {

using ::testing::HasSubstr;
using Kind = OpSpec::Kind;

// One input of a checked op: its shape and values, and whether the check
// differentiates with respect to it (else it is a constant, e.g. targets).
struct Input {
  std::vector<int64_t> dims;
  std::vector<double> values;  // float64 unless `dtype` says otherwise
  bool grad = true;
  DType dtype = DType::kFloat64;
  std::vector<int64_t> ints;  // int64 / bool values
};

class AutogradTest : public ::testing::Test {
 protected:
  void SetUp() override {
    RuntimeOptions options;
    options.host_memory_budget = 256 << 20;
    rt_ = Runtime::Create(std::move(options)).value();
    session_ = rt_->OpenSession("autograd").value();
  }

  uint64_t Make(const Input& in) {
    std::vector<uint8_t> bytes;
    if (in.dtype == DType::kFloat64) {
      bytes.resize(in.values.size() * 8);
      std::memcpy(bytes.data(), in.values.data(), bytes.size());
    } else if (in.dtype == DType::kInt64) {
      bytes.resize(in.ints.size() * 8);
      std::memcpy(bytes.data(), in.ints.data(), bytes.size());
    } else {  // bool
      for (int64_t v : in.ints) bytes.push_back(v != 0);
    }
    auto m = rt_->CreateFromData(session_, "cpu", in.dtype, in.dims, bytes, "");
    EXPECT_TRUE(m.ok()) << m.status();
    return m->handle;
  }
  uint64_t MakeF64(std::vector<int64_t> dims, std::vector<double> v) {
    Input in;
    in.dims = std::move(dims);
    in.values = std::move(v);
    return Make(in);
  }

  std::vector<double> Fetch(uint64_t handle) {
    auto meta = rt_->GetTensor(session_, handle).value();
    EXPECT_EQ(meta.dtype, DType::kFloat64);
    auto reader = rt_->OpenReader(session_, handle).value();
    std::vector<double> out(meta.nbytes / 8);
    EXPECT_TRUE(
        reader->Read(0, {reinterpret_cast<uint8_t*>(out.data()), meta.nbytes})
            .ok());
    return out;
  }

  static OpSpec Op(Kind kind, std::vector<uint64_t> handles) {
    OpSpec op;
    op.kind = kind;
    for (uint64_t h : handles) op.inputs.push_back(Operand::Handle(h));
    return op;
  }
  absl::StatusOr<TensorMeta> RequiresGrad(uint64_t h, bool on = true) {
    OpSpec op = Op(Kind::kRequiresGrad, {h});
    op.requires_grad = on;
    return rt_->Run(session_, op);
  }
  absl::Status Backward(uint64_t root, std::optional<uint64_t> grad = {},
                        bool retain = false) {
    OpSpec op = Op(Kind::kBackward, {root});
    if (grad) op.inputs.push_back(Operand::Handle(*grad));
    op.retain_graph = retain;
    return rt_->Run(session_, op).status();
  }
  absl::StatusOr<std::vector<double>> Grad(uint64_t h) {
    auto g = rt_->Run(session_, Op(Kind::kGrad, {h}));
    if (!g.ok()) return g.status();
    std::vector<double> v = Fetch(g->handle);
    EXPECT_TRUE(rt_->Release(session_, g->handle).ok());
    return v;
  }
  // sum(op(inputs) * weight) for the op `make` builds on the handles.
  absl::StatusOr<double> Loss(const std::function<OpSpec(
                                  const std::vector<uint64_t>&)>& make,
                              const std::vector<uint64_t>& handles,
                              uint64_t weight, uint64_t* root = nullptr) {
    std::vector<OpSpec> ops(3);
    ops[0] = make(handles);
    ops[1].kind = Kind::kBinary;
    ops[1].binary = BinaryOp::kMul;
    ops[1].inputs = {Operand::Result(0), Operand::Handle(weight)};
    ops[2].kind = Kind::kReduce;
    ops[2].reduce = ReduceOp::kSum;
    ops[2].inputs = {Operand::Result(1)};
    const uint32_t keep[] = {2};
    auto kept = rt_->Execute(session_, ops, keep);
    if (!kept.ok()) return kept.status();
    const double value = Fetch((*kept)[0].handle)[0];
    if (root != nullptr) {
      *root = (*kept)[0].handle;
    } else {
      EXPECT_TRUE(rt_->Release(session_, (*kept)[0].handle).ok());
    }
    return value;
  }

  // The gradient of sum(op(inputs) * w), w random, with respect to each
  // input marked `grad`, from backward and from central differences.
  void GradCheck(const std::vector<Input>& inputs,
                 const std::function<OpSpec(const std::vector<uint64_t>&)>&
                     make,
                 double tolerance = 1e-6) {
    std::vector<uint64_t> handles;
    for (const Input& in : inputs) handles.push_back(Make(in));
    auto shape = rt_->Run(session_, make(handles));
    ASSERT_TRUE(shape.ok()) << shape.status();
    std::vector<double> w(shape->shape.NumElements());
    for (double& v : w) v = Uniform(-1, 1);
    const uint64_t weight = MakeF64(shape->shape.DimsVector(), w);
    ASSERT_TRUE(rt_->Release(session_, shape->handle).ok());
    for (size_t i = 0; i < inputs.size(); ++i) {
      if (inputs[i].grad) {
        ASSERT_TRUE(RequiresGrad(handles[i]).ok());
      }
    }
    uint64_t root = 0;
    ASSERT_TRUE(Loss(make, handles, weight, &root).ok());
    auto root_meta = rt_->GetTensor(session_, root).value();
    EXPECT_TRUE(root_meta.requires_grad);
    EXPECT_EQ(root_meta.grad_fn, "SumBackward0");
    absl::Status backward = Backward(root);
    ASSERT_TRUE(backward.ok()) << backward;
    for (size_t i = 0; i < inputs.size(); ++i) {
      if (!inputs[i].grad) continue;
      auto analytic = Grad(handles[i]);
      ASSERT_TRUE(analytic.ok()) << analytic.status();
      ASSERT_EQ(analytic->size(), inputs[i].values.size());
      for (size_t j = 0; j < inputs[i].values.size(); ++j) {
        const double eps = 1e-6;
        std::vector<uint64_t> shifted = handles;
        double sides[2];
        for (int s = 0; s < 2; ++s) {
          Input moved = inputs[i];
          moved.values[j] += s == 0 ? eps : -eps;
          shifted[i] = Make(moved);
          auto loss = Loss(make, shifted, weight);
          ASSERT_TRUE(loss.ok()) << loss.status();
          sides[s] = *loss;
          ASSERT_TRUE(rt_->Release(session_, shifted[i]).ok());
        }
        const double numeric = (sides[0] - sides[1]) / (2 * eps);
        EXPECT_NEAR((*analytic)[j], numeric,
                    tolerance * std::max(1.0, std::abs(numeric)))
            << "input " << i << " element " << j;
      }
    }
  }

  double Uniform(double lo, double hi) {
    return std::uniform_real_distribution<double>(lo, hi)(rng_);
  }
  Input Random(std::vector<int64_t> dims, double lo = -2, double hi = 2) {
    Input in;
    in.dims = dims;
    int64_t n = 1;
    for (int64_t d : dims) n *= d;
    for (int64_t i = 0; i < n; ++i) in.values.push_back(Uniform(lo, hi));
    return in;
  }
  static Input Ints(std::vector<int64_t> dims, std::vector<int64_t> v,
                    DType dtype = DType::kInt64) {
    Input in;
    in.dims = std::move(dims);
    in.grad = false;
    in.dtype = dtype;
    in.ints = std::move(v);
    return in;
  }

  std::unique_ptr<Runtime> rt_;
  std::string session_;
  std::mt19937_64 rng_{2026};
};

WindowArgs Window(std::vector<int64_t> kernel, std::vector<int64_t> stride = {},
                  std::vector<int64_t> padding = {},
                  std::vector<int64_t> dilation = {}, int64_t groups = 1,
                  bool count_include_pad = true,
                  std::vector<int64_t> output_size = {}) {
  WindowArgs w;
  w.kernel_size = std::move(kernel);
  w.stride = std::move(stride);
  w.padding = std::move(padding);
  w.dilation = std::move(dilation);
  w.groups = groups;
  w.count_include_pad = count_include_pad;
  w.output_size = std::move(output_size);
  return w;
}

OpSpec Binary(BinaryOp op, const std::vector<uint64_t>& h) {
  OpSpec s;
  s.kind = Kind::kBinary;
  s.binary = op;
  for (uint64_t x : h) s.inputs.push_back(Operand::Handle(x));
  return s;
}
OpSpec WithScalar(BinaryOp op, uint64_t h, Scalar v, bool first = false) {
  OpSpec s;
  s.kind = Kind::kBinary;
  s.binary = op;
  s.inputs = {Operand::Handle(h)};
  s.scalar = v;
  s.scalar_first = first;
  return s;
}
OpSpec OnAll(Kind kind, const std::vector<uint64_t>& h) {
  OpSpec s;
  s.kind = kind;
  for (uint64_t x : h) s.inputs.push_back(Operand::Handle(x));
  return s;
}

TEST_F(AutogradTest, ElementwiseWithBroadcastingAndNumbers) {
  for (BinaryOp op : {BinaryOp::kAdd, BinaryOp::kSub, BinaryOp::kMul,
                      BinaryOp::kDiv, BinaryOp::kMaximum, BinaryOp::kMinimum}) {
    SCOPED_TRACE(BinaryOpName(op));
    GradCheck({Random({2, 1, 3}), Random({4, 3}, 0.5, 2)},
              [op](const auto& h) { return Binary(op, h); });
  }
  GradCheck({Random({2, 3}, 0.5, 2), Random({3}, -1.5, 1.5)},
            [](const auto& h) { return Binary(BinaryOp::kPow, h); });
  for (bool first : {false, true}) {
    for (BinaryOp op : {BinaryOp::kAdd, BinaryOp::kSub, BinaryOp::kMul,
                        BinaryOp::kDiv, BinaryOp::kPow, BinaryOp::kMaximum}) {
      SCOPED_TRACE(std::string(BinaryOpName(op)) + (first ? " first" : ""));
      GradCheck({Random({2, 3}, 0.5, 2)}, [=](const auto& h) {
        return WithScalar(op, h[0], Scalar::Float(1.5), first);
      });
    }
  }
  GradCheck({Random({3})}, [](const auto& h) {
    return WithScalar(BinaryOp::kMul, h[0], Scalar::Int(3));
  });
}

TEST_F(AutogradTest, UnaryOps) {
  // Every unary row of the op table, with arguments other than its
  // defaults where it has some.
  for (const OpRow& row : OpRows()) {
    if (row.kind != Kind::kUnary) continue;
    const UnaryOp op = static_cast<UnaryOp>(row.variant);
    SCOPED_TRACE(row.id);
    const bool positive = op == UnaryOp::kLog || op == UnaryOp::kSqrt;
    const std::array<double, 2> args = {row.param_defaults[0] * 1.5 - 0.25,
                                        row.param_defaults[1] * 1.25};
    GradCheck({positive ? Random({2, 3}, 0.5, 2) : Random({2, 3})},
              [op, args](const auto& h) {
                OpSpec s = OnAll(Kind::kUnary, h);
                s.unary = op;
                s.args = args;
                return s;
              });
  }
}

TEST_F(AutogradTest, MatMulEveryRankAndLinear) {
  const std::vector<std::pair<std::vector<int64_t>, std::vector<int64_t>>>
      shapes = {{{3, 4}, {4, 2}},       {{4}, {4, 2}},    {{3, 4}, {4}},
                {{4}, {4}},             {{2, 3, 4}, {4, 5}},
                {{2, 1, 3, 4}, {3, 4, 2}}, {{4}, {2, 4, 3}}};
  for (const auto& [a, b] : shapes) {
    GradCheck({Random(a), Random(b)},
              [](const auto& h) { return OnAll(Kind::kMatMul, h); });
  }
  GradCheck({Random({5, 4}), Random({3, 4}), Random({3})},
            [](const auto& h) { return OnAll(Kind::kLinear, h); });
  GradCheck({Random({2, 5, 4}), Random({3, 4})},
            [](const auto& h) { return OnAll(Kind::kLinear, h); });
  GradCheck({Random({4}), Random({3, 4}), Random({3})},
            [](const auto& h) { return OnAll(Kind::kLinear, h); });
}

TEST_F(AutogradTest, Reductions) {
  struct Case {
    ReduceOp op;
    std::vector<int64_t> dims;
    bool keepdim;
  };
  for (const Case& c : std::vector<Case>{{ReduceOp::kSum, {}, false},
                                         {ReduceOp::kSum, {1}, true},
                                         {ReduceOp::kMean, {0, 2}, false},
                                         {ReduceOp::kMean, {}, false},
                                         {ReduceOp::kMax, {1}, false},
                                         {ReduceOp::kMin, {}, false},
                                         {ReduceOp::kNorm, {-1}, true},
                                         {ReduceOp::kNorm, {}, false}}) {
    SCOPED_TRACE(ReduceOpName(c.op));
    GradCheck({Random({2, 3, 4})}, [&](const auto& h) {
      OpSpec s = OnAll(Kind::kReduce, h);
      s.reduce = c.op;
      s.reduce_dims = c.dims;
      s.keepdim = c.keepdim;
      return s;
    });
  }
}

TEST_F(AutogradTest, SoftmaxAndLogSoftmax) {
  for (bool log : {false, true}) {
    for (int64_t dim : {0, 1, -1}) {
      GradCheck({Random({3, 4})}, [=](const auto& h) {
        OpSpec s = OnAll(Kind::kSoftmax, h);
        s.log = log;
        s.dim = dim;
        return s;
      });
    }
  }
}

TEST_F(AutogradTest, ViewsCatAndCast) {
  GradCheck({Random({2, 3, 4})}, [](const auto& h) {
    OpSpec s = OnAll(Kind::kPermute, h);
    s.dims = {2, 0, 1};
    return s;
  });
  GradCheck({Random({2, 3, 4})}, [](const auto& h) {
    OpSpec s = OnAll(Kind::kTranspose, h);
    s.dim = 0;
    s.dim1 = -1;
    return s;
  });
  GradCheck({Random({2, 3, 4})}, [](const auto& h) {
    OpSpec s = OnAll(Kind::kReshape, h);
    s.dims = {4, -1};
    return s;
  });
  GradCheck({Random({3, 5})}, [](const auto& h) {
    OpSpec s = OnAll(Kind::kNarrow, h);
    s.dim = 1;
    s.start = 1;
    s.length = 3;
    return s;
  });
  GradCheck({Random({3, 5})}, [](const auto& h) {
    OpSpec s = OnAll(Kind::kSelect, h);
    s.dim = 0;
    s.start = -1;
    return s;
  });
  GradCheck({Random({2, 3}), Random({2, 1}), Random({2, 2})},
            [](const auto& h) {
              OpSpec s = OnAll(Kind::kCat, h);
              s.dim = 1;
              return s;
            });
  GradCheck({Random({2, 3})}, [](const auto& h) {
    OpSpec s = OnAll(Kind::kCast, h);
    s.dtype = DType::kFloat64;
    return s;
  });
}

TEST_F(AutogradTest, ClampWhereAndDropout) {
  using Bound = OpSpec::Bound;
  GradCheck({Random({3, 4})}, [](const auto& h) {
    OpSpec s = OnAll(Kind::kClamp, h);
    s.clamp_min = Bound{Bound::Kind::kScalar, Scalar::Float(-0.5)};
    s.clamp_max = Bound{Bound::Kind::kScalar, Scalar::Float(0.7)};
    return s;
  });
  // Tensor bounds, broadcast: each takes the gradient where it binds.
  GradCheck({Random({3, 4}), Random({4}, -1, 0), Random({3, 1}, 0, 1)},
            [](const auto& h) {
              OpSpec s = OnAll(Kind::kClamp, h);
              s.clamp_min = Bound{Bound::Kind::kTensor, {}};
              s.clamp_max = Bound{Bound::Kind::kTensor, {}};
              return s;
            });
  GradCheck({Random({3, 4}), Random({3, 4})}, [](const auto& h) {
    OpSpec s = OnAll(Kind::kClamp, h);
    s.clamp_max = Bound{Bound::Kind::kTensor, {}};
    return s;
  });
  Input cond = Ints({3, 4}, {1, 0, 0, 1, 1, 1, 0, 0, 1, 0, 1, 0}, DType::kBool);
  GradCheck({cond, Random({3, 4}), Random({4})}, [](const auto& h) {
    OpSpec s = OnAll(Kind::kWhere, h);
    s.where_input = Bound{Bound::Kind::kTensor, {}};
    s.where_other = Bound{Bound::Kind::kTensor, {}};
    return s;
  });
  GradCheck({Random({4, 5})}, [](const auto& h) {
    OpSpec s = OnAll(Kind::kDropout, h);
    s.dropout_p = 0.4;
    s.seed = 7;
    return s;
  });
}

TEST_F(AutogradTest, Conv2dEveryArgument) {
  struct Case {
    std::vector<int64_t> x, w;
    bool bias;
    WindowArgs args;
  };
  const std::vector<Case> cases = {
      {{2, 3, 6, 6}, {4, 3, 3, 3}, true, Window({})},
      {{1, 2, 7, 6}, {3, 2, 3, 2}, false, Window({}, {2, 1}, {1, 2}, {1, 1})},
      {{2, 2, 7, 7}, {2, 2, 2, 3}, true, Window({}, {2}, {1}, {2, 1})},
      {{2, 4, 5, 5}, {6, 2, 3, 3}, true, Window({}, {1}, {1}, {1}, 2)},
      {{3, 5, 5}, {2, 3, 3, 3}, true, Window({})},  // unbatched
  };
  for (const Case& c : cases) {
    std::vector<Input> in = {Random(c.x), Random(c.w)};
    if (c.bias) in.push_back(Random({c.w[0]}));
    GradCheck(in, [&](const auto& h) {
      OpSpec s = OnAll(Kind::kConv2d, h);
      s.window = c.args;
      return s;
    });
  }
}

TEST_F(AutogradTest, NormsEveryArgument) {
  struct Case {
    NormKind kind;
    std::vector<int64_t> x, param;  // param: weight's and bias's shape
    bool weight, bias, running, train;
  };
  const std::vector<Case> cases = {
      {NormKind::kBatchNorm, {3, 2, 3, 2}, {2}, true, true, true, true},
      {NormKind::kBatchNorm, {4, 3}, {3}, false, false, false, true},
      {NormKind::kBatchNorm, {3, 2, 4}, {2}, true, false, true, false},
      {NormKind::kBatchNorm, {2, 3, 2, 2}, {3}, false, true, true, false},
      {NormKind::kLayerNorm, {2, 3, 4}, {3, 4}, true, true, false, false},
      {NormKind::kLayerNorm, {5, 4}, {4}, false, false, false, false},
      {NormKind::kLayerNorm, {2, 3, 4}, {4}, true, false, false, false},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(::testing::Message() << "case with x of rank " << c.x.size());
    std::vector<Input> in = {Random(c.x)};
    if (c.weight) in.push_back(Random(c.param));
    if (c.bias) in.push_back(Random(c.param));
    if (c.running) {
      Input mean = Random(c.param), var = Random(c.param, 0.5, 2);
      mean.grad = var.grad = false;
      in.push_back(mean);
      in.push_back(var);
    }
    GradCheck(in, [&](const auto& h) {
      OpSpec s = OnAll(Kind::kNorm, h);
      s.norm.kind = c.kind;
      s.norm.weight = c.weight;
      s.norm.bias = c.bias;
      s.norm.running_stats = c.running;
      s.norm.eps = 1e-3;
      if (c.kind == NormKind::kLayerNorm) s.norm.normalized_shape = c.param;
      s.train = c.train;
      return s;
    });
  }
}

TEST_F(AutogradTest, Pooling) {
  struct Case {
    Kind kind;
    WindowArgs args;
  };
  const std::vector<Case> cases = {
      {Kind::kMaxPool2d, Window({2})},
      {Kind::kMaxPool2d, Window({3, 2}, {2, 1}, {1, 1}, {1, 2})},
      {Kind::kAvgPool2d, Window({2})},
      {Kind::kAvgPool2d, Window({3}, {2}, {1}, {}, 1, true)},
      {Kind::kAvgPool2d, Window({3}, {2}, {1}, {}, 1, false)},
      {Kind::kAdaptiveAvgPool2d, Window({}, {}, {}, {}, 1, true, {3, 2})},
  };
  for (const Case& c : cases) {
    GradCheck({Random({2, 3, 6, 5})}, [&](const auto& h) {
      OpSpec s = OnAll(c.kind, h);
      s.window = c.args;
      return s;
    });
  }
}

// The backward of an op whose row saves_plan reads the forward's plan:
// backward plans no convolution, pool or loss again (the planners' own
// counters, core/planner/planner.h).
TEST_F(AutogradTest, BackwardPlansNothingTheForwardPlanned) {
  const uint64_t x = Make(Random({2, 3, 6, 6}));
  const uint64_t w = Make(Random({4, 3, 3, 3}));
  ASSERT_TRUE(RequiresGrad(w).ok());
  const uint64_t t = Make(Ints({2}, {1, 3}));
  std::vector<OpSpec> ops(5);
  ops[0] = Op(Kind::kConv2d, {x, w});
  ops[0].window = Window({});
  ops[1].kind = Kind::kMaxPool2d;
  ops[1].inputs = {Operand::Result(0)};
  ops[1].window = Window({2});
  ops[2].kind = Kind::kAdaptiveAvgPool2d;
  ops[2].inputs = {Operand::Result(1)};
  ops[2].window = Window({}, {}, {}, {}, 1, true, {1, 1});
  ops[3].kind = Kind::kReshape;
  ops[3].inputs = {Operand::Result(2)};
  ops[3].dims = {2, 4};
  ops[4].kind = Kind::kLoss;
  ops[4].loss = LossKind::kCrossEntropy;
  ops[4].inputs = {Operand::Result(3), Operand::Handle(t)};
  const uint32_t keep[] = {4};
  auto kept = rt_->Execute(session_, ops, keep);
  ASSERT_TRUE(kept.ok()) << kept.status();
  const Planner planners[] = {Planner::kConv2d, Planner::kPool2d,
                              Planner::kAdaptiveAvgPool2d, Planner::kLoss};
  std::vector<uint64_t> before;
  for (Planner p : planners) before.push_back(PlanCalls(p));
  ASSERT_TRUE(Backward((*kept)[0].handle).ok());
  for (size_t i = 0; i < std::size(planners); ++i) {
    EXPECT_EQ(PlanCalls(planners[i]), before[i])
        << "planner " << static_cast<int>(planners[i]);
  }
  EXPECT_EQ(Grad(w)->size(), 4u * 3 * 3 * 3);
}

// A runtime with the host device only, its one-call kernels on or off
// (--kernel-libraries), for the tests comparing the two paths.
std::unique_ptr<Runtime> HostRuntime(bool kernel_libraries) {
  RuntimeOptions options;
  options.host_memory_budget = 256 << 20;
  options.kernel_libraries = kernel_libraries;
  return Runtime::Create(std::move(options)).value();
}

// A float32 tensor of `dims` on the cpu, requiring grad when `grad`.
uint64_t UploadFloats(Runtime& rt, const std::string& session,
                      const std::vector<int64_t>& dims,
                      const std::vector<float>& v, bool grad) {
  const std::span<const uint8_t> bytes(
      reinterpret_cast<const uint8_t*>(v.data()), v.size() * sizeof(float));
  const uint64_t h =
      rt.CreateFromData(session, "cpu", DType::kFloat32, dims, bytes, "")
          .value()
          .handle;
  if (grad) {
    OpSpec g;
    g.kind = Kind::kRequiresGrad;
    g.requires_grad = true;
    g.inputs = {Operand::Handle(h)};
    EXPECT_TRUE(rt.Run(session, g).ok());
  }
  return h;
}

std::vector<float> ReadFloats(Runtime& rt, const std::string& session,
                              uint64_t h) {
  const TensorMeta meta = rt.GetTensor(session, h).value();
  std::vector<float> out(meta.nbytes / sizeof(float));
  EXPECT_TRUE(
      rt.OpenReader(session, h)
          .value()
          ->Read(0, {reinterpret_cast<uint8_t*>(out.data()), meta.nbytes})
          .ok());
  return out;
}

// conv2d on the CPU's library (oneDNN, float32) with pooling on its direct
// kernel, and both composed of tensord's kernels (--kernel-libraries=false)
// agree: forward, bias, and
// the gradients of x, the weight and the bias, on strided, padded, dilated
// and grouped windows and an unbatched input, with max and average pooling
// (padding counted or not) after the convolution.
TEST(LibraryConvTest, EqualsTheComposedConvolution) {
  std::unique_ptr<Runtime> library = HostRuntime(true);
  std::unique_ptr<Runtime> composed = HostRuntime(false);
  if (library->ListDevices()[0].properties.kernel_library.empty()) {
    GTEST_SKIP() << "one-call kernels are off";
  }
  EXPECT_TRUE(composed->ListDevices()[0].properties.kernel_library.empty());
  struct Case {
    std::vector<int64_t> x, w;
    WindowArgs window;
    Kind pool = Kind::kConv2d;  // kMaxPool2d/kAvgPool2d after the conv
    WindowArgs pool_window = {};
  };
  auto pooling = [](int64_t kernel, int64_t stride, int64_t padding,
                    bool count_include_pad) {
    WindowArgs w;
    w.kernel_size = {kernel};
    w.stride = {stride};
    w.padding = {padding};
    w.count_include_pad = count_include_pad;
    return w;
  };
  auto window = [](int64_t stride, int64_t padding, int64_t dilation,
                   int64_t groups) {
    WindowArgs w;
    w.stride = {stride};
    w.padding = {padding};
    w.dilation = {dilation};
    w.groups = groups;
    return w;
  };
  const std::vector<Case> cases = {
      {{4, 3, 12, 12}, {8, 3, 3, 3}, window(1, 1, 1, 1)},
      {{2, 4, 11, 9}, {6, 2, 3, 2}, window(2, 1, 2, 2)},
      {{3, 6, 8, 8}, {6, 1, 3, 3}, window(1, 1, 1, 6)},
      {{3, 7, 7}, {5, 3, 2, 2}, window(1, 0, 1, 1)},  // unbatched
      // Seed 001's two convolutions at batch 8, twice each: the second
      // run reuses the cached primitives.
      {{8, 3, 32, 32}, {6, 3, 5, 5}, window(1, 0, 1, 1)},
      {{8, 6, 14, 14}, {16, 6, 5, 5}, window(1, 0, 1, 1)},
      {{8, 3, 32, 32}, {6, 3, 5, 5}, window(1, 0, 1, 1)},
      {{8, 6, 14, 14}, {16, 6, 5, 5}, window(1, 0, 1, 1)},
      // Seed 001's pooling, and the others pooling runs.
      {{8, 3, 32, 32},
       {6, 3, 5, 5},
       window(1, 0, 1, 1),
       Kind::kMaxPool2d,
       pooling(2, 2, 0, true)},
      {{2, 4, 11, 9},
       {6, 2, 3, 2},
       window(2, 1, 2, 2),
       Kind::kMaxPool2d,
       pooling(3, 1, 1, true)},
      {{4, 3, 12, 12},
       {8, 3, 3, 3},
       window(1, 1, 1, 1),
       Kind::kAvgPool2d,
       pooling(3, 2, 1, true)},
      {{4, 3, 12, 12},
       {8, 3, 3, 3},
       window(1, 1, 1, 1),
       Kind::kAvgPool2d,
       pooling(3, 2, 1, false)},
      {{3, 7, 7},
       {5, 3, 2, 2},
       window(1, 0, 1, 1),
       Kind::kAvgPool2d,
       pooling(2, 2, 0, true)},  // unbatched
  };
  std::mt19937 gen(11);
  std::uniform_real_distribution<float> uniform(-1, 1);
  auto values = [&](const std::vector<int64_t>& dims) {
    int64_t n = 1;
    for (int64_t d : dims) n *= d;
    std::vector<float> v(n);
    for (float& f : v) f = uniform(gen);
    return v;
  };
  for (const Case& c : cases) {
    const std::vector<float> x = values(c.x), w = values(c.w),
                             b = values({c.w[0]});
    std::vector<std::vector<float>> results[2];
    for (int r = 0; r < 2; ++r) {
      Runtime& rt = r == 0 ? *library : *composed;
      const std::string session = rt.OpenSession("conv").value();
      auto upload = [&](const std::vector<int64_t>& dims,
                        const std::vector<float>& v) {
        return UploadFloats(rt, session, dims, v, true);
      };
      const uint64_t hx = upload(c.x, x), hw = upload(c.w, w),
                     hb = upload({c.w[0]}, b);
      auto read = [&](uint64_t h) { return ReadFloats(rt, session, h); };
      std::vector<OpSpec> ops(1);
      ops[0].kind = Kind::kConv2d;
      ops[0].inputs = {Operand::Handle(hx), Operand::Handle(hw),
                       Operand::Handle(hb)};
      ops[0].window = c.window;
      if (c.pool != Kind::kConv2d) {
        ops.emplace_back();
        ops[1].kind = c.pool;
        ops[1].inputs = {Operand::Result(0)};
        ops[1].window = c.pool_window;
      }
      const uint32_t last = static_cast<uint32_t>(ops.size()) - 1;
      ops.emplace_back();
      ops.back().kind = Kind::kUnary;  // a nonlinear loss: gradients that vary
      ops.back().unary = UnaryOp::kTanh;
      ops.back().inputs = {Operand::Result(last)};
      ops.emplace_back();
      ops.back().kind = Kind::kReduce;
      ops.back().reduce = ReduceOp::kSum;
      ops.back().inputs = {Operand::Result(last + 1)};
      const uint32_t keep[] = {last, last + 2};
      const std::vector<TensorMeta> kept =
          rt.Execute(session, ops, keep).value();
      OpSpec backward;
      backward.kind = Kind::kBackward;
      backward.inputs = {Operand::Handle(kept[1].handle)};
      const absl::Status back = rt.Run(session, backward).status();
      ASSERT_TRUE(back.ok()) << back;
      results[r].push_back(read(kept[0].handle));
      for (uint64_t h : {hx, hw, hb}) {
        OpSpec grad;
        grad.kind = Kind::kGrad;
        grad.inputs = {Operand::Handle(h)};
        results[r].push_back(read(rt.Run(session, grad).value().handle));
      }
    }
    const char* names[] = {"y", "x.grad", "w.grad", "b.grad"};
    for (size_t i = 0; i < results[0].size(); ++i) {
      ASSERT_EQ(results[0][i].size(), results[1][i].size()) << names[i];
      for (size_t k = 0; k < results[0][i].size(); ++k) {
        ASSERT_NEAR(results[0][i][k], results[1][i][k],
                    1e-4 * std::max(1.0f, std::abs(results[1][i][k])))
            << names[i] << " element " << k;
      }
    }
  }
}

// batch_norm in training on the CPU's one-call kernel (core/cpu/
// norm_kernels.h) and composed of reductions and elementwise kernels
// (--kernel-libraries=false) agree: y, the gradients of x, the weight and
// the bias, and the running statistics after the step, with and without
// each parameter, x of rank 2, 3 and 4.
TEST(LibraryBatchNormTest, EqualsTheComposedBatchNorm) {
  std::unique_ptr<Runtime> library = HostRuntime(true);
  std::unique_ptr<Runtime> composed = HostRuntime(false);
  struct Case {
    std::vector<int64_t> x;
    bool weight, bias, running;
  };
  const std::vector<Case> cases = {
      {{8, 4, 6, 6}, true, true, true},
      {{5, 3}, false, false, true},
      {{2, 3, 5}, true, false, false},
      {{4, 2, 3, 3}, false, true, true},
  };
  std::mt19937 gen(12);
  std::uniform_real_distribution<float> uniform(-1, 1);
  auto values = [&](int64_t n, float lo) {
    std::vector<float> v(n);
    for (float& f : v) f = lo + (uniform(gen) + 1) * 0.75f;
    return v;
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(::testing::Message() << "x of rank " << c.x.size());
    int64_t numel = 1;
    for (int64_t d : c.x) numel *= d;
    const int64_t ch = c.x[1];
    const std::vector<float> x = values(numel, -3), w = values(ch, -1),
                             b = values(ch, -1), mean = values(ch, -1),
                             var = values(ch, 0.5);
    std::vector<std::vector<float>> results[2];
    for (int r = 0; r < 2; ++r) {
      Runtime& rt = r == 0 ? *library : *composed;
      const std::string session = rt.OpenSession("bn").value();
      auto upload = [&](const std::vector<int64_t>& dims,
                        const std::vector<float>& v, bool grad) {
        return UploadFloats(rt, session, dims, v, grad);
      };
      auto read = [&](uint64_t h) { return ReadFloats(rt, session, h); };
      std::vector<uint64_t> grads = {upload(c.x, x, true)};
      std::vector<OpSpec> ops(3);
      ops[0].kind = Kind::kNorm;
      ops[0].norm.kind = NormKind::kBatchNorm;
      ops[0].norm.weight = c.weight;
      ops[0].norm.bias = c.bias;
      ops[0].norm.running_stats = c.running;
      ops[0].norm.eps = 1e-5;
      ops[0].norm.momentum = 0.1;
      ops[0].train = true;
      ops[0].inputs = {Operand::Handle(grads[0])};
      if (c.weight) grads.push_back(upload({ch}, w, true));
      if (c.weight) ops[0].inputs.push_back(Operand::Handle(grads.back()));
      if (c.bias) grads.push_back(upload({ch}, b, true));
      if (c.bias) ops[0].inputs.push_back(Operand::Handle(grads.back()));
      std::vector<uint64_t> running;
      if (c.running) {
        running = {upload({ch}, mean, false), upload({ch}, var, false)};
        for (uint64_t h : running) ops[0].inputs.push_back(Operand::Handle(h));
      }
      ops[1].kind = Kind::kUnary;  // a nonlinear loss: gradients that vary
      ops[1].unary = UnaryOp::kTanh;
      ops[1].inputs = {Operand::Result(0)};
      ops[2].kind = Kind::kReduce;
      ops[2].reduce = ReduceOp::kSum;
      ops[2].inputs = {Operand::Result(1)};
      const uint32_t keep[] = {0, 2};
      const absl::StatusOr<std::vector<TensorMeta>> kept =
          rt.Execute(session, ops, keep);
      ASSERT_TRUE(kept.ok()) << kept.status();
      OpSpec backward;
      backward.kind = Kind::kBackward;
      backward.inputs = {Operand::Handle((*kept)[1].handle)};
      const absl::Status back = rt.Run(session, backward).status();
      ASSERT_TRUE(back.ok()) << back;
      results[r].push_back(read((*kept)[0].handle));
      for (uint64_t h : grads) {
        OpSpec grad;
        grad.kind = Kind::kGrad;
        grad.inputs = {Operand::Handle(h)};
        results[r].push_back(read(rt.Run(session, grad).value().handle));
      }
      for (uint64_t h : running) results[r].push_back(read(h));
    }
    ASSERT_EQ(results[0].size(), results[1].size());
    for (size_t i = 0; i < results[0].size(); ++i) {
      ASSERT_EQ(results[0][i].size(), results[1][i].size()) << "result " << i;
      for (size_t k = 0; k < results[0][i].size(); ++k) {
        ASSERT_NEAR(results[0][i][k], results[1][i][k],
                    2e-5 * std::max(1.0f, std::abs(results[1][i][k])))
            << "result " << i << " (y, the gradients, the running "
            << "statistics) element " << k;
      }
    }
  }
}

TEST_F(AutogradTest, Losses) {
  const Input targets = Ints({4}, {2, 0, -100, 1});
  for (LossKind loss : {LossKind::kCrossEntropy, LossKind::kNll}) {
    for (LossReduction r :
         {LossReduction::kMean, LossReduction::kSum, LossReduction::kNone}) {
      SCOPED_TRACE(LossName(loss));
      GradCheck({Random({4, 3}), targets}, [=](const auto& h) {
        OpSpec s = OnAll(Kind::kLoss, h);
        s.loss = loss;
        s.reduction = r;
        return s;
      });
    }
  }
  GradCheck({Random({4, 3}), Ints({4}, {2, 0, 0, 1})}, [](const auto& h) {
    OpSpec s = OnAll(Kind::kLoss, h);
    s.loss = LossKind::kCrossEntropy;
    s.ignore_index = 0;  // a class index: those rows do not count
    return s;
  });
  GradCheck({Random({3}), Ints({}, {1})}, [](const auto& h) {
    OpSpec s = OnAll(Kind::kLoss, h);  // unbatched
    s.loss = LossKind::kCrossEntropy;
    return s;
  });
  for (LossReduction r :
       {LossReduction::kMean, LossReduction::kSum, LossReduction::kNone}) {
    GradCheck({Random({2, 3}), Random({2, 3})}, [=](const auto& h) {
      OpSpec s = OnAll(Kind::kLoss, h);
      s.loss = LossKind::kMse;
      s.reduction = r;
      return s;
    });
  }
}

TEST_F(AutogradTest, GradsAccumulateAndFlowThroughSharedInputs) {
  // y = x * x + x: dy/dx = 2x + 1, and twice that after two backwards.
  const uint64_t x = MakeF64({3}, {1, -2, 0.5});
  ASSERT_TRUE(RequiresGrad(x).ok());
  for (int round = 1; round <= 2; ++round) {
    std::vector<OpSpec> ops(3);
    ops[0] = Binary(BinaryOp::kMul, {x, x});
    ops[1].kind = Kind::kBinary;
    ops[1].inputs = {Operand::Result(0), Operand::Handle(x)};
    ops[2].kind = Kind::kReduce;
    ops[2].inputs = {Operand::Result(1)};
    ops.push_back(OnAll(Kind::kBackward, {}));
    ops[3].inputs = {Operand::Result(2)};
    const uint32_t keep[] = {3};
    auto kept = rt_->Execute(session_, ops, keep);
    ASSERT_TRUE(kept.ok()) << kept.status();
    EXPECT_EQ((*kept)[0].grad_fn, "SumBackward0");
    EXPECT_THAT(Grad(x).value(),
                ::testing::ElementsAre(3 * round, -3 * round, 2 * round));
  }
  // zero_grad: None again.
  ASSERT_TRUE(rt_->Run(session_, OnAll(Kind::kZeroGrad, {x})).ok());
  EXPECT_EQ(Grad(x).status().code(), absl::StatusCode::kFailedPrecondition);
}

TEST_F(AutogradTest, PyTorchsRulesWithTheirCodes) {
  const uint64_t x = MakeF64({2}, {1, 2});
  const uint64_t w = MakeF64({2}, {3, 4});
  // backward of a tensor that does not require grad.
  auto product = rt_->Run(session_, Binary(BinaryOp::kMul, {x, w})).value();
  EXPECT_FALSE(product.requires_grad);
  auto plain = rt_->Run(session_, OnAll(Kind::kReduce, {product.handle})).value();
  absl::Status s = Backward(plain.handle);
  EXPECT_EQ(s.code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(s.message(), HasSubstr("does not require grad and does not have "
                                     "a grad_fn"));
  // requires_grad_ of an integer tensor.
  const uint64_t ints = Make(Ints({2}, {1, 2}));
  s = RequiresGrad(ints).status();
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(s.message(), HasSubstr("only Tensors of floating point"));

  ASSERT_TRUE(RequiresGrad(w).ok());
  auto y = rt_->Run(session_, Binary(BinaryOp::kMul, {x, w})).value();
  EXPECT_TRUE(y.requires_grad);
  EXPECT_EQ(y.grad_fn, "MulBackward0");
  // a non-scalar root without a gradient; then with one of the wrong shape.
  s = Backward(y.handle);
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(s.message(), "grad can be implicitly created only for scalar outputs");
  const uint64_t wrong = MakeF64({3}, {1, 1, 1});
  s = Backward(y.handle, wrong);
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(s.message(),
            "Mismatch in shape: grad_output[0] has a shape of "
            "torch.Size([3]) and output[0] has a shape of torch.Size([2]).");
  // with a gradient, retained: twice.
  const uint64_t ones = MakeF64({2}, {1, 10});
  ASSERT_TRUE(Backward(y.handle, ones, /*retain=*/true).ok());
  EXPECT_THAT(Grad(w).value(), ::testing::ElementsAre(1, 20));
  ASSERT_TRUE(Backward(y.handle, ones).ok());
  EXPECT_THAT(Grad(w).value(), ::testing::ElementsAre(2, 40));
  // the graph is freed now.
  s = Backward(y.handle, ones);
  EXPECT_EQ(s.code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(s.message(), HasSubstr("Trying to backward through the graph a "
                                     "second time"));

  // An in-place op on a leaf that requires grad; allowed under no_grad.
  OpSpec step = OnAll(Kind::kInPlace, {w, x});
  step.in_place = InPlaceOp::kSub;
  s = rt_->Run(session_, step).status();
  EXPECT_EQ(s.code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_EQ(s.message(),
            "a leaf Variable that requires grad is being used in an in-place "
            "operation.");
  step.no_grad = true;
  ASSERT_TRUE(rt_->Run(session_, step).ok());
  EXPECT_THAT(Fetch(w), ::testing::ElementsAre(2, 2));

  // An in-place change to a tensor saved for backward.
  auto z = rt_->Run(session_, Binary(BinaryOp::kMul, {x, w})).value();
  OpSpec bump = OnAll(Kind::kInPlace, {x});
  bump.in_place = InPlaceOp::kAdd;
  bump.scalar = Scalar::Int(1);
  ASSERT_TRUE(rt_->Run(session_, bump).ok());
  s = Backward(z.handle, ones);
  EXPECT_EQ(s.code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(s.message(),
              HasSubstr("one of the variables needed for gradient computation "
                        "has been modified by an inplace operation: "
                        "[torch.DoubleTensor [2]], which is input 0 of "
                        "MulBackward0, is at version 1; expected version 0 "
                        "instead."));

  // detach and no_grad results are not tracked.
  auto d = rt_->Run(session_, OnAll(Kind::kDetach, {w})).value();
  EXPECT_FALSE(d.requires_grad);
  EXPECT_THAT(Fetch(d.handle), ::testing::ElementsAre(2, 2));
  OpSpec quiet = Binary(BinaryOp::kMul, {x, w});
  quiet.no_grad = true;
  auto q = rt_->Run(session_, quiet).value();
  EXPECT_FALSE(q.requires_grad);
  EXPECT_EQ(q.grad_fn, "");
  // requires_grad_(false) of an op's result.
  s = RequiresGrad(z.handle, false).status();
  EXPECT_EQ(s.code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(s.message(), HasSubstr("only change requires_grad flags of leaf"));
}

TEST(AutogradMoveTest, GradientsFlowBackAcrossDevices) {
  // x on cpu:0 requires grad; y = x.to("cpu:1") * w; y.sum().backward()
  // gives x.grad = w, on cpu:0.
  RuntimeOptions options;
  options.host_devices = 2;
  options.host_memory_budget = 16 << 20;
  auto rt = Runtime::Create(std::move(options)).value();
  const std::string s = rt->OpenSession("move").value();
  auto make = [&](std::string_view device, std::vector<double> v) {
    std::vector<uint8_t> bytes(v.size() * 8);
    std::memcpy(bytes.data(), v.data(), bytes.size());
    const int64_t dims[] = {static_cast<int64_t>(v.size())};
    return rt->CreateFromData(s, device, DType::kFloat64, dims, bytes, "")
        .value()
        .handle;
  };
  const uint64_t x = make("cpu:0", {1, 2, 3});
  const uint64_t w = make("cpu:1", {4, 5, 6});
  OpSpec on;
  on.kind = Kind::kRequiresGrad;
  on.inputs = {Operand::Handle(x)};
  ASSERT_TRUE(rt->Run(s, on).ok());
  auto moved = rt->To(s, x, "cpu:1", false).value();
  EXPECT_EQ(moved.grad_fn, "ToCopyBackward0");
  std::vector<OpSpec> ops(3);
  ops[0].kind = Kind::kBinary;
  ops[0].binary = BinaryOp::kMul;
  ops[0].inputs = {Operand::Handle(moved.handle), Operand::Handle(w)};
  ops[1].kind = Kind::kReduce;
  ops[1].inputs = {Operand::Result(0)};
  ops[2].kind = Kind::kBackward;
  ops[2].inputs = {Operand::Result(1)};
  ASSERT_TRUE(rt->Execute(s, ops, {}).ok());
  OpSpec grad;
  grad.kind = Kind::kGrad;
  grad.inputs = {Operand::Handle(x)};
  auto g = rt->Run(s, grad).value();
  EXPECT_EQ(g.device, "cpu:0");
  std::vector<double> v(3);
  ASSERT_TRUE(rt->OpenReader(s, g.handle)
                  .value()
                  ->Read(0, {reinterpret_cast<uint8_t*>(v.data()), 24})
                  .ok());
  EXPECT_THAT(v, ::testing::ElementsAre(4, 5, 6));
}

TEST_F(AutogradTest, OptimizerArgumentsArePrintedAsPythonPrintsThem) {
  const uint64_t p = MakeF64({2}, {1, 2});
  for (const auto& [lr, text] :
       std::vector<std::pair<double, std::string>>{
           {-0.1, "-0.1"}, {-2, "-2.0"}, {-0.123456789, "-0.123456789"},
           {-1e-05, "-1e-05"}}) {
    OpSpec step = Op(Kind::kOptimizerStep, {p});
    step.optimizer.lr = lr;
    absl::Status s = rt_->Run(session_, step).status();
    EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
    EXPECT_EQ(s.message(), "Invalid learning rate: " + text);
  }
}

TEST_F(AutogradTest, ATrainingLoopHoldsOnlyParametersAndGrads) {
  // 200 steps of w -= 0.1 * grad(mean((x w - t)^2)) in one Execute each;
  // the device holds the same bytes after the first step as after the last.
  const uint64_t x = MakeF64({8, 3}, std::vector<double>(24, 0.5));
  const uint64_t t = MakeF64({8, 1}, std::vector<double>(8, 1.0));
  const uint64_t w = MakeF64({3, 1}, {0, 0, 0});
  ASSERT_TRUE(RequiresGrad(w).ok());
  uint64_t held_after_first = 0;
  for (int i = 0; i < 200; ++i) {
    std::vector<OpSpec> ops;
    ops.push_back(OnAll(Kind::kMatMul, {x, w}));
    OpSpec loss = OnAll(Kind::kLoss, {});
    loss.inputs = {Operand::Result(0), Operand::Handle(t)};
    loss.loss = LossKind::kMse;
    ops.push_back(loss);
    OpSpec back = OnAll(Kind::kBackward, {});
    back.inputs = {Operand::Result(1)};
    ops.push_back(back);
    OpSpec grad = OnAll(Kind::kGrad, {w});
    ops.push_back(grad);
    OpSpec update = OnAll(Kind::kInPlace, {w});
    update.inputs.push_back(Operand::Result(3));
    update.in_place = InPlaceOp::kAxpy;
    update.alpha = Scalar::Float(-0.1);
    update.no_grad = true;
    ops.push_back(update);
    ops.push_back(OnAll(Kind::kZeroGrad, {w}));
    const uint32_t keep[] = {1};
    auto kept = rt_->Execute(session_, ops, keep);
    ASSERT_TRUE(kept.ok()) << kept.status();
    const double value = Fetch((*kept)[0].handle)[0];
    ASSERT_TRUE(rt_->Release(session_, (*kept)[0].handle).ok());
    if (i == 0) {
      EXPECT_DOUBLE_EQ(value, 1.0);
      held_after_first = rt_->ListDevices()[0].held_bytes;
    }
    if (i == 199) {
      EXPECT_LT(value, 1e-6);
    }
  }
  EXPECT_EQ(rt_->ListDevices()[0].held_bytes, held_after_first);
  EXPECT_EQ(rt_->ListTensors(session_).value().size(), 3u);
  EXPECT_TRUE(rt_->ListHeld(session_).value().empty());
}

TEST_F(AutogradTest, SavedTensorsAndGradsAreTheSessionsMemory) {
  // y = h * h saves h; once the client releases h, the graph still holds
  // its memory, and the session is charged for it: listed as held,
  // counted in the session's bytes and quota. backward frees it; the grad
  // it leaves in w is held next, until a handle names it or zero_grad.
  const uint64_t x = MakeF64({8, 3}, std::vector<double>(24, 0.5));
  const uint64_t w = MakeF64({3, 1}, {1, 2, 3});
  ASSERT_TRUE(RequiresGrad(w).ok());
  auto held = [&] { return rt_->ListHeld(session_).value(); };
  auto session_bytes = [&] { return rt_->ListSessions()[0].bytes; };
  const uint64_t h = rt_->Run(session_, Op(Kind::kMatMul, {x, w}))->handle;
  OpSpec square = Op(Kind::kBinary, {h, h});
  square.binary = BinaryOp::kMul;
  const uint64_t y = rt_->Run(session_, square)->handle;
  EXPECT_TRUE(held().empty()) << "h is saved, but its handle holds it";
  const uint64_t before = session_bytes();
  ASSERT_TRUE(rt_->Release(session_, h).ok());
  ASSERT_EQ(held().size(), 1u);
  EXPECT_EQ(held()[0].tag, "saved by MulBackward0");
  EXPECT_EQ(held()[0].nbytes, 64u);
  EXPECT_EQ(held()[0].shape.ToString(), "[8, 1]");
  EXPECT_EQ(held()[0].handle, 0u);
  EXPECT_EQ(session_bytes(), before) << "h's memory moved from its handle";

  OpSpec sum = Op(Kind::kReduce, {y});
  sum.reduce = ReduceOp::kSum;
  const uint64_t loss = rt_->Run(session_, sum)->handle;
  ASSERT_TRUE(Backward(loss).ok());
  ASSERT_EQ(held().size(), 1u) << "the graph is freed; the grad is held";
  EXPECT_EQ(held()[0].tag, absl::StrCat("grad of tensor ", w));
  EXPECT_EQ(held()[0].nbytes, 24u);
  const uint64_t g = rt_->Run(session_, Op(Kind::kGrad, {w}))->handle;
  EXPECT_TRUE(held().empty()) << "a handle names the grad now";
  ASSERT_TRUE(rt_->Release(session_, g).ok());
  EXPECT_EQ(held().size(), 1u);
  ASSERT_TRUE(rt_->Run(session_, Op(Kind::kZeroGrad, {w})).ok());
  EXPECT_TRUE(held().empty());

  // Dropping the graph's last tensor frees what it saved.
  ASSERT_TRUE(rt_->Release(session_, y).ok());
  const uint64_t h2 = rt_->Run(session_, Op(Kind::kMatMul, {x, w}))->handle;
  square.inputs = {Operand::Handle(h2), Operand::Handle(h2)};
  const uint64_t y2 = rt_->Run(session_, square)->handle;
  ASSERT_TRUE(rt_->Release(session_, h2).ok());
  EXPECT_EQ(held().size(), 1u);
  ASSERT_TRUE(rt_->Release(session_, y2).ok());
  EXPECT_TRUE(held().empty());
  ASSERT_TRUE(rt_->Release(session_, loss).ok());
  EXPECT_EQ(session_bytes(), 24u * 8 + 24u) << "x and w";
}

TEST(AutogradQuotaTest, HeldMemoryCountsTowardTheSessionQuota) {
  RuntimeOptions options;
  options.session_max_bytes = 1024;
  auto rt = Runtime::Create(std::move(options)).value();
  const std::string s = rt->OpenSession("quota").value();
  auto make = [&](int64_t n) {
    const int64_t dims[] = {n};
    return rt->CreateFromData(s, "cpu", DType::kFloat64, dims,
                              std::vector<uint8_t>(n * 8, 0), "");
  };
  const uint64_t x = make(48).value().handle;  // 384 bytes
  OpSpec mark;
  mark.kind = Kind::kRequiresGrad;
  mark.requires_grad = true;
  mark.inputs = {Operand::Handle(x)};
  ASSERT_TRUE(rt->Run(s, mark).ok());
  OpSpec exp;
  exp.kind = Kind::kUnary;
  exp.unary = UnaryOp::kExp;
  exp.inputs = {Operand::Handle(x)};
  const uint64_t e = rt->Run(s, exp).value().handle;  // 384, saved by exp
  OpSpec sum;
  sum.kind = Kind::kReduce;
  sum.reduce = ReduceOp::kSum;
  sum.inputs = {Operand::Handle(e)};
  const uint64_t loss = rt->Run(s, sum).value().handle;  // 8
  ASSERT_TRUE(rt->Release(s, e).ok());
  // 392 bytes in handles, 384 held by the graph: 256 more do not fit.
  absl::Status refused = make(32).status();
  EXPECT_EQ(refused.code(), absl::StatusCode::kResourceExhausted);
  EXPECT_THAT(refused.message(),
              HasSubstr("the session holds 776 of its limit of "
                                   "1024 bytes (384 bytes of them held by "
                                   "autograd"));
  ASSERT_TRUE(rt->Release(s, loss).ok());  // the graph goes with it
  EXPECT_TRUE(make(32).ok());
}

}  // namespace
}  // namespace tensord::core

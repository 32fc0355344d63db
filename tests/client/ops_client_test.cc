// The op set, Batch and tensor files through the client library against an
// in-process tensord (two host devices). File interop is checked with
// Debian's /usr/bin/python3 and numpy.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <filesystem>
#include <memory>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "server/server.h"
#include "tensord/client.h"
#include "tests/client/in_process_fixture.h"

namespace tensord {
namespace {

using ::testing::ElementsAre;
using ::testing::FloatNear;
using ::testing::HasSubstr;
using ::testing::Pointwise;

class OpsClientTest : public InProcessClientTest {
 protected:
  OpsClientTest() : InProcessClientTest("tensord-ops-") {}
  // The Python that checks files with numpy: $TENSORD_TEST_PYTHON, else
  // Debian's /usr/bin/python3 (deploy/install-deps.sh gives it numpy).
  static std::string PythonPath() {
    const char* env = std::getenv("TENSORD_TEST_PYTHON");
    return env != nullptr && *env != '\0' ? env : "/usr/bin/python3";
  }
  // Why numpy cannot be used here, or "" when it can (a machine that runs
  // a bundle's tests may have no numpy beside that Python).
  static std::string NumpyMissing() {
    const std::string cmd = PythonPath() + " -c \"import numpy\" 2>/dev/null";
    if (std::system(cmd.c_str()) == 0) return "";
    return PythonPath() +
           " has no numpy (set TENSORD_TEST_PYTHON to one that has it)";
  }
  static int Python(const std::string& code) {
    const std::string cmd = PythonPath() + " -c \"" + code + "\"";
    return std::system(cmd.c_str());
  }
};

TEST_F(OpsClientTest, TensorMethodsAndScalars) {
  Client& c = *client_;
  auto x = c.tensor<int32_t>({1, 2, 3});
  EXPECT_EQ((x * 2).dtype(), DType::kInt32);
  EXPECT_THAT((x * 2).fetch<int32_t>(), ElementsAre(2, 4, 6));
  EXPECT_EQ((x * 0.5).dtype(), DType::kFloat32);
  EXPECT_THAT((10 - x).fetch<int32_t>(), ElementsAre(9, 8, 7));
  EXPECT_THAT(x.gt(1).fetch<bool>(), ElementsAre(false, true, true));
  EXPECT_EQ(x.sum().item<int64_t>(), 6);
  auto m = c.tensor<float>({{1, 2, 3}, {4, 5, 6}});
  EXPECT_THAT(m.t().shape(), ElementsAre(3, 2));
  EXPECT_THAT(m.sum(0).fetch<float>(), ElementsAre(5, 7, 9));
  EXPECT_THAT(m.argmax(-1).fetch<int64_t>(), ElementsAre(2, 2));
  EXPECT_THAT(m.reshape({-1}).shape(), ElementsAre(6));
  EXPECT_THAT(m.select(0, 1).fetch<float>(), ElementsAre(4, 5, 6));
  EXPECT_THAT(cat({m, m}, 1).shape(), ElementsAre(2, 6));
  EXPECT_THAT((-m).relu().fetch<float>(), ElementsAre(0, 0, 0, 0, 0, 0));
  EXPECT_EQ(m.to(DType::kInt64).dtype(), DType::kInt64);
  auto w = c.tensor<float>({{1, 0, 0}, {0, 1, 1}});
  EXPECT_THAT(linear(m, w, c.tensor<float>({1, 1})).fetch<float>(),
              ElementsAre(2, 6, 5, 12));
  // In place: same handle, no new memory.
  const uint64_t held = Held();
  m.axpy_(-1.0, m);
  EXPECT_THAT(m.fetch<float>(), ElementsAre(0, 0, 0, 0, 0, 0));
  m.add_(1.5);
  EXPECT_EQ(m.sum().item<float>(), 9);
  EXPECT_EQ(Held(), held);  // in-place updates allocate nothing
  Error e = [&] {
    try {
      x.mul_(0.5);
    } catch (const Error& err) {
      return err;
    }
    return Error(StatusCode::OK, "");
  }();
  EXPECT_EQ(e.code(), StatusCode::INVALID_ARGUMENT);
  EXPECT_THAT(e.message(), HasSubstr("can't be cast"));
}

// The code and message of the Error `f` throws (OK when it throws none).
template <typename F>
Error ErrorOf(F f) {
  try {
    f();
  } catch (const Error& e) {
    return e;
  }
  return Error(StatusCode::OK, "");
}

// silu and gelu (exact and tanh) against their definitions computed here in
// double; integer inputs compute in float32, as PyTorch's.
TEST_F(OpsClientTest, ActivationsMatchTheirDefinitions) {
  Client& c = *client_;
  const std::vector<float> v = {-3, -1, -0.25f, 0, 0.5f, 1, 2.5f};
  auto x = c.tensor<float>(v);
  std::vector<float> silu, gelu, gelu_tanh;
  for (float f : v) {
    const double d = f;
    silu.push_back(static_cast<float>(d / (1 + std::exp(-d))));
    gelu.push_back(
        static_cast<float>(0.5 * d * (1 + std::erf(d / std::sqrt(2.0)))));
    const double inner = std::sqrt(2 / M_PI) * (d + 0.044715 * d * d * d);
    gelu_tanh.push_back(static_cast<float>(0.5 * d * (1 + std::tanh(inner))));
  }
  EXPECT_THAT(x.silu().fetch<float>(), Pointwise(FloatNear(1e-6f), silu));
  EXPECT_THAT(x.gelu().fetch<float>(), Pointwise(FloatNear(1e-6f), gelu));
  EXPECT_THAT(x.gelu("tanh").fetch<float>(),
              Pointwise(FloatNear(1e-6f), gelu_tanh));
  // gelu's two forms differ (by ~1e-4 here): the tanh one is not the exact.
  EXPECT_GT(std::abs(x.gelu("tanh").fetch<float>()[5] - gelu[5]), 1e-5f);
  // Floating tensors only, as PyTorch's (no integer promotion).
  auto i = c.tensor<int64_t>({-1, 0, 1});
  Error ints = ErrorOf([&] { i.silu(); });
  EXPECT_EQ(ints.code(), StatusCode::FAILED_PRECONDITION);
  EXPECT_THAT(ints.message(),
              HasSubstr("\"silu_cpu\" not implemented for 'Long'"));
  EXPECT_EQ(ErrorOf([&] { i.gelu("tanh"); }).code(),
            StatusCode::FAILED_PRECONDITION);
  EXPECT_THAT(i.to(DType::kFloat32).gelu().fetch<float>(),
              Pointwise(FloatNear(1e-6f), {gelu[1], 0.0f, gelu[5]}));
  try {
    x.gelu("exact");
    ADD_FAILURE() << "gelu(\"exact\") did not throw";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), StatusCode::INVALID_ARGUMENT);
    EXPECT_EQ(e.message(), "approximate argument must be either none or tanh.");
  }
  Batch b = c.batch();
  auto s = b.silu(x);
  auto g = b.gelu(x, "tanh");
  b.keep(s);
  b.keep(g);
  BatchResults r = b.run();
  EXPECT_THAT(r[s].fetch<float>(), Pointwise(FloatNear(1e-6f), silu));
  EXPECT_THAT(r[g].fetch<float>(), Pointwise(FloatNear(1e-6f), gelu_tanh));
}

// float16 and bfloat16 compute on the cpu device (in float32, rounded back
// to the half type after each op, as PyTorch's CPU does).
TEST_F(OpsClientTest, HalfPrecisionComputesOnTheCpu) {
  Client& c = *client_;
  for (DType half : {DType::kFloat16, DType::kBFloat16}) {
    auto x = c.tensor<float>({{1, 2}, {3, 4}}).to(half);
    auto y = (x * 2 + 1).relu();
    EXPECT_EQ(y.dtype(), half);
    EXPECT_THAT(y.to(DType::kFloat32).fetch<float>(), ElementsAre(3, 5, 7, 9));
    EXPECT_EQ(x.matmul(x).dtype(), half);
    EXPECT_THAT(x.matmul(x).to(DType::kFloat32).fetch<float>(),
                ElementsAre(7, 10, 15, 22));
    EXPECT_EQ(x.sum().to(DType::kFloat32).item<float>(), 10);
    EXPECT_EQ(x.mean(0).to(DType::kFloat32).fetch<float>()[1], 3);
    EXPECT_EQ(x.argmax().item<int64_t>(), 3);
  }
  // 1 + 2^-11 is not a float16: the sum rounds to nearest even (1).
  auto one = c.tensor<float>({1.0f}).to(DType::kFloat16);
  EXPECT_EQ((one + 0x1.0p-11).to(DType::kFloat32).fetch<float>()[0], 1.0f);
  EXPECT_EQ((one + 0x1.8p-11).to(DType::kFloat32).fetch<float>()[0],
            1.0f + 0x1.0p-10f);
}

// softmax/log_softmax against the definition in double, on rows whose
// exponentials overflow float (the max is subtracted first).
TEST_F(OpsClientTest, SoftmaxIsStableAndMatchesItsDefinition) {
  Client& c = *client_;
  const std::vector<std::vector<float>> rows = {
      {1000, 1001, 999}, {-3, 0.5f, 2}, {0, 0, 0}};
  auto x = c.tensor<float>({{1000, 1001, 999}, {-3, 0.5f, 2}, {0, 0, 0}});
  std::vector<float> soft, log_soft;
  for (const auto& row : rows) {
    double max = row[0], sum = 0;
    for (float v : row) max = std::max<double>(max, v);
    for (float v : row) sum += std::exp(v - max);
    for (float v : row) {
      soft.push_back(static_cast<float>(std::exp(v - max) / sum));
      log_soft.push_back(static_cast<float>(v - max - std::log(sum)));
    }
  }
  EXPECT_THAT(x.softmax(-1).fetch<float>(), Pointwise(FloatNear(1e-6f), soft));
  EXPECT_THAT(x.softmax(1).fetch<float>(), Pointwise(FloatNear(1e-6f), soft));
  EXPECT_THAT(x.log_softmax(1).fetch<float>(),
              Pointwise(FloatNear(2e-5f), log_soft));
  // Over dim 0: the columns of the transpose.
  EXPECT_THAT(x.t().softmax(0).t().fetch<float>(),
              Pointwise(FloatNear(1e-6f), soft));
  // Each row sums to one; the dtype and shape stay.
  auto s = x.softmax(1);
  EXPECT_EQ(s.dtype(), DType::kFloat32);
  EXPECT_THAT(s.shape(), ElementsAre(3, 3));
  EXPECT_THAT(s.sum(1).fetch<float>(), Pointwise(FloatNear(1e-6f), {1, 1, 1}));
  // Half precision computes in float32 and rounds once (these inputs are
  // float16 values; float16 has 11 significant bits).
  auto h = x.to(DType::kFloat16).softmax(1);
  EXPECT_EQ(h.dtype(), DType::kFloat16);
  EXPECT_THAT(h.to(DType::kFloat32).fetch<float>(),
              Pointwise(FloatNear(5e-4f), soft));
  // No temporaries are left behind.
  const uint64_t held = Held();
  { auto tmp = x.log_softmax(0); }
  EXPECT_EQ(Held(), held);
  Error ints = ErrorOf([&] { c.tensor<int64_t>({1, 2}).softmax(0); });
  EXPECT_EQ(ints.code(), StatusCode::FAILED_PRECONDITION);
  EXPECT_EQ(ints.message(),
            "\"softmax_lastdim_kernel_impl\" not implemented for 'Long'");
  Error dim = ErrorOf([&] { x.softmax(2); });
  EXPECT_EQ(dim.code(), StatusCode::INVALID_ARGUMENT);
  EXPECT_EQ(dim.kind(), ErrorKind::kIndexError);
  // An empty tensor's softmax is empty.
  EXPECT_THAT(c.zeros({0, 3}).softmax(1).shape(), ElementsAre(0, 3));
  Batch b = c.batch();
  auto bs = b.log_softmax(b.mul(x, 1.0), 1);
  b.keep(bs);
  EXPECT_THAT(b.run()[bs].fetch<float>(),
              Pointwise(FloatNear(2e-5f), log_soft));
}

TEST_F(OpsClientTest, SumAndMeanOverSeveralDims) {
  Client& c = *client_;
  auto x = c.arange(0, 24, 1, DType::kFloat32).reshape({2, 3, 4});
  // Over dims 0 and 2 (apart): sum over i, k of 12 i + 4 j + k.
  EXPECT_THAT(x.sum({0, 2}).fetch<float>(), ElementsAre(60, 92, 124));
  EXPECT_THAT(x.sum({2, 0}, true).shape(), ElementsAre(1, 3, 1));
  // Over dims 1 and 2 (adjacent).
  EXPECT_THAT(x.mean({-1, 1}).fetch<float>(), ElementsAre(5.5, 17.5));
  EXPECT_THAT(x.sum({0, 1, 2}).fetch<float>(), ElementsAre(276));
  auto i = c.tensor<int32_t>({{1, 2}, {3, 4}});
  EXPECT_EQ(i.sum({0, 1}).dtype(), DType::kInt64);
  Error dup = ErrorOf([&] { x.sum({1, -2}); });
  EXPECT_EQ(dup.code(), StatusCode::INVALID_ARGUMENT);
  EXPECT_EQ(dup.message(), "dim 1 appears multiple times in the list of dims");
  EXPECT_EQ(ErrorOf([&] {
              i.mean({0, 1});
            }).code(),
            StatusCode::FAILED_PRECONDITION);
  Batch b = c.batch();
  auto m = b.mean(x, {0, 2}, true);
  b.keep(m);
  BatchResults r = b.run();
  EXPECT_THAT(r[m].shape(), ElementsAre(1, 3, 1));
  EXPECT_THAT(r[m].fetch<float>(), ElementsAre(7.5, 11.5, 15.5));
}

// An empty tensor may have dims whose products exceed int64 (PyTorch allows
// torch.zeros(0, 2**40, 2**40)): the ops give empty results and compute no
// such product (UBSan in CI's sanitizer stage would stop on an overflow).
TEST_F(OpsClientTest, EmptyTensorsWithHugeDims) {
  Client& c = *client_;
  const int64_t big = int64_t{1} << 40;
  auto e = c.zeros({0, big, big});
  EXPECT_THAT(e.select(1, 0).shape(), ElementsAre(0, big));
  EXPECT_THAT(e.narrow(0, 0, 0).shape(), ElementsAre(0, big, big));
  EXPECT_THAT(cat({e, e}, 0).shape(), ElementsAre(0, big, big));
  EXPECT_THAT(e.sum({1, 2}).shape(), ElementsAre(0));
  EXPECT_EQ(ErrorOf([&] { e.sum(0); }).code(), StatusCode::INVALID_ARGUMENT);
  EXPECT_THAT(e.softmax(2).shape(), ElementsAre(0, big, big));
}

TEST_F(OpsClientTest, ClampTakesNumbersOrTensorsAndPropagatesNan) {
  Client& c = *client_;
  auto x = c.tensor<float>({-2, -0.5f, 0.5f, 2, NAN});
  auto lo_hi = x.clamp(-1, 1).fetch<float>();
  EXPECT_THAT(std::vector<float>(lo_hi.begin(), lo_hi.end() - 1),
              ElementsAre(-1, -0.5, 0.5, 1));
  EXPECT_TRUE(std::isnan(lo_hi.back()));
  EXPECT_THAT(x.clamp(0).fetch<float>()[0], 0);              // min only
  EXPECT_EQ(x.clamp(std::nullopt, 0).fetch<float>()[3], 0);  // max only
  // min > max gives max everywhere (PyTorch).
  EXPECT_THAT(c.tensor<float>({-5, 0, 5}).clamp(2, 1).fetch<float>(),
              ElementsAre(1, 1, 1));
  // Tensor bounds broadcast: per-column limits.
  auto m = c.tensor<float>({{-3, 0, 3}, {3, 0, -3}});
  auto lo = c.tensor<float>({-1, 1, -2});
  auto hi = c.tensor<float>({1, 2, 2});
  EXPECT_THAT(m.clamp(lo, hi).fetch<float>(), ElementsAre(-1, 1, 2, 1, 1, -2));
  EXPECT_THAT(m.clamp(std::nullopt, hi).fetch<float>(),
              ElementsAre(-3, 0, 2, 1, 0, -3));
  // Promotion: an integer tensor with a float bound gives float32.
  auto i = c.tensor<int32_t>({-3, 0, 3});
  EXPECT_EQ(i.clamp(0, 2).dtype(), DType::kInt32);
  EXPECT_THAT(i.clamp(0, 2).fetch<int32_t>(), ElementsAre(0, 0, 2));
  EXPECT_EQ(i.clamp(0.5).dtype(), DType::kFloat32);
  EXPECT_THAT(i.clamp(0.5).fetch<float>(), ElementsAre(0.5, 0.5, 3));
  // One result dtype over x and both bounds (torch.result_type), not two
  // promotions in turn: int32 with a 0-d float64 and a float16 bound.
  auto f16 = c.tensor<float>({0, 1, 2}).to(DType::kFloat16);
  auto zero_d = c.tensor<double>({0.5}).reshape({});
  auto clamped = i.clamp(zero_d, f16);
  EXPECT_EQ(clamped.dtype(), DType::kFloat16);
  EXPECT_THAT(clamped.to(DType::kFloat32).fetch<float>(),
              ElementsAre(0, 0.5, 2));
  Error none = ErrorOf([&] { x.clamp(std::optional<Scalar>()); });
  EXPECT_EQ(none.code(), StatusCode::INVALID_ARGUMENT);
  EXPECT_EQ(none.message(),
            "torch.clamp: At least one of 'min' or 'max' must not be None");
  EXPECT_EQ(ErrorOf([&] {
              m.clamp(c.tensor<float>({1, 2}), hi);
            }).code(),
            StatusCode::INVALID_ARGUMENT);  // shapes do not broadcast
  Batch b = c.batch();
  auto v1 = b.clamp(m, -1.0, 1.0);
  auto v2 = b.clamp(m, lo, std::nullopt);
  b.keep(v1);
  b.keep(v2);
  BatchResults r = b.run();
  EXPECT_THAT(r[v1].fetch<float>(), ElementsAre(-1, 0, 1, 1, 0, -1));
  EXPECT_THAT(r[v2].fetch<float>(), ElementsAre(-1, 1, 3, 3, 1, -2));
}

TEST_F(OpsClientTest, WhereSelectsWithBroadcastAndPromotion) {
  Client& c = *client_;
  auto x = c.tensor<float>({{-1, 2, -3}, {4, -5, 6}});
  auto pos = x.gt(0);
  EXPECT_THAT(where(pos, x, 0.0).fetch<float>(), ElementsAre(0, 2, 0, 4, 0, 6));
  EXPECT_THAT(where(pos, 1, -1).fetch<int64_t>(),
              ElementsAre(-1, 1, -1, 1, -1, 1));
  // The condition broadcasts over rows, the branches over columns.
  auto row = c.tensor<bool>({{true}, {false}});
  auto a = c.tensor<int32_t>({1, 2, 3});
  auto b = c.tensor<double>({10, 20, 30});
  auto mixed = where(row, a, b);
  EXPECT_EQ(mixed.dtype(), DType::kFloat64);
  EXPECT_THAT(mixed.shape(), ElementsAre(2, 3));
  EXPECT_THAT(mixed.fetch<double>(), ElementsAre(1, 2, 3, 10, 20, 30));
  EXPECT_EQ(where(row, a, 0).dtype(), DType::kInt32);
  EXPECT_EQ(where(row, 0.5, a).dtype(), DType::kFloat32);
  // NaN is selected like any value.
  auto n = where(c.tensor<bool>({true, false}), NAN, 1.0).fetch<float>();
  EXPECT_TRUE(std::isnan(n[0]));
  EXPECT_EQ(n[1], 1);
  Error e = ErrorOf([&] { where(x, x, x); });
  EXPECT_EQ(e.code(), StatusCode::FAILED_PRECONDITION);
  EXPECT_EQ(e.message(),
            "where expected condition to be a boolean tensor, but got a "
            "tensor with dtype Float");
  // Operands on two devices: the same-device rule, never a silent move.
  Error devices = ErrorOf([&] { where(pos, x.to("cpu:1"), 0.0); });
  EXPECT_EQ(devices.code(), StatusCode::FAILED_PRECONDITION);
  EXPECT_THAT(devices.message(), HasSubstr("Expected all tensors to be on the "
                                           "same device"));
  Batch bt = c.batch();
  auto relu = bt.where(bt.binary(BinaryOp::kGt, x, 0), x, 0.0);
  bt.keep(relu);
  EXPECT_THAT(bt.run()[relu].fetch<float>(), ElementsAre(0, 2, 0, 4, 0, 6));
}

// Seed 001's network, forward: conv, relu, pool twice, then three linear
// layers; shapes known at each line (the client plans them), one value
// checked by hand, and PyTorch's channel message at the causing call.
TEST_F(OpsClientTest, ConvolutionAndPoolingRunSeed001sForwardPass) {
  Client& c = *client_;
  // Exact small cases (the values PyTorch gives): a 3x3 all-ones kernel over ones (padding 1) sums the
  // window's inside elements: 4 at a corner, 6 on an edge, 9 inside, times
  // the 2 channels, plus the bias.
  auto ones = c.ones({1, 2, 4, 4});
  Conv2dOptions pad1;
  pad1.padding = {1};
  auto y = conv2d(ones, c.ones({3, 2, 3, 3}), c.full({3}, 0.5), pad1);
  EXPECT_THAT(y.shape(), ElementsAre(1, 3, 4, 4));
  const std::vector<float> v = y.fetch<float>();
  EXPECT_FLOAT_EQ(v[0], 8.5f);
  EXPECT_FLOAT_EQ(v[1], 12.5f);
  EXPECT_FLOAT_EQ(v[5], 18.5f);
  auto plane = c.arange(0, 16).to(DType::kFloat32).reshape({1, 1, 4, 4});
  EXPECT_THAT(max_pool2d(plane, {2}).fetch<float>(), ElementsAre(5, 7, 13, 15));
  Pool2dOptions padded;
  padded.stride = {2};
  padded.padding = {1};
  EXPECT_THAT(avg_pool2d(plane, {3}, padded).fetch<float>(),
              Pointwise(FloatNear(1e-5), {10.0f / 9, 24.0f / 9, 51.0f / 9, 10.0f}));
  padded.count_include_pad = false;
  EXPECT_THAT(avg_pool2d(plane, {3}, padded).fetch<float>(),
              ElementsAre(2.5f, 4, 8.5f, 10));

  auto x = c.randn({4, 3, 32, 32}, "cpu", 1);
  auto conv1_w = c.randn({6, 3, 5, 5}, "cpu", 2) * 0.1;
  auto conv1_b = c.zeros({6});
  auto conv2_w = c.randn({16, 6, 5, 5}, "cpu", 3) * 0.1;
  auto conv2_b = c.zeros({16});
  auto h = max_pool2d(conv2d(x, conv1_w, conv1_b).relu(), {2, 2});
  EXPECT_THAT(h.shape(), ElementsAre(4, 6, 14, 14));
  h = max_pool2d(conv2d(h, conv2_w, conv2_b).relu(), {2, 2});
  EXPECT_THAT(h.shape(), ElementsAre(4, 16, 5, 5));
  h = h.reshape({-1, 16 * 5 * 5});
  h = linear(h, c.randn({120, 400}, "cpu", 4) * 0.05, c.zeros({120})).relu();
  h = linear(h, c.randn({84, 120}, "cpu", 5) * 0.1, c.zeros({84})).relu();
  auto out = linear(h, c.randn({10, 84}, "cpu", 6) * 0.1, c.zeros({10}));
  EXPECT_THAT(out.shape(), ElementsAre(4, 10));
  for (float f : out.fetch<float>()) EXPECT_TRUE(std::isfinite(f));
  // The seed's criterion and its evaluation: the loss as a number, the
  // predicted class of each row.
  auto labels = c.tensor<int64_t>({3, 0, 9, 3});
  const float loss = cross_entropy(out, labels).item<float>();
  EXPECT_TRUE(std::isfinite(loss));
  EXPECT_GT(loss, 0);
  EXPECT_NEAR(nll_loss(out.log_softmax(1), labels).item<float>(), loss, 1e-5);
  EXPECT_THAT(cross_entropy(out, labels, Reduction::kNone).shape(),
              ElementsAre(4));
  EXPECT_NEAR(mse_loss(out, out * 0).item<float>(),
              (out * out).mean().item<float>(), 1e-5);
  try {
    (void)cross_entropy(out, c.tensor<int64_t>({3, 0, 10, 3})).item<float>();
    FAIL() << "no error";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), StatusCode::INVALID_ARGUMENT);
    EXPECT_THAT(e.message(), HasSubstr("Target 10 is out of bounds."));
  }

  try {
    (void)conv2d(c.zeros({4, 1, 32, 32}), conv1_w);
    FAIL() << "no error";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), StatusCode::INVALID_ARGUMENT);
    EXPECT_EQ(e.message(),
              "Given groups=1, weight of size [6, 3, 5, 5], expected "
              "input[4, 1, 32, 32] to have 3 channels, but got 1 channels "
              "instead");
  }
  // The seed's evaluation: `_, predicted = torch.max(outputs.data, 1)`.
  auto scores = c.tensor<float>({{0.1f, 0.9f, 0.3f}, {2.0f, -1.0f, 2.0f}});
  auto [values, predicted] = tensord::max(scores, 1);
  EXPECT_THAT(values.fetch<float>(), ElementsAre(0.9f, 2.0f));
  EXPECT_THAT(predicted.fetch<int64_t>(), ElementsAre(1, 0));  // first max
  auto [low, where] = tensord::min(scores, 1, true);
  EXPECT_THAT(low.shape(), ElementsAre(2, 1));
  EXPECT_THAT(where.fetch<int64_t>(), ElementsAre(0, 1));
  EXPECT_THAT(tensord::flatten(c.zeros({4, 16, 5, 5}), 1).shape(),
              ElementsAre(4, 400));
  EXPECT_THAT(tensord::flatten(c.zeros({2, 3, 4}), 0, 1).shape(),
              ElementsAre(6, 4));
  EXPECT_THAT(tensord::flatten(c.zeros({})).shape(), ElementsAre(1));
  EXPECT_THROW(tensord::flatten(scores, 2), Error);
  // The same ops in one Execute.
  Batch b = c.batch();
  auto pooled = b.max_pool2d(b.conv2d(x, conv1_w, conv1_b), {2});
  auto averaged = b.avg_pool2d(pooled, {2});
  b.keep(averaged);
  BatchResults r = b.run();
  EXPECT_THAT(r[averaged].shape(), ElementsAre(4, 6, 7, 7));
}

TEST_F(OpsClientTest, Seed001sTrainingLoopWithServerAutograd) {
  Client& c = *client_;
  // The seed's network on 12x12 images (so the test is quick): conv ->
  // relu -> pool -> conv -> relu -> pool -> flatten -> linear, the
  // seed's criterion, gradients from the server, SGD under no_grad.
  std::vector<Tensor> params = {
      (c.randn({6, 3, 5, 5}, "cpu", 2) * 0.2).requires_grad_(),
      c.zeros({6}).requires_grad_(),
      (c.randn({16, 6, 3, 3}, "cpu", 3) * 0.2).requires_grad_(),
      c.zeros({16}).requires_grad_(),
      (c.randn({10, 16}, "cpu", 4) * 0.2).requires_grad_(),
      c.zeros({10}).requires_grad_()};
  auto x = c.randn({8, 3, 12, 12}, "cpu", 1);
  auto labels = c.tensor<int64_t>({3, 0, 9, 3, 1, 1, 7, 2});
  auto forward = [&](const Tensor& in) {
    auto h = max_pool2d(conv2d(in, params[0], params[1]).relu(), {2, 2});
    h = max_pool2d(conv2d(h, params[2], params[3]).relu(), {2, 2});
    return linear(h.reshape({-1, 16}), params[4], params[5]);
  };
  EXPECT_TRUE(params[0].requires_grad());
  EXPECT_EQ(params[0].grad_fn(), "");
  EXPECT_FALSE(params[0].grad().has_value());
  float first = 0, last = 0;
  for (int step = 0; step < 40; ++step) {
    auto loss = cross_entropy(forward(x), labels);
    if (step == 0) {
      EXPECT_TRUE(loss.requires_grad());
      EXPECT_EQ(loss.grad_fn(), "NllLossBackward0");
      first = loss.item<float>();
    }
    last = loss.item<float>();
    loss.backward();
    if (step == 0) {
      // The graph is freed (the error surfaces at the next sync point when
      // the session pipelines, at once otherwise); a leaf that requires
      // grad refuses in-place ops.
      try {
        loss.backward();
        (void)loss.item<float>();
        FAIL() << "no error";
      } catch (const Error& e) {
        EXPECT_EQ(e.code(), StatusCode::FAILED_PRECONDITION);
        EXPECT_THAT(e.message(), HasSubstr("Trying to backward through the "
                                           "graph a second time"));
      }
      try {
        params[1].add_(1.0);
        (void)params[1].fetch<float>();
        FAIL() << "no error";
      } catch (const Error& e) {
        EXPECT_EQ(e.code(), StatusCode::FAILED_PRECONDITION);
        EXPECT_THAT(e.message(), HasSubstr("a leaf Variable that requires "
                                           "grad is being used in an in-place "
                                           "operation."));
      }
    }
    {
      NoGradGuard no_grad;
      for (Tensor& p : params) {
        std::optional<Tensor> g = p.grad();
        ASSERT_TRUE(g.has_value());
        EXPECT_EQ(g->shape(), p.shape());
        p.axpy_(-0.1, *g);
      }
    }
    zero_grad(params);
  }
  EXPECT_FALSE(params[0].grad().has_value());
  EXPECT_LT(last, 0.5f * first) << "first " << first << ", last " << last;
  // A no_grad result is not tracked; detach shares the memory.
  {
    NoGradGuard no_grad;
    EXPECT_FALSE(forward(x).requires_grad());
  }
  EXPECT_FALSE(params[0].detach().requires_grad());
  EXPECT_EQ(params[0].detach().fetch<float>(), params[0].fetch<float>());

  // A whole step in one Execute: forward, loss, backward, the grads and
  // the update, with the loss kept (its value comes back with the reply).
  Batch b = c.batch();
  auto h = b.max_pool2d(b.relu(b.conv2d(x, params[0], params[1])), {2, 2});
  h = b.max_pool2d(b.relu(b.conv2d(h, params[2], params[3])), {2, 2});
  auto out = b.linear(b.reshape(h, {-1, 16}), params[4], params[5]);
  auto loss = b.backward(b.cross_entropy(out, labels));
  b.keep(loss);
  {
    NoGradGuard no_grad;
    for (Tensor& p : params) b.axpy_(p, -0.1, b.grad(p));
  }
  std::vector<Batch::Input> all(params.begin(), params.end());
  b.zero_grad(all);
  BatchResults r = b.run();
  // The loss came back in the reply; the same value as a fetch gives.
  EXPECT_LT(r.item<float>(loss), first);
  EXPECT_EQ(r.item<float>(loss), r[loss].item<float>());
  EXPECT_FALSE(params[4].grad().has_value());
}

TEST_F(OpsClientTest, BatchRunsInOneRoundTripAndFreesTheRest) {
  Client& c = *client_;
  auto x = c.randn({8, 8}, "cpu", 1);
  auto w = c.randn({8, 8}, "cpu", 2);
  const uint64_t held = Held();
  const size_t tensors = c.tensors().size();
  {
    Batch b = c.batch();
    auto y = b.matmul(x, w);
    auto n = b.norm(y);
    auto z = b.sub_(w, b.mul(w, 0.0));  // w -= 0 * w, in place
    b.keep(n);
    b.keep(z);
    BatchResults r = b.run();
    EXPECT_NEAR(r[n].item<float>(), x.matmul(w).norm().item<float>(), 1e-3);
    EXPECT_TRUE(r[z].is(w));
    EXPECT_EQ(c.tensors().size(), tensors + 1);  // the norm
    EXPECT_THROW(r[y], Error);                   // not kept
  }
  EXPECT_EQ(Held(), held);
  EXPECT_EQ(c.tensors().size(), tensors);
}

// A list the pipelined client plans whole goes on its stream unanswered:
// its kept results are tensors at once, under the client's handles (2^63
// and up), usable before anything is fetched. A list with an op that gives
// back its operand waits for the server's handles.
TEST_F(OpsClientTest, APlannedBatchNeedsNoAnswer) {
  Client& c = *client_;
  auto x = c.tensor<float>({1, 2, 3});
  Batch b = c.batch();
  auto y = b.mul(b.add(x, x), 0.5);
  auto s = b.sum(y);
  b.keep(y);
  b.keep(s);
  BatchResults r = b.run();
  EXPECT_GE(r[y].handle(), uint64_t{1} << 63);
  EXPECT_THAT(r[y].shape(), ElementsAre(3));
  EXPECT_EQ(r[s].dtype(), DType::kFloat32);
  EXPECT_THAT((r[y] + r[s]).fetch<float>(), ElementsAre(7, 8, 9));
  EXPECT_EQ(r.item<float>(s), 6);

  Batch in_place = c.batch();
  auto z = in_place.add(x, 1);
  in_place.mul_(z, 2.0);
  in_place.keep(z);
  BatchResults waited = in_place.run();
  EXPECT_LT(waited[z].handle(), uint64_t{1} << 63);
  EXPECT_THAT(waited[z].fetch<float>(), ElementsAre(4, 6, 8));
}

TEST_F(OpsClientTest, BatchErrorNamesTheOpAndLeaksNothing) {
  Client& c = *client_;
  auto x = c.ones({2, 3});
  const uint64_t held = Held();
  Batch b = c.batch();
  auto y = b.add(x, 1);
  auto z = b.matmul(y, x);  // [2, 3] @ [2, 3]
  b.keep(b.norm(z));
  try {
    b.run();
    FAIL() << "no error";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), StatusCode::INVALID_ARGUMENT);
    EXPECT_THAT(e.message(), HasSubstr("op #1 (matmul; operands: result of "
                                       "op #0 [2, 3] float32, handle"));
    // The pipelined client sent the list as one command on its stream, in
    // order with the ones before it (no drain first).
    EXPECT_THAT(e.message(), HasSubstr("(execute) failed: op #1"));
  }
  EXPECT_EQ(Held(), held);
  // The failure was cleared: the stream runs the next commands.
  EXPECT_THAT((x * 2).fetch<float>(), ::testing::Each(2.0f));
}

TEST_F(OpsClientTest, NpyRoundTripsWithNumpy) {
  if (const std::string why = NumpyMissing(); !why.empty()) GTEST_SKIP() << why;
  Client& c = *client_;
  auto m = c.tensor<float>({{1.5, -2}, {3, 4.25}, {0, 7}});
  const std::string out = (dir_ / "m.npy").string();
  m.save_npy(out);
  ASSERT_EQ(Python("import numpy as np; a = np.load('" + out +
                   "'); assert a.dtype == np.float32 and a.shape == (3, 2), "
                   "a; assert (a == np.array([[1.5, -2], [3, 4.25], [0, 7]], "
                   "np.float32)).all(), a"),
            0);
  const std::string in = (dir_ / "i.npy").string();
  ASSERT_EQ(
      Python("import numpy as np; np.save('" + in +
             "', np.arange(24, dtype=np.int64).reshape(2, 3, 4)); "
             "np.save('" +
             (dir_ / "s.npy").string() + "', np.float64(2.5)); np.save('" +
             (dir_ / "b.npy").string() + "', np.array([True, False]))"),
      0);
  auto i = c.load_npy(in, "cpu:1");
  EXPECT_EQ(i.device(), Device("cpu:1"));
  EXPECT_THAT(i.shape(), ElementsAre(2, 3, 4));
  EXPECT_EQ(i.sum().item<int64_t>(), 276);
  auto s = c.load_npy(dir_ / "s.npy");
  EXPECT_TRUE(s.shape().empty());
  EXPECT_EQ(s.item<double>(), 2.5);
  EXPECT_THAT(c.load_npy(dir_ / "b.npy").fetch<bool>(),
              ElementsAre(true, false));
  EXPECT_THROW(c.load_npy(dir_ / "missing.npy"), Error);
}

TEST_F(OpsClientTest, SafetensorsRoundTripAndHeaderParsesInPython) {
  if (const std::string why = NumpyMissing(); !why.empty()) GTEST_SKIP() << why;
  Client& c = *client_;
  std::map<std::string, Tensor> params = {
      {"layer.weight", c.randn({4, 3}, "cpu", 3)},
      {"layer.bias", c.tensor<double>({1, 2, 3, 4})},
      {"steps", c.tensor<int64_t>({7})},
  };
  const std::string path = (dir_ / "model.safetensors").string();
  Client::save_safetensors(path, params);
  ASSERT_EQ(
      Python("import json, struct, numpy as np; f = open('" + path +
             "', 'rb').read(); n = struct.unpack('<Q', f[:8])[0]; h = "
             "json.loads(f[8:8 + n]); assert (8 + n) % 8 == 0; w = "
             "h['layer.weight']; assert w['dtype'] == 'F32' and w['shape'] "
             "== [4, 3], w; b = h['layer.bias']; s, e = b['data_offsets']; "
             "v = np.frombuffer(f[8 + n + s:8 + n + e], '<f8'); assert "
             "list(v) == [1, 2, 3, 4], v"),
      0);
  auto loaded = c.load_safetensors(path, "cpu:1");
  ASSERT_EQ(loaded.size(), 3u);
  EXPECT_EQ(loaded.at("layer.weight").fetch<float>(),
            params.at("layer.weight").fetch<float>());
  EXPECT_EQ(loaded.at("layer.bias").device(), Device("cpu:1"));
  EXPECT_THAT(loaded.at("steps").fetch<int64_t>(), ElementsAre(7));
}

// A failure whose reply is in before its sync point asks: the sync point
// (here item() on the failed op's result, a tensor never made) reports the
// failure and clears it on the server, so the next commands run. (Reported
// through the dead tensor alone, the stream stayed stopped: the next
// create was refused and its tensor "never made" too — the race
// ConvolutionAndPoolingRunSeed001sForwardPass hit under load.)
TEST_F(OpsClientTest, AFailureAlreadyInIsClearedWhereItIsReported) {
  Client& c = *client_;
  auto loss = cross_entropy(c.zeros({4, 10}), c.tensor<int64_t>({3, 0, 10, 3}));
  std::this_thread::sleep_for(std::chrono::milliseconds(300));  // reply in
  try {
    (void)loss.item<float>();
    FAIL() << "no error";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), StatusCode::INVALID_ARGUMENT);
    EXPECT_THAT(e.message(), HasSubstr("Target 10 is out of bounds."));
  }
  auto z = c.zeros({2, 2}) + 1;
  EXPECT_THAT(z.fetch<float>(), ElementsAre(1, 1, 1, 1));
}

}  // namespace
}  // namespace tensord

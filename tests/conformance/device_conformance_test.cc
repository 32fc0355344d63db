// Device conformance (STYLE.md 11b): every op x dtype x broadcast pattern on
// every device this build produces, checked against the CPU device as the
// reference, with a tolerance per op and dtype.
//
// The devices under test are a fresh CPU device (CPU vs CPU: exercises the
// harness in CI) and every accelerator DiscoverAccelerators() returns. When
// it returns none, a "cuda" instantiation skips every test saying why
// ("no CUDA device: <probe summary>").
//
// float16/bfloat16 compute is not implemented on the CPU; for those the
// reference runs the op on the CPU in float32 on the same (exactly
// representable) inputs and rounds the result, which is what the device's
// kernels are specified to do.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "core/cpu/cpu_device.h"
#include "core/base/device.h"
#include "core/runtime/device_registry.h"
#include "core/base/half.h"
#include "core/base/op_table.h"
#include "core/base/status.h"
#include "tests/core/device_test_access.h"

namespace tensord::core {
namespace {

constexpr DType kAllDTypes[] = {
    DType::kFloat32, DType::kFloat64, DType::kInt32,   DType::kInt64,
    DType::kBool,    DType::kFloat16, DType::kBFloat16};
constexpr BinaryOp kBinaryOps[] = {
    BinaryOp::kAdd,     BinaryOp::kSub,     BinaryOp::kMul, BinaryOp::kDiv,
    BinaryOp::kMaximum, BinaryOp::kMinimum, BinaryOp::kPow, BinaryOp::kEq,
    BinaryOp::kNe,      BinaryOp::kLt,      BinaryOp::kLe,  BinaryOp::kGt,
    BinaryOp::kGe};
// Every unary op of the op table, with its default arguments.
std::vector<UnaryArgs> UnaryOps() {
  std::vector<UnaryArgs> ops;
  for (const OpRow& row : OpRows()) {
    if (row.kind != OpSpecKind::kUnary) continue;
    ops.push_back(UnaryArgs{static_cast<UnaryOp>(row.variant),
                            row.param_defaults[0], row.param_defaults[1]});
  }
  return ops;
}
constexpr ReduceOp kReduceOps[] = {ReduceOp::kSum,    ReduceOp::kMean,
                                   ReduceOp::kMax,    ReduceOp::kMin,
                                   ReduceOp::kArgmax, ReduceOp::kNorm};

bool IsHalf(DType t) { return t == DType::kFloat16 || t == DType::kBFloat16; }

Shape S(const std::vector<int64_t>& dims) { return Shape::Make(dims).value(); }

// --- The devices -------------------------------------------------------------

struct Devices {
  AcceleratorDiscovery accelerators;
  std::unique_ptr<Device> reference;  // the CPU everything is checked against
  std::unique_ptr<Device> cpu_under_test;
};

Devices& AllDevices() {
  static Devices* devices = [] {
    auto* d = new Devices;
    d->accelerators = DiscoverAccelerators();
    d->reference = CreateCpuDevice({.name = "cpu", .index = 0});
    d->cpu_under_test = CreateCpuDevice({.name = "cpu:1", .index = 1});
    return d;
  }();
  return *devices;
}

// Test parameter: "cpu", an accelerator's name, or "cuda" standing in for
// absent GPUs.
std::vector<std::string> DeviceParams() {
  std::vector<std::string> names = {"cpu"};
  bool cuda = false;
  for (const auto& d : AllDevices().accelerators.devices) {
    names.push_back(d->name());
    cuda = cuda || d->kind() == DeviceKind::kCuda;
  }
  if (!cuda) names.push_back("cuda");
  return names;
}

Device* FindDeviceUnderTest(const std::string& name) {
  Devices& all = AllDevices();
  if (name == "cpu") return all.cpu_under_test.get();
  for (const auto& d : all.accelerators.devices) {
    if (d->name() == name) return d.get();
  }
  return nullptr;
}

// --- Host values -------------------------------------------------------------

// Element i of raw bytes of `dtype`, as double (bool: the raw byte).
double ValueAt(DType dtype, const std::vector<uint8_t>& bytes, size_t i) {
  auto load = [&]<typename T>() {
    T v;
    std::memcpy(&v, bytes.data() + i * sizeof(T), sizeof(T));
    return v;
  };
  switch (dtype) {
    case DType::kFloat32:
      return load.operator()<float>();
    case DType::kFloat64:
      return load.operator()<double>();
    case DType::kInt32:
      return load.operator()<int32_t>();
    case DType::kInt64:
      return static_cast<double>(load.operator()<int64_t>());
    case DType::kBool:
      return load.operator()<uint8_t>();
    case DType::kFloat16:
      return HalfBitsToFloat(load.operator()<uint16_t>());
    case DType::kBFloat16:
      return BFloat16BitsToFloat(load.operator()<uint16_t>());
  }
  return 0;
}

// Bytes of `n` float32 values rounded to a half type.
std::vector<uint8_t> RoundToHalf(DType half, const std::vector<uint8_t>& f32) {
  const size_t n = f32.size() / 4;
  std::vector<uint8_t> out(n * 2);
  for (size_t i = 0; i < n; ++i) {
    float f;
    std::memcpy(&f, f32.data() + 4 * i, 4);
    const uint16_t h =
        half == DType::kFloat16 ? FloatToHalfBits(f) : FloatToBFloat16Bits(f);
    std::memcpy(out.data() + 2 * i, &h, 2);
  }
  return out;
}

// Half bytes -> float32 bytes (exact).
std::vector<uint8_t> WidenHalf(DType half, const std::vector<uint8_t>& h) {
  const size_t n = h.size() / 2;
  std::vector<uint8_t> out(n * 4);
  for (size_t i = 0; i < n; ++i) {
    const float f = static_cast<float>(ValueAt(half, h, i));
    std::memcpy(out.data() + 4 * i, &f, 4);
  }
  return out;
}

// Deterministic inputs per dtype. Floating values are in [-4, 4] (and
// exactly representable in the dtype); integers small enough for pow, with
// some values near the limits to exercise wraparound; bool 0/1.
std::vector<uint8_t> RandomValues(DType dtype, int64_t n, uint32_t seed,
                                  bool positive = false) {
  std::mt19937 rng(seed);
  std::vector<uint8_t> out(static_cast<size_t>(n) * DTypeSize(dtype));
  auto put = [&]<typename T>(int64_t i, T v) {
    std::memcpy(out.data() + i * sizeof(T), &v, sizeof(T));
  };
  std::uniform_real_distribution<double> real(positive ? 0.05 : -4.0, 4.0);
  std::uniform_int_distribution<int> small(positive ? 0 : -6, 9);
  for (int64_t i = 0; i < n; ++i) {
    switch (dtype) {
      case DType::kFloat32:
        put(i, static_cast<float>(real(rng)));
        break;
      case DType::kFloat64:
        put(i, real(rng));
        break;
      case DType::kInt32:
        put(i, i % 17 == 5 && !positive
                   ? std::numeric_limits<int32_t>::max() - 3
                   : static_cast<int32_t>(small(rng)));
        break;
      case DType::kInt64:
        put(i, i % 13 == 7 && !positive
                   ? std::numeric_limits<int64_t>::min() + 5
                   : static_cast<int64_t>(small(rng)));
        break;
      case DType::kBool:
        put(i, static_cast<uint8_t>(rng() & 1u));
        break;
      case DType::kFloat16:
        put(i, FloatToHalfBits(static_cast<float>(real(rng))));
        break;
      case DType::kBFloat16:
        put(i, FloatToBFloat16Bits(static_cast<float>(real(rng))));
        break;
    }
  }
  return out;
}

struct Tolerance {
  double rtol = 0, atol = 0;
};

// Elementwise ops: exactly rounded ones (add, sub, mul, div, max, min,
// comparisons, neg, abs, relu) match bit for bit; transcendental ones may
// differ by a few ulp between libm and CUDA's math library; half types by
// one rounding of their own.
Tolerance ElementwiseTolerance(DType dtype, bool transcendental) {
  switch (dtype) {
    case DType::kFloat32:
      return transcendental ? Tolerance{4e-6, 1e-6} : Tolerance{};
    case DType::kFloat64:
      return transcendental ? Tolerance{1e-13, 1e-14} : Tolerance{};
    case DType::kFloat16:
      return {2e-3, 1e-4};
    case DType::kBFloat16:
      return {1.6e-2, 1e-3};
    default:
      return {};
  }
}

// Matmul of inputs in [-4, 4] with depth k: summation order differs.
Tolerance MatMulTolerance(DType dtype, int64_t k) {
  const double scale = 16.0 * std::sqrt(static_cast<double>(k) + 1);
  switch (dtype) {
    case DType::kFloat32:
      return {1e-5, 1e-6 * scale};
    case DType::kFloat64:
      return {1e-12, 1e-14 * scale};
    case DType::kFloat16:
      return {2e-3, 2e-3 * scale};
    case DType::kBFloat16:
      return {1.6e-2, 1e-2 * scale};
    default:
      return {};
  }
}

::testing::AssertionResult Matches(DType dtype,
                                   const std::vector<uint8_t>& expected,
                                   const std::vector<uint8_t>& actual,
                                   Tolerance tol) {
  if (expected.size() != actual.size()) {
    return ::testing::AssertionFailure()
           << "sizes differ: " << expected.size() << " vs " << actual.size();
  }
  const size_t n = expected.size() / DTypeSize(dtype);
  for (size_t i = 0; i < n; ++i) {
    const double e = ValueAt(dtype, expected, i);
    const double a = ValueAt(dtype, actual, i);
    if (std::isnan(e) && std::isnan(a)) continue;
    if (e == a) continue;
    if (std::isfinite(e) && std::isfinite(a) &&
        std::abs(e - a) <= tol.atol + tol.rtol * std::abs(e)) {
      continue;
    }
    return ::testing::AssertionFailure()
           << "element " << i << " of " << n << ": expected " << e << ", got "
           << a << " (rtol " << tol.rtol << ", atol " << tol.atol << ")";
  }
  return ::testing::AssertionSuccess();
}

// --- Tensors on a device
// ------------------------------------------------------

struct DevTensor {
  Device* device = nullptr;
  std::unique_ptr<Buffer> buffer;
  DType dtype = DType::kFloat32;
  Shape shape;
  TensorRef ref() const { return TensorRef{buffer.get(), dtype, shape}; }
  size_t nbytes() const {
    return static_cast<size_t>(shape.NumElements()) * DTypeSize(dtype);
  }
};

DevTensor Empty(Device& device, DType dtype, const Shape& shape) {
  DevTensor t;
  t.device = &device;
  t.dtype = dtype;
  t.shape = shape;
  auto buffer = DeviceTestAccess::Allocate(device, t.nbytes());
  EXPECT_TRUE(buffer.ok()) << buffer.status();
  if (buffer.ok()) t.buffer = std::move(*buffer);
  return t;
}

DevTensor Upload(Device& device, DType dtype, const Shape& shape,
                 const std::vector<uint8_t>& bytes) {
  DevTensor t = Empty(device, dtype, shape);
  EXPECT_EQ(bytes.size(), t.nbytes());
  absl::Status s =
      device.CopyFromHost(bytes.data(), *t.buffer, 0, bytes.size());
  EXPECT_TRUE(s.ok()) << s;
  return t;
}

std::vector<uint8_t> Download(const DevTensor& t) {
  std::vector<uint8_t> out(t.nbytes());
  absl::Status s = t.device->CopyToHost(*t.buffer, 0, out.data(), out.size());
  EXPECT_TRUE(s.ok()) << s;
  return out;
}

// An op run on one device: its status and, if OK, the output bytes.
struct Outcome {
  absl::Status status;
  std::vector<uint8_t> bytes;
};

class ConformanceTest : public ::testing::TestWithParam<std::string> {
 protected:
  void SetUp() override {
    device_ = FindDeviceUnderTest(GetParam());
    if (device_ == nullptr) {
      GTEST_SKIP() << "no CUDA device: " << AllDevices().accelerators.summary;
    }
    ref_ = AllDevices().reference.get();
  }

  // Runs `op` (taking the device and input tensors, writing `out`) on the
  // device under test and on the reference. For a half dtype the reference
  // runs in float32 and rounds (compute_dtype -> out_dtype as given).
  template <typename Op>
  void CheckOp(const std::string& what, DType in_dtype,
               const std::vector<Shape>& in_shapes,
               const std::vector<std::vector<uint8_t>>& inputs, DType out_dtype,
               const Shape& out_shape, Tolerance tol, Op op) {
    SCOPED_TRACE(what);
    const bool half = IsHalf(in_dtype);
    // Device under test.
    Outcome dut;
    {
      std::vector<DevTensor> in;
      for (size_t i = 0; i < inputs.size(); ++i) {
        in.push_back(Upload(*device_, in_dtype, in_shapes[i], inputs[i]));
      }
      DevTensor out = Empty(*device_, out_dtype, out_shape);
      dut.status = op(*device_, in, out);
      if (dut.status.ok()) dut.bytes = Download(out);
    }
    // Reference.
    Outcome ref;
    {
      const DType ref_in = half ? DType::kFloat32 : in_dtype;
      const DType ref_out = out_dtype == in_dtype ? ref_in : out_dtype;
      std::vector<DevTensor> in;
      for (size_t i = 0; i < inputs.size(); ++i) {
        in.push_back(Upload(*ref_, ref_in, in_shapes[i],
                            half ? WidenHalf(in_dtype, inputs[i]) : inputs[i]));
      }
      DevTensor out = Empty(*ref_, ref_out, out_shape);
      ref.status = op(*ref_, in, out);
      if (ref.status.ok()) {
        ref.bytes = Download(out);
        if (ref_out != out_dtype) ref.bytes = RoundToHalf(out_dtype, ref.bytes);
      }
    }
    if (!ref.status.ok()) {
      // A combination the planner never sends (integer division, exp of
      // int32, mean of bool, ...): kernels trust the planner, so the device
      // must only refuse it; the CPU says FAILED_PRECONDITION, a GPU may say
      // INTERNAL (its launch error).
      EXPECT_FALSE(dut.status.ok()) << "reference: " << ref.status;
      if (device_->kind() == DeviceKind::kCpu ||
          dut.status.code() != absl::StatusCode::kInternal) {
        EXPECT_EQ(dut.status.code(), ref.status.code())
            << "reference: " << ref.status << "; device: " << dut.status;
      }
      return;
    }
    ASSERT_TRUE(dut.status.ok()) << dut.status;
    EXPECT_TRUE(Matches(out_dtype, ref.bytes, dut.bytes, tol));
  }

  Device* device_ = nullptr;
  Device* ref_ = nullptr;
};

bool Transcendental(UnaryOp op) { return IsFloatingUnary(op); }

// --- Device basics
// ------------------------------------------------------------

TEST_P(ConformanceTest, PropertiesAndName) {
  EXPECT_FALSE(device_->name().empty());
  const DeviceProperties p = device_->Properties();
  EXPECT_FALSE(p.model.empty());
  EXPECT_GT(p.total_memory, 0u);
  EXPECT_LE(p.free_memory, p.total_memory);
  if (device_->kind() == DeviceKind::kCuda) {
    EXPECT_EQ(device_->name(), "cuda:" + std::to_string(device_->index()));
    EXPECT_GE(p.compute_capability_major, 5);
    EXPECT_GT(p.multiprocessor_count, 0);
  }
}

TEST_P(ConformanceTest, SupportsAgreesWithTheReference) {
  for (DType dtype : kAllDTypes) {
    for (OpKind op :
         {OpKind::kFill, OpKind::kRandomFill, OpKind::kCast, OpKind::kBinary,
          OpKind::kMatMul, OpKind::kUnary, OpKind::kReduce}) {
      const absl::Status r = ref_->Supports(op, dtype);
      const absl::Status d = device_->Supports(op, dtype);
      // A device may do more than the CPU, never less.
      if (r.ok()) {
        EXPECT_TRUE(d.ok()) << d;
      }
      if (!d.ok()) {
        EXPECT_EQ(d.code(), absl::StatusCode::kFailedPrecondition);
        EXPECT_NE(d.message().find(device_->name()), std::string::npos) << d;
      }
    }
  }
  EXPECT_FALSE(device_->Supports(OpKind::kMatMul, DType::kBool).ok());
}

TEST_P(ConformanceTest, AllocateZeroAndHuge) {
  auto zero = DeviceTestAccess::Allocate(*device_, 0);
  ASSERT_TRUE(zero.ok()) << zero.status();
  EXPECT_EQ((*zero)->size(), 0u);
  EXPECT_NE((*zero)->data(), nullptr);
  auto huge = DeviceTestAccess::Allocate(*device_, size_t{1} << 50);  // 1 PiB
  ASSERT_FALSE(huge.ok());
  EXPECT_EQ(huge.status().code(), absl::StatusCode::kResourceExhausted)
      << huge.status();
  // The device keeps working after a refused allocation.
  auto again = DeviceTestAccess::Allocate(*device_, 1024);
  EXPECT_TRUE(again.ok()) << again.status();
}

TEST_P(ConformanceTest, HostCopiesRoundTripAtOffsetsAndAcrossChunks) {
  // 20 MiB + 3: several pinned staging chunks and a ragged tail.
  for (size_t bytes : {size_t{1}, size_t{4096}, (size_t{20} << 20) + 3}) {
    SCOPED_TRACE(bytes);
    std::vector<uint8_t> host(bytes);
    for (size_t i = 0; i < bytes; ++i)
      host[i] = static_cast<uint8_t>(i * 31 + 7);
    auto buffer = DeviceTestAccess::Allocate(*device_, bytes + 16);
    ASSERT_TRUE(buffer.ok()) << buffer.status();
    ASSERT_TRUE(device_->CopyFromHost(host.data(), **buffer, 16, bytes).ok());
    std::vector<uint8_t> back(bytes);
    ASSERT_TRUE(device_->CopyToHost(**buffer, 16, back.data(), bytes).ok());
    EXPECT_TRUE(host == back);
    // A piece from the middle.
    if (bytes > 100) {
      std::vector<uint8_t> piece(50);
      ASSERT_TRUE(
          device_->CopyToHost(**buffer, 16 + 40, piece.data(), 50).ok());
      EXPECT_TRUE(std::equal(piece.begin(), piece.end(), host.begin() + 40));
    }
  }
  auto small = DeviceTestAccess::Allocate(*device_, 8);
  ASSERT_TRUE(small.ok());
  uint8_t tmp[16] = {};
  EXPECT_EQ(device_->CopyFromHost(tmp, **small, 4, 8).code(),
            absl::StatusCode::kOutOfRange);
  EXPECT_EQ(device_->CopyToHost(**small, 9, tmp, 0).code(),
            absl::StatusCode::kOutOfRange);
  EXPECT_TRUE(device_->CopyToHost(**small, 8, tmp, 0).ok());
}

TEST_P(ConformanceTest, CopyFromDeviceEveryDirection) {
  const std::vector<uint8_t> data = RandomValues(DType::kInt64, 1 << 16, 3);
  const Shape shape = S({1 << 16});
  // reference cpu -> device under test -> itself -> reference cpu.
  DevTensor on_cpu = Upload(*ref_, DType::kInt64, shape, data);
  DevTensor on_dut = Empty(*device_, DType::kInt64, shape);
  ASSERT_TRUE(
      device_
          ->CopyFromDevice(*ref_, *on_cpu.buffer, *on_dut.buffer, data.size())
          .ok());
  DevTensor copy = Empty(*device_, DType::kInt64, shape);
  ASSERT_TRUE(
      device_
          ->CopyFromDevice(*device_, *on_dut.buffer, *copy.buffer, data.size())
          .ok());
  DevTensor back = Empty(*ref_, DType::kInt64, shape);
  ASSERT_TRUE(
      ref_->CopyFromDevice(*device_, *copy.buffer, *back.buffer, data.size())
          .ok());
  EXPECT_TRUE(Download(back) == data);
  // To every other accelerator (peer or staged) and back.
  for (const auto& other : AllDevices().accelerators.devices) {
    if (other.get() == device_) continue;
    SCOPED_TRACE(other->name());
    DevTensor there = Empty(*other, DType::kInt64, shape);
    ASSERT_TRUE(
        other
            ->CopyFromDevice(*device_, *copy.buffer, *there.buffer, data.size())
            .ok());
    DevTensor home = Empty(*device_, DType::kInt64, shape);
    ASSERT_TRUE(
        device_
            ->CopyFromDevice(*other, *there.buffer, *home.buffer, data.size())
            .ok());
    EXPECT_TRUE(Download(home) == data);
  }
}

// Kernels queued back to back, temporaries freed while queued, then one
// read: the read sees every write (stream order on a GPU).
TEST_P(ConformanceTest, QueuedKernelsAreOrderedBeforeReads) {
  const Shape shape = S({1 << 20});
  DevTensor acc = Empty(*device_, DType::kFloat32, shape);
  FillSpec zeros;
  ASSERT_TRUE(device_->Launch({zeros, {}, acc.ref()}).ok());
  for (int i = 0; i < 50; ++i) {
    DevTensor one = Empty(*device_, DType::kFloat32, shape);
    FillSpec full;
    full.kind = FillSpec::Kind::kFull;
    full.value = 1;
    ASSERT_TRUE(device_->Launch({full, {}, one.ref()}).ok());
    ASSERT_TRUE(
        device_
            ->Launch(
                {BinaryArgs{BinaryOp::kAdd}, {acc.ref(), one.ref()}, acc.ref()})
            .ok());
    // `one` is freed here, possibly before the add has run.
  }
  const std::vector<uint8_t> out = Download(acc);
  for (size_t i = 0; i < out.size() / 4; i += 4099) {
    EXPECT_EQ(ValueAt(DType::kFloat32, out, i), 50.0) << i;
  }
  EXPECT_TRUE(device_->Synchronize().ok());
}

// --- Fill
// -----------------------------------------------------------------------

TEST_P(ConformanceTest, DeterministicFills) {
  std::vector<FillSpec> specs;
  FillSpec f;
  f.kind = FillSpec::Kind::kZeros;
  specs.push_back(f);
  f.kind = FillSpec::Kind::kOnes;
  specs.push_back(f);
  f.kind = FillSpec::Kind::kFull;
  for (double v : {-2.5, 7.0, 1e10, -1e30, std::nan("")}) {
    f.value = v;
    specs.push_back(f);
  }
  f.kind = FillSpec::Kind::kArange;
  for (auto [start, step] : std::vector<std::pair<double, double>>{
           {0, 1}, {-3, 0.25}, {5, -2}, {4611686018427387000.0, 3}}) {
    f.start = start;
    f.step = step;
    specs.push_back(f);
  }
  for (DType dtype : kAllDTypes) {
    for (size_t s = 0; s < specs.size(); ++s) {
      for (int64_t n : {0, 1, 1000}) {
        SCOPED_TRACE(testing::Message()
                     << DTypeName(dtype) << " spec " << s << " n " << n);
        DevTensor d = Empty(*device_, dtype, S({n}));
        DevTensor r = Empty(*ref_, dtype, S({n}));
        ASSERT_TRUE(ref_->Launch({specs[s], {}, r.ref()}).ok());
        ASSERT_TRUE(device_->Launch({specs[s], {}, d.ref()}).ok());
        EXPECT_TRUE(Matches(dtype, Download(r), Download(d), {}));
      }
    }
  }
}

TEST_P(ConformanceTest, RandomFillsAreSeededAndDistributed) {
  const int64_t n = 200001;  // odd: a ragged last group
  for (DType dtype : kAllDTypes) {
    if (!device_->Supports(OpKind::kRandomFill, dtype).ok()) {
      EXPECT_FALSE(IsFloating(dtype) &&
                   ref_->Supports(OpKind::kRandomFill, dtype).ok());
      continue;
    }
    SCOPED_TRACE(DTypeName(dtype));
    for (FillSpec::Kind kind :
         {FillSpec::Kind::kRand, FillSpec::Kind::kRandn}) {
      FillSpec f;
      f.kind = kind;
      f.low = -1;
      f.high = 3;
      f.mean = 2;
      f.stddev = 0.5;
      f.seed = 1234;
      DevTensor a = Empty(*device_, dtype, S({n}));
      DevTensor b = Empty(*device_, dtype, S({n}));
      DevTensor c = Empty(*device_, dtype, S({n}));
      ASSERT_TRUE(device_->Launch({f, {}, a.ref()}).ok());
      ASSERT_TRUE(device_->Launch({f, {}, b.ref()}).ok());
      f.seed = 1235;
      ASSERT_TRUE(device_->Launch({f, {}, c.ref()}).ok());
      const std::vector<uint8_t> va = Download(a), vb = Download(b),
                                 vc = Download(c);
      EXPECT_TRUE(va == vb) << "same seed, different values";
      EXPECT_FALSE(va == vc) << "different seeds, same values";
      double sum = 0, sq = 0;
      for (int64_t i = 0; i < n; ++i) {
        const double v = ValueAt(dtype, va, i);
        ASSERT_TRUE(std::isfinite(v)) << i;
        if (kind == FillSpec::Kind::kRand) {
          ASSERT_GE(v, -1.0) << i;
          ASSERT_LT(v, 3.0) << i;
        }
        sum += v;
        sq += v * v;
      }
      const double mean = sum / n, var = sq / n - mean * mean;
      const double want_mean = kind == FillSpec::Kind::kRand ? 1.0 : 2.0;
      const double want_var = kind == FillSpec::Kind::kRand ? 16.0 / 12 : 0.25;
      EXPECT_NEAR(mean, want_mean, 0.02);
      EXPECT_NEAR(var, want_var, 0.03 * want_var + 0.01);
    }
  }
}

// --- Cast
// -----------------------------------------------------------------------

TEST_P(ConformanceTest, CastEveryPair) {
  // Specials for the saturating floating -> integer rules.
  const std::vector<double> specials = {
      0.0, -0.0, 0.5,          -0.5,     1.5,       -7.9,  1e20, -1e20,
      3e9, -3e9, std::nan(""), INFINITY, -INFINITY, 65504, 70000};
  for (DType from : kAllDTypes) {
    for (DType to : kAllDTypes) {
      if (!device_->Supports(OpKind::kCast, from).ok() ||
          !device_->Supports(OpKind::kCast, to).ok()) {
        continue;
      }
      SCOPED_TRACE(testing::Message()
                   << DTypeName(from) << " -> " << DTypeName(to));
      std::vector<uint8_t> in = RandomValues(from, 257, 11);
      if (IsFloating(from)) {
        for (size_t i = 0; i < specials.size(); ++i) {
          const float f = static_cast<float>(specials[i]);
          if (from == DType::kFloat32) std::memcpy(&in[i * 4], &f, 4);
          if (from == DType::kFloat64) std::memcpy(&in[i * 8], &specials[i], 8);
          if (IsHalf(from)) {
            const uint16_t h = from == DType::kFloat16 ? FloatToHalfBits(f)
                                                       : FloatToBFloat16Bits(f);
            std::memcpy(&in[i * 2], &h, 2);
          }
        }
      }
      const Shape shape = S({257});
      if (!IsHalf(from) && !IsHalf(to)) {
        CheckOp("cast", from, {shape}, {in}, to, shape, {},
                [](Device& d, std::vector<DevTensor>& x, DevTensor& out) {
                  return d.Launch({CastArgs{}, {x[0].ref()}, out.ref()});
                });
        continue;
      }
      if (device_->kind() == DeviceKind::kCpu) continue;
      // Half conversions: against the host's conversions through float32.
      DevTensor x = Upload(*device_, from, shape, in);
      DevTensor out = Empty(*device_, to, shape);
      ASSERT_TRUE(device_->Launch({CastArgs{}, {x.ref()}, out.ref()}).ok());
      const std::vector<uint8_t> got = Download(out);
      for (int64_t i = 0; i < 257; ++i) {
        const double v = ValueAt(from, in, i);
        double want;
        if (IsHalf(to)) {
          const float f =
              static_cast<float>(from == DType::kBool ? (v != 0) : v);
          want = to == DType::kFloat16
                     ? HalfBitsToFloat(FloatToHalfBits(f))
                     : BFloat16BitsToFloat(FloatToBFloat16Bits(f));
        } else if (to == DType::kBool) {
          want = v != 0 ? 1 : 0;
        } else if (to == DType::kInt32 || to == DType::kInt64) {
          const double lo =
              to == DType::kInt32 ? -2147483648.0 : -9223372036854775808.0;
          const double hi =
              to == DType::kInt32 ? 2147483647.0 : 9223372036854775807.0;
          want = std::isnan(v) ? 0
                 : v <= lo     ? lo
                 : v >= hi     ? hi
                               : std::trunc(v);
        } else {
          want = v;  // float32/float64 hold every half value exactly
        }
        const double g = ValueAt(to, got, i);
        if (std::isnan(want)) {
          EXPECT_TRUE(std::isnan(g)) << i;
        } else {
          EXPECT_EQ(g, want) << "element " << i << " from " << v;
        }
      }
    }
  }
}

// --- Binary
// -----------------------------------------------------------------------

struct BroadcastCase {
  std::vector<int64_t> a, b;
};

const std::vector<BroadcastCase>& BroadcastCases() {
  static const auto* cases = new std::vector<BroadcastCase>{
      {{}, {}},
      {{7}, {7}},
      {{3, 4}, {3, 4}},
      {{3, 4}, {4}},
      {{3, 1}, {1, 4}},
      {{2, 3, 4}, {3, 1}},
      {{1}, {5}},
      {{5}, {}},
      {{}, {2, 2}},
      {{0, 3}, {3}},
      {{2, 1, 3, 1, 2}, {4, 3, 1, 1}},
      {{1000, 33}, {33}},
      {{4097}, {4097}},
      {{2, 1, 1, 1, 1, 1, 1, 3}, {5, 1, 1, 1, 1, 1, 1}},
  };
  return *cases;
}

TEST_P(ConformanceTest, BinaryEveryOpDTypeAndBroadcast) {
  for (DType dtype : kAllDTypes) {
    if (!device_->Supports(OpKind::kBinary, dtype).ok()) continue;
    for (BinaryOp op : kBinaryOps) {
      for (size_t c = 0; c < BroadcastCases().size(); ++c) {
        const BroadcastCase& bc = BroadcastCases()[c];
        const Shape a = S(bc.a), b = S(bc.b);
        const Shape out = BroadcastShapes(a, b).value();
        // pow of integers: a small exponent keeps the values readable (the
        // wraparound is covered by the large bases).
        const bool pow_int = op == BinaryOp::kPow && !IsFloating(dtype);
        std::vector<uint8_t> va = RandomValues(dtype, a.NumElements(), 100 + c);
        std::vector<uint8_t> vb =
            RandomValues(dtype, b.NumElements(), 200 + c, pow_int);
        const DType out_dtype = IsComparison(op) ? DType::kBool : dtype;
        const bool inexact = op == BinaryOp::kPow;
        CheckOp(std::string(BinaryOpName(op)) + " " +
                    std::string(DTypeName(dtype)) + " " + a.ToString() + " " +
                    b.ToString(),
                dtype, {a, b}, {va, vb}, out_dtype, out,
                out_dtype == DType::kBool && dtype != DType::kBool
                    ? Tolerance{}
                    : ElementwiseTolerance(dtype, inexact),
                [op](Device& d, std::vector<DevTensor>& x, DevTensor& o) {
                  return d.Launch(
                      {BinaryArgs{op}, {x[0].ref(), x[1].ref()}, o.ref()});
                });
      }
    }
  }
}

TEST_P(ConformanceTest, BinarySpecialValuesAndInPlace) {
  const std::vector<float> xs = {NAN,       1.0f, -0.0f, INFINITY,
                                 -INFINITY, 2.0f, NAN,   0.0f};
  const std::vector<float> ys = {1.0f, NAN,       0.0f, INFINITY,
                                 3.0f, -INFINITY, NAN,  0.0f};
  std::vector<uint8_t> a(xs.size() * 4), b(ys.size() * 4);
  std::memcpy(a.data(), xs.data(), a.size());
  std::memcpy(b.data(), ys.data(), b.size());
  const Shape shape = S({8});
  for (BinaryOp op : kBinaryOps) {
    CheckOp(
        std::string(BinaryOpName(op)) + " specials", DType::kFloat32,
        {shape, shape}, {a, b},
        IsComparison(op) ? DType::kBool : DType::kFloat32, shape,
        ElementwiseTolerance(DType::kFloat32, op == BinaryOp::kPow),
        [op](Device& d, std::vector<DevTensor>& x, DevTensor& o) {
          return d.Launch({BinaryArgs{op}, {x[0].ref(), x[1].ref()}, o.ref()});
        });
  }
  // In place: out is a, b broadcasts.
  for (DType dtype : {DType::kFloat32, DType::kInt64, DType::kBFloat16}) {
    if (!device_->Supports(OpKind::kBinary, dtype).ok()) continue;
    const Shape sa = S({3, 4}), sb = S({4});
    const std::vector<uint8_t> va = RandomValues(dtype, 12, 5);
    const std::vector<uint8_t> vb = RandomValues(dtype, 4, 6);
    CheckOp("in-place mul " + std::string(DTypeName(dtype)), dtype, {sa, sb},
            {va, vb}, dtype, sa, ElementwiseTolerance(dtype, false),
            [](Device& d, std::vector<DevTensor>& x, DevTensor& o) {
              RETURN_IF_ERROR(d.Launch({BinaryArgs{BinaryOp::kMul},
                                        {x[0].ref(), x[1].ref()},
                                        x[0].ref()}));
              return d.CopyFromDevice(d, *x[0].buffer, *o.buffer, o.nbytes());
            });
  }
}

// --- Unary
// ------------------------------------------------------------------------

TEST_P(ConformanceTest, UnaryEveryOpAndDType) {
  for (DType dtype : kAllDTypes) {
    if (!device_->Supports(OpKind::kUnary, dtype).ok()) continue;
    for (const UnaryArgs& args : UnaryOps()) {
      const UnaryOp op = args.op;
      for (int64_t n : {0, 1, 1000}) {
        const Shape shape = S({n});
        std::vector<uint8_t> in = RandomValues(dtype, n, 7 + n);
        CheckOp(std::string(UnaryOpName(op)) + " " +
                    std::string(DTypeName(dtype)) + " n=" + std::to_string(n),
                dtype, {shape}, {in}, dtype, shape,
                ElementwiseTolerance(dtype, Transcendental(op)),
                [args](Device& d, std::vector<DevTensor>& x, DevTensor& o) {
                  return d.Launch({args, {x[0].ref()}, o.ref()});
                });
      }
    }
  }
}

// --- Reduce
// -----------------------------------------------------------------------

TEST_P(ConformanceTest, ReduceEveryOpDTypeAndLayout) {
  const std::vector<ReduceDims> layouts = {
      {1, 1, 1},      {1, 1000, 1}, {3, 5, 7}, {4, 1, 3},    {2, 3, 1},
      {1, 100003, 1}, {7, 0, 3},    {1, 0, 1}, {64, 257, 1}, {1, 300, 65}};
  for (DType dtype : kAllDTypes) {
    if (!device_->Supports(OpKind::kReduce, dtype).ok()) continue;
    for (ReduceOp op : kReduceOps) {
      for (const ReduceDims& d : layouts) {
        const Shape in_shape = S({d.outer, d.n, d.inner});
        const Shape out_shape = S({d.outer, d.inner});
        const DType out_dtype = op == ReduceOp::kArgmax ? DType::kInt64 : dtype;
        const std::vector<uint8_t> in =
            RandomValues(dtype, in_shape.NumElements(), 17 + d.n);
        Tolerance tol;
        if (IsFloating(dtype)) {
          // Both accumulate in double; only the order differs.
          tol = dtype == DType::kFloat32 ? Tolerance{1e-6, 1e-6}
                                         : Tolerance{1e-12, 1e-12};
        }
        CheckOp(std::string(ReduceOpName(op)) + " " +
                    std::string(DTypeName(dtype)) + " " + in_shape.ToString(),
                dtype, {in_shape}, {in}, out_dtype, out_shape, tol,
                [op, d](Device& dev, std::vector<DevTensor>& x, DevTensor& o) {
                  return dev.Launch({ReduceArgs{op, d}, {x[0].ref()}, o.ref()});
                });
      }
    }
  }
}

TEST_P(ConformanceTest, ReduceTiesAndNaN) {
  const std::vector<float> v = {1, 5, NAN, 5, NAN, -2, -2, 0};
  std::vector<uint8_t> in(v.size() * 4);
  std::memcpy(in.data(), v.data(), in.size());
  for (ReduceOp op : kReduceOps) {
    for (ReduceDims d : {ReduceDims{1, 8, 1}, ReduceDims{2, 4, 1},
                         ReduceDims{1, 4, 2}, ReduceDims{4, 2, 1}}) {
      const DType out_dtype =
          op == ReduceOp::kArgmax ? DType::kInt64 : DType::kFloat32;
      CheckOp(std::string(ReduceOpName(op)) + " ties/NaN", DType::kFloat32,
              {S({d.outer, d.n, d.inner})}, {in}, out_dtype,
              S({d.outer, d.inner}), {1e-6, 1e-6},
              [op, d](Device& dev, std::vector<DevTensor>& x, DevTensor& o) {
                return dev.Launch({ReduceArgs{op, d}, {x[0].ref()}, o.ref()});
              });
    }
  }
}

// --- Permute and block copies
// -------------------------------------------------------

// where through Device::Launch, against a host-side selection of the
// branches' bytes (exact for every dtype: a selection computes nothing).
TEST_P(ConformanceTest, WhereEveryDTypeAndBroadcast) {
  struct Case {
    std::vector<int64_t> cond, x, y;
  };
  const std::vector<Case> cases = {{{5}, {5}, {5}},
                                   {{4, 1, 5}, {1, 3, 5}, {5}},
                                   {{}, {2, 3}, {}},
                                   {{2, 1}, {0}, {1}},
                                   {{1000}, {1}, {1000}}};
  for (DType dtype : kAllDTypes) {
    if (!device_->Supports(OpKind::kWhere, dtype).ok()) continue;
    const size_t elem = DTypeSize(dtype);
    for (const Case& c : cases) {
      const Shape cs = S(c.cond), xs = S(c.x), ys = S(c.y);
      const Shape out_shape = *BroadcastShapes(*BroadcastShapes(cs, xs), ys);
      SCOPED_TRACE(std::string(DTypeName(dtype)) + " " + out_shape.ToString());
      const std::vector<uint8_t> cond =
          RandomValues(DType::kBool, cs.NumElements(), 5);
      const std::vector<uint8_t> x = RandomValues(dtype, xs.NumElements(), 6);
      const std::vector<uint8_t> y = RandomValues(dtype, ys.NumElements(), 7);
      DevTensor dc = Upload(*device_, DType::kBool, cs, cond);
      DevTensor dx = Upload(*device_, dtype, xs, x);
      DevTensor dy = Upload(*device_, dtype, ys, y);
      DevTensor out = Empty(*device_, dtype, out_shape);
      ASSERT_TRUE(
          device_
              ->Launch({WhereArgs{}, {dc.ref(), dx.ref(), dy.ref()}, out.ref()})
              .ok());
      // The expected bytes: each output element's source, by broadcasting.
      const std::vector<int64_t> stc = BroadcastStrides(cs, out_shape);
      const std::vector<int64_t> stx = BroadcastStrides(xs, out_shape);
      const std::vector<int64_t> sty = BroadcastStrides(ys, out_shape);
      std::vector<uint8_t> want;
      for (int64_t i = 0; i < out_shape.NumElements(); ++i) {
        int64_t rest = i, oc = 0, ox = 0, oy = 0;
        for (int d = out_shape.rank() - 1; d >= 0; --d) {
          const int64_t k = rest % out_shape.dim(d);
          rest /= out_shape.dim(d);
          oc += k * stc[d];
          ox += k * stx[d];
          oy += k * sty[d];
        }
        const uint8_t* src = cond[oc] != 0 ? &x[ox * elem] : &y[oy * elem];
        want.insert(want.end(), src, src + elem);
      }
      EXPECT_TRUE(Download(out) == want);
    }
  }
}

// im2col: every element of the columns is its window's input element or
// the padding bits, by the formula of core/base/device.h, for every element size.
// A window over [n, c, h, w]: stride s down and s + 1 across, padding p,
// dilation d down and 1 across (the im2col and col2im cases).
WindowDims TestWindow(int64_t n, int64_t c, int64_t h, int64_t w, int64_t kh,
                      int64_t kw, int64_t s, int64_t p, int64_t d) {
  WindowDims win;
  win.n = n;
  win.c = c;
  win.h = h;
  win.w = w;
  win.kh = kh;
  win.kw = kw;
  win.sh = s;
  win.sw = s + 1;
  win.ph = p;
  win.pw = p;
  win.dh = d;
  win.dw = 1;
  win.oh = (h + 2 * p - d * (kh - 1) - 1) / s + 1;
  win.ow = (w + 2 * p - (kw - 1) - 1) / (s + 1) + 1;
  return win;
}

TEST_P(ConformanceTest, Im2ColEveryDTypeAndWindow) {
  const std::vector<WindowDims> cases = {
      TestWindow(2, 3, 5, 6, 3, 2, 1, 1, 1), TestWindow(1, 1, 4, 4, 4, 4, 1, 0, 1),
      TestWindow(3, 2, 9, 7, 2, 3, 2, 1, 2), TestWindow(1, 4, 32, 32, 5, 5, 1, 2, 1)};
  for (DType dtype : kAllDTypes) {
    const size_t elem = DTypeSize(dtype);
    for (const WindowDims& d : cases) {
      const Shape in_shape = S({d.n, d.c, d.h, d.w});
      const Shape out_shape = S({d.c, d.kh, d.kw, d.n, d.oh, d.ow});
      SCOPED_TRACE(std::string(DTypeName(dtype)) + " " + in_shape.ToString() +
                   " -> " + out_shape.ToString());
      const std::vector<uint8_t> in =
          RandomValues(dtype, in_shape.NumElements(), 9);
      const uint64_t pad_bits = 0x0807060504030201ull;
      DevTensor din = Upload(*device_, dtype, in_shape, in);
      DevTensor out = Empty(*device_, dtype, out_shape);
      ASSERT_TRUE(
          device_->Launch({Im2ColArgs{d, pad_bits}, {din.ref()}, out.ref()})
              .ok());
      std::vector<uint8_t> want;
      for (int64_t c = 0; c < d.c; ++c)
        for (int64_t i = 0; i < d.kh; ++i)
          for (int64_t j = 0; j < d.kw; ++j)
            for (int64_t b = 0; b < d.n; ++b)
              for (int64_t y = 0; y < d.oh; ++y)
                for (int64_t x = 0; x < d.ow; ++x) {
                  const int64_t row = y * d.sh - d.ph + i * d.dh;
                  const int64_t col = x * d.sw - d.pw + j * d.dw;
                  const uint8_t* src =
                      reinterpret_cast<const uint8_t*>(&pad_bits);
                  if (row >= 0 && row < d.h && col >= 0 && col < d.w) {
                    src = &in[(((b * d.c + c) * d.h + row) * d.w + col) * elem];
                  }
                  want.insert(want.end(), src, src + elem);
                }
      EXPECT_TRUE(Download(out) == want);
    }
  }
}

TEST_P(ConformanceTest, Col2ImSumsEveryWindowEntry) {
  // The adjoint of im2col: each input element gathers the column entries
  // whose windows read it (strides, padding, dilation, overlaps, gaps).
  const std::vector<WindowDims> cases = {
      TestWindow(2, 3, 5, 6, 3, 2, 1, 1, 1), TestWindow(1, 1, 4, 4, 4, 4, 1, 0, 1),
      TestWindow(3, 2, 9, 7, 2, 3, 2, 1, 2), TestWindow(1, 2, 8, 8, 1, 1, 3, 0, 1),
      TestWindow(2, 4, 12, 12, 5, 5, 1, 2, 1)};
  for (DType dtype : {DType::kFloat32, DType::kFloat64, DType::kFloat16,
                      DType::kBFloat16}) {
    for (const WindowDims& d : cases) {
      const Shape cols_shape = S({d.c, d.kh, d.kw, d.n, d.oh, d.ow});
      const Shape out_shape = S({d.n, d.c, d.h, d.w});
      SCOPED_TRACE(std::string(DTypeName(dtype)) + " " +
                   cols_shape.ToString() + " -> " + out_shape.ToString());
      const std::vector<uint8_t> cols =
          RandomValues(dtype, cols_shape.NumElements(), 31);
      DevTensor dcols = Upload(*device_, dtype, cols_shape, cols);
      DevTensor out = Empty(*device_, dtype, out_shape);
      ASSERT_TRUE(
          device_->Launch({Col2ImArgs{d}, {dcols.ref()}, out.ref()}).ok());
      std::vector<double> want(out_shape.NumElements(), 0.0);
      size_t at = 0;
      for (int64_t c = 0; c < d.c; ++c)
        for (int64_t i = 0; i < d.kh; ++i)
          for (int64_t j = 0; j < d.kw; ++j)
            for (int64_t b = 0; b < d.n; ++b)
              for (int64_t y = 0; y < d.oh; ++y)
                for (int64_t x = 0; x < d.ow; ++x, ++at) {
                  const int64_t row = y * d.sh - d.ph + i * d.dh;
                  const int64_t col = x * d.sw - d.pw + j * d.dw;
                  if (row >= 0 && row < d.h && col >= 0 && col < d.w) {
                    want[((b * d.c + c) * d.h + row) * d.w + col] +=
                        ValueAt(dtype, cols, at);
                  }
                }
      const std::vector<uint8_t> got = Download(out);
      const double rtol = dtype == DType::kFloat64   ? 1e-12
                          : dtype == DType::kFloat32 ? 1e-5
                          : dtype == DType::kFloat16 ? 2e-3
                                                     : 1e-2;
      for (size_t k = 0; k < want.size(); ++k) {
        ASSERT_NEAR(ValueAt(dtype, got, k), want[k],
                    rtol * std::max(1.0, std::abs(want[k])))
            << "element " << k;
      }
    }
  }
}

// The device under test with its library kernels on: the CPU's made anew
// with them (held by `made`), whatever the fixture's options; any other
// device itself.
Device* WithLibraries(Device* device, std::unique_ptr<Device>& made) {
  if (device->kind() != DeviceKind::kCpu) return device;
  CpuDeviceOptions options;
  options.kernel_libraries = true;
  made = CreateCpuDevice(options);
  return made.get();
}

// conv2d as one library kernel, where the device's selection table picks
// one (the CPU on oneDNN, float32): each pass against the definition,
// every window shape the planner admits (strides, padding, dilation,
// groups, one image), the workspace exactly the bytes it asks for.
TEST_P(ConformanceTest, LibraryConvEveryPassAndWindow) {
  const DType dtype = DType::kFloat32;
  std::unique_ptr<Device> cpu_with_libraries;
  Device* device = WithLibraries(device_, cpu_with_libraries);
  struct Case {
    WindowDims d;
    int64_t groups, oc;
  };
  const std::vector<Case> cases = {
      {TestWindow(2, 3, 5, 6, 3, 2, 1, 1, 1), 1, 4},
      {TestWindow(1, 4, 9, 7, 2, 3, 2, 1, 2), 2, 6},
      {TestWindow(3, 2, 8, 8, 1, 1, 3, 0, 1), 1, 5},
      {TestWindow(2, 16, 12, 12, 3, 3, 1, 1, 1), 1, 32},
      {TestWindow(1, 6, 7, 7, 3, 3, 1, 1, 1), 6, 6},  // depthwise
  };
  if (device->Select(Conv2dArgs{cases[0].d, 1, 4, ConvPass::kForward}, dtype) !=
      Device::Implementation::kLibrary) {
    GTEST_SKIP() << device->name() << " composes conv2d (no library)";
  }
  for (const Case& c : cases) {
    const WindowDims& d = c.d;
    const int64_t g = c.groups, oc = c.oc, cg = d.c / g, og = oc / g;
    const Shape x_shape = S({d.n, d.c, d.h, d.w});
    const Shape w_shape = S({oc, cg, d.kh, d.kw});
    const Shape y_shape = S({d.n, oc, d.oh, d.ow});
    SCOPED_TRACE(x_shape.ToString() + " * " + w_shape.ToString() + " -> " +
                 y_shape.ToString());
    const std::vector<uint8_t> x = RandomValues(dtype, x_shape.NumElements(), 3);
    const std::vector<uint8_t> w = RandomValues(dtype, w_shape.NumElements(), 5);
    const std::vector<uint8_t> gy =
        RandomValues(dtype, y_shape.NumElements(), 7);
    const std::vector<uint8_t> bias = RandomValues(dtype, oc, 9);
    // The definition, in double: y, y with the bias, and the gradients of
    // sum(y * gy).
    std::vector<double> y(y_shape.NumElements()), dx(x_shape.NumElements()),
        dw(w_shape.NumElements()), yb(y_shape.NumElements());
    for (int64_t b = 0; b < d.n; ++b)
      for (int64_t o = 0; o < oc; ++o)
        for (int64_t r = 0; r < d.oh; ++r)
          for (int64_t q = 0; q < d.ow; ++q) {
            const int64_t yi = ((b * oc + o) * d.oh + r) * d.ow + q;
            for (int64_t ci = 0; ci < cg; ++ci)
              for (int64_t i = 0; i < d.kh; ++i)
                for (int64_t j = 0; j < d.kw; ++j) {
                  const int64_t row = r * d.sh - d.ph + i * d.dh;
                  const int64_t col = q * d.sw - d.pw + j * d.dw;
                  if (row < 0 || row >= d.h || col < 0 || col >= d.w) continue;
                  const int64_t xc = o / og * cg + ci;
                  const int64_t xi = ((b * d.c + xc) * d.h + row) * d.w + col;
                  const int64_t wi = ((o * cg + ci) * d.kh + i) * d.kw + j;
                  y[yi] += ValueAt(dtype, x, xi) * ValueAt(dtype, w, wi);
                  dx[xi] += ValueAt(dtype, gy, yi) * ValueAt(dtype, w, wi);
                  dw[wi] += ValueAt(dtype, gy, yi) * ValueAt(dtype, x, xi);
                }
          }
    for (size_t i = 0; i < y.size(); ++i) {
      yb[i] = y[i] + ValueAt(dtype, bias, i / (d.oh * d.ow) % oc);
    }
    struct Pass {
      ConvPass pass;
      bool bias;
      const std::vector<uint8_t>* a;
      Shape a_shape;
      const std::vector<uint8_t>* b;
      Shape b_shape;
      Shape out_shape;
      const std::vector<double>* want;
    };
    const Pass passes[] = {
        {ConvPass::kForward, false, &x, x_shape, &w, w_shape, y_shape, &y},
        {ConvPass::kForward, true, &x, x_shape, &w, w_shape, y_shape, &yb},
        {ConvPass::kBackwardData, false, &gy, y_shape, &w, w_shape, x_shape,
         &dx},
        {ConvPass::kBackwardWeights, false, &x, x_shape, &gy, y_shape, w_shape,
         &dw},
    };
    for (const Pass& p : passes) {
      SCOPED_TRACE(static_cast<int>(p.pass) + (p.bias ? 10 : 0));
      const Conv2dArgs args{d, g, oc, p.pass, p.bias};
      absl::StatusOr<uint64_t> bytes = device->WorkspaceBytes(args, dtype);
      ASSERT_TRUE(bytes.ok()) << bytes.status();
      DevTensor a = Upload(*device, dtype, p.a_shape, *p.a);
      DevTensor b = Upload(*device, dtype, p.b_shape, *p.b);
      // The bias, read only by the forward that has one.
      DevTensor c = Upload(*device, dtype, S({oc}), bias);
      DevTensor workspace =
          Empty(*device, DType::kBool, S({static_cast<int64_t>(*bytes)}));
      DevTensor out = Empty(*device, dtype, p.out_shape);
      const absl::Status launched = device->Launch(
          {args, {a.ref(), b.ref(), c.ref(), workspace.ref()}, out.ref()});
      ASSERT_TRUE(launched.ok()) << launched;
      const std::vector<uint8_t> got = Download(out);
      for (size_t k = 0; k < p.want->size(); ++k) {
        ASSERT_NEAR(ValueAt(dtype, got, k), (*p.want)[k],
                    1e-4 * std::max(1.0, std::abs((*p.want)[k])))
            << "element " << k;
      }
    }
  }
}

// `values` as float32 or float64 bytes.
std::vector<uint8_t> EncodeFloating(DType dtype,
                                    const std::vector<double>& values) {
  std::vector<uint8_t> out(values.size() * DTypeSize(dtype));
  for (size_t i = 0; i < values.size(); ++i) {
    if (dtype == DType::kFloat64) {
      std::memcpy(out.data() + i * 8, &values[i], 8);
    } else {
      const float f = static_cast<float>(values[i]);
      std::memcpy(out.data() + i * 4, &f, 4);
    }
  }
  return out;
}

// Max and average pooling as one kernel call where the selection table
// picks one (the CPU's direct kernel, cuDNN on a GPU): both passes against
// PyTorch's definition (ATen's CPU loops) -- the gradient to each window's
// first maximum, ties included (the values are small integers), dilation
// stepping the window, and the divisor with the padding (the window
// clipped to the padded input) or without it -- over strides, padding,
// dilation and ceil mode's overhanging last window, in float32 and
// float64. On the CPU every window is one call; cuDNN's pooling has no
// dilation and sizes its output itself, so those windows stay composed
// there.
TEST_P(ConformanceTest, LibraryPoolEveryPassAndWindow) {
  std::unique_ptr<Device> cpu_with_libraries;
  Device* device = WithLibraries(device_, cpu_with_libraries);
  const WindowDims plain = TestWindow(2, 3, 8, 8, 2, 2, 2, 0, 1);
  if (device->Select(Pool2dArgs{plain, PoolAlgorithm::kMax, PoolPass::kForward},
                     DType::kFloat32) != Device::Implementation::kLibrary) {
    GTEST_SKIP() << device->name() << " composes pooling";
  }
  WindowDims ceil = TestWindow(1, 2, 7, 7, 2, 2, 2, 0, 1);  // ceil mode
  ceil.oh = 4;
  ceil.ow = 3;
  WindowDims ceil_padded = TestWindow(2, 2, 6, 7, 3, 3, 2, 1, 1);
  ++ceil_padded.oh;  // the last window starts in the input, ends past it
  const std::vector<WindowDims> windows = {
      plain,
      TestWindow(1, 4, 9, 7, 3, 3, 2, 1, 1),  // padding
      TestWindow(3, 2, 6, 6, 3, 2, 1, 1, 1),  // overlapping windows
      TestWindow(1, 2, 9, 9, 2, 2, 1, 0, 2),  // dilation (max pooling)
      TestWindow(2, 1, 11, 9, 3, 3, 2, 1, 3),
      ceil,
      ceil_padded,
  };
  const PoolAlgorithm algorithms[] = {PoolAlgorithm::kMax,
                                      PoolAlgorithm::kAvgIncludePad,
                                      PoolAlgorithm::kAvgExcludePad};
  int checked = 0;
  for (DType dtype : {DType::kFloat32, DType::kFloat64}) {
    for (const WindowDims& d : windows) {
      for (PoolAlgorithm algorithm : algorithms) {
        if (algorithm != PoolAlgorithm::kMax && (d.dh != 1 || d.dw != 1)) {
          continue;  // average pooling has no dilation
        }
        const Pool2dArgs forward{d, algorithm, PoolPass::kForward};
        const bool one_call =
            device->Select(forward, dtype) == Device::Implementation::kLibrary;
        if (device->kind() == DeviceKind::kCpu) {
          ASSERT_TRUE(one_call) << "the CPU runs every window in one call";
        }
        if (!one_call) continue;
        const Shape x_shape = S({d.n, d.c, d.h, d.w});
        const Shape y_shape = S({d.n, d.c, d.oh, d.ow});
        SCOPED_TRACE(std::string(DTypeName(dtype)) + " " + x_shape.ToString() +
                     " -> " + y_shape.ToString() + " algorithm " +
                     std::to_string(static_cast<int>(algorithm)));
        // Small integers: windows with tied maxima.
        std::vector<double> xs(x_shape.NumElements());
        for (size_t i = 0; i < xs.size(); ++i) xs[i] = (i * 7 + i / 5) % 3;
        const std::vector<uint8_t> x = EncodeFloating(dtype, xs);
        const std::vector<uint8_t> gy =
            RandomValues(dtype, y_shape.NumElements(), 7);
        std::vector<double> y(y_shape.NumElements()), dx(x_shape.NumElements());
        for (int64_t p = 0; p < d.n * d.c; ++p)
          for (int64_t r = 0; r < d.oh; ++r)
            for (int64_t q = 0; q < d.ow; ++q) {
              const int64_t yi = (p * d.oh + r) * d.ow + q;
              const double g = ValueAt(dtype, gy, yi);
              // The window's rows and columns inside the input, and (for
              // the divisor counting padding) its size clipped to the
              // padded input.
              const int64_t r0 = r * d.sh - d.ph, c0 = q * d.sw - d.pw;
              const int64_t padded_rows = std::min(r0 + d.kh, d.h + d.ph) - r0;
              const int64_t padded_cols = std::min(c0 + d.kw, d.w + d.pw) - c0;
              int64_t first_max = -1, inside = 0;
              double sum = 0;
              std::vector<int64_t> read;
              for (int64_t i = 0; i < d.kh; ++i)
                for (int64_t j = 0; j < d.kw; ++j) {
                  const int64_t row = r0 + i * d.dh, col = c0 + j * d.dw;
                  if (row < 0 || row >= d.h || col < 0 || col >= d.w) continue;
                  const int64_t xi = (p * d.h + row) * d.w + col;
                  read.push_back(xi);
                  sum += xs[xi];
                  ++inside;
                  if (first_max < 0 || xs[xi] > xs[first_max]) first_max = xi;
                }
              if (algorithm == PoolAlgorithm::kMax) {
                y[yi] = xs[first_max];
                dx[first_max] += g;
                continue;
              }
              const double divisor = algorithm == PoolAlgorithm::kAvgExcludePad
                                         ? inside
                                         : padded_rows * padded_cols;
              y[yi] = inside == 0 ? 0 : sum / divisor;
              for (int64_t xi : read) dx[xi] += g / divisor;
            }
        const Pool2dArgs backward{d, algorithm, PoolPass::kBackward};
        struct Pass {
          Pool2dArgs args;
          const std::vector<uint8_t>* in;
          Shape in_shape, out_shape;
          const std::vector<double>* want;
        };
        const Pass passes[] = {{forward, &x, x_shape, y_shape, &y},
                               {backward, &gy, y_shape, x_shape, &dx}};
        for (const Pass& pass : passes) {
          SCOPED_TRACE(static_cast<int>(pass.args.pass));
          if (device->Select(pass.args, dtype) !=
              Device::Implementation::kLibrary) {
            continue;  // cuDNN: max pooling's backward stays composed
          }
          absl::StatusOr<uint64_t> bytes =
              device->WorkspaceBytes(pass.args, dtype);
          ASSERT_TRUE(bytes.ok()) << bytes.status();
          DevTensor in = Upload(*device, dtype, pass.in_shape, *pass.in);
          DevTensor xt = Upload(*device, dtype, x_shape, x);
          DevTensor workspace =
              Empty(*device, DType::kBool, S({static_cast<int64_t>(*bytes)}));
          DevTensor out = Empty(*device, dtype, pass.out_shape);
          const absl::Status launched = device->Launch(
              {pass.args, {in.ref(), xt.ref(), workspace.ref()}, out.ref()});
          ASSERT_TRUE(launched.ok()) << launched;
          const std::vector<uint8_t> got = Download(out);
          for (size_t k = 0; k < pass.want->size(); ++k) {
            ASSERT_NEAR(ValueAt(dtype, got, k), (*pass.want)[k],
                        1e-5 * std::max(1.0, std::abs((*pass.want)[k])))
                << "element " << k;
          }
          ++checked;
        }
      }
    }
  }
  EXPECT_GT(checked, 0);
}

// batch_norm in training as one kernel call per pass, where the device's
// selection table picks it (the CPU's direct kernel, float32 and float64):
// each pass against the definition in double, fed the definition's own
// statistics and sums so a pass is checked alone; every combination of
// weight and bias, one image, one channel, a plane of one (x of rank 2).
TEST_P(ConformanceTest, LibraryBatchNormEveryPass) {
  std::unique_ptr<Device> cpu_with_libraries;
  Device* device = WithLibraries(device_, cpu_with_libraries);
  if (device->Select(BatchNormArgs{4, 3, 10}, DType::kFloat32) !=
      Device::Implementation::kLibrary) {
    GTEST_SKIP() << device->name() << " composes batch_norm";
  }
  struct Case {
    int64_t n, c, plane;
  };
  const Case cases[] = {{4, 3, 10}, {1, 2, 7}, {3, 1, 6}, {5, 4, 1}};
  const double eps = 1e-5;
  int checked = 0;
  for (DType dtype : {DType::kFloat32, DType::kFloat64}) {
    const double tolerance = dtype == DType::kFloat32 ? 2e-5 : 1e-11;
    for (const Case& k : cases) {
      for (int params = 0; params < 4; ++params) {
        BatchNormArgs args{
            k.n, k.c, k.plane, eps, (params & 1) != 0, (params & 2) != 0};
        SCOPED_TRACE(
            std::string(DTypeName(dtype)) + " [" + std::to_string(k.n) + ", " +
            std::to_string(k.c) + ", " + std::to_string(k.plane) + "] weight " +
            std::to_string(args.weight) + " bias " + std::to_string(args.bias));
        const int64_t numel = k.n * k.c * k.plane;
        const double count = static_cast<double>(k.n * k.plane);
        const std::vector<uint8_t> x = RandomValues(dtype, numel, 11);
        const std::vector<uint8_t> g = RandomValues(dtype, numel, 12);
        const std::vector<uint8_t> w = RandomValues(dtype, k.c, 13);
        const std::vector<uint8_t> b = RandomValues(dtype, k.c, 14);
        auto at = [&](int64_t image, int64_t ch, int64_t i) {
          return (image * k.c + ch) * k.plane + i;
        };
        std::vector<double> stats(3 * k.c), sums(2 * k.c), y(numel), gx(numel);
        for (int64_t ch = 0; ch < k.c; ++ch) {
          double sum = 0, squares = 0, g_xhat = 0, g_sum = 0;
          for (int64_t im = 0; im < k.n; ++im)
            for (int64_t i = 0; i < k.plane; ++i) {
              sum += ValueAt(dtype, x, at(im, ch, i));
            }
          const double mean = sum / count;
          for (int64_t im = 0; im < k.n; ++im)
            for (int64_t i = 0; i < k.plane; ++i) {
              const double d = ValueAt(dtype, x, at(im, ch, i)) - mean;
              squares += d * d;
            }
          const double var = squares / count, invstd = 1 / std::sqrt(var + eps);
          const double wc = args.weight ? ValueAt(dtype, w, ch) : 1;
          const double bc = args.bias ? ValueAt(dtype, b, ch) : 0;
          stats[ch] = mean;
          stats[k.c + ch] = var;
          stats[2 * k.c + ch] = invstd;
          for (int64_t im = 0; im < k.n; ++im)
            for (int64_t i = 0; i < k.plane; ++i) {
              const int64_t e = at(im, ch, i);
              const double xhat = (ValueAt(dtype, x, e) - mean) * invstd;
              y[e] = xhat * wc + bc;
              g_xhat += ValueAt(dtype, g, e) * xhat;
              g_sum += ValueAt(dtype, g, e);
            }
          sums[ch] = g_xhat;
          sums[k.c + ch] = g_sum;
          for (int64_t im = 0; im < k.n; ++im)
            for (int64_t i = 0; i < k.plane; ++i) {
              const int64_t e = at(im, ch, i);
              const double xhat = (ValueAt(dtype, x, e) - mean) * invstd;
              gx[e] = invstd * wc *
                      (ValueAt(dtype, g, e) - g_sum / count -
                       xhat * g_xhat / count);
            }
        }
        const Shape x_shape = S({k.n, k.c, k.plane});
        DevTensor xt = Upload(*device, dtype, x_shape, x);
        DevTensor gt = Upload(*device, dtype, x_shape, g);
        DevTensor wt = Upload(*device, dtype, S({k.c}), w);
        DevTensor bt = Upload(*device, dtype, S({k.c}), b);
        DevTensor st =
            Upload(*device, dtype, S({3, k.c}), EncodeFloating(dtype, stats));
        DevTensor sumt =
            Upload(*device, dtype, S({2, k.c}), EncodeFloating(dtype, sums));
        struct Pass {
          BatchNormPass pass;
          std::vector<TensorRef> in;
          Shape out;
          const std::vector<double>* want;
        };
        const TensorRef xr = xt.ref();
        const Pass passes[] = {
            {BatchNormPass::kStatistics,
             {xr, xr, xr, xr, xr},
             S({3, k.c}),
             &stats},
            {BatchNormPass::kNormalize,
             {xr, st.ref(), wt.ref(), bt.ref(), xr},
             x_shape,
             &y},
            {BatchNormPass::kParamGrads,
             {xr, gt.ref(), st.ref(), xr, xr},
             S({2, k.c}),
             &sums},
            {BatchNormPass::kInputGrad,
             {xr, gt.ref(), st.ref(), sumt.ref(), wt.ref()},
             x_shape,
             &gx},
        };
        for (const Pass& pass : passes) {
          SCOPED_TRACE(static_cast<int>(pass.pass));
          args.pass = pass.pass;
          ASSERT_EQ(device->Select(args, dtype),
                    Device::Implementation::kLibrary);
          DevTensor out = Empty(*device, dtype, pass.out);
          const absl::Status launched =
              device->Launch({args, pass.in, out.ref()});
          ASSERT_TRUE(launched.ok()) << launched;
          const std::vector<uint8_t> got = Download(out);
          for (size_t e = 0; e < pass.want->size(); ++e) {
            ASSERT_NEAR(ValueAt(dtype, got, e), (*pass.want)[e],
                        tolerance * std::max(1.0, std::abs((*pass.want)[e])))
                << "element " << e;
          }
          ++checked;
        }
      }
    }
  }
  EXPECT_EQ(checked, 2 * 4 * 4 * 4);
}

TEST_P(ConformanceTest, PermuteEveryDType) {
  const std::vector<std::pair<std::vector<int64_t>, std::vector<int>>> cases = {
      {{}, {}},
      {{5}, {0}},
      {{3, 4}, {1, 0}},
      {{2, 3, 4}, {2, 0, 1}},
      {{2, 3, 4, 5}, {3, 1, 0, 2}},
      {{0, 3}, {1, 0}},
      {{65, 129}, {1, 0}},
      {{2, 1, 2, 1, 2, 1, 2, 3}, {7, 6, 5, 4, 3, 2, 1, 0}}};
  for (DType dtype : kAllDTypes) {
    for (const auto& [dims, perm] : cases) {
      const Shape in_shape = S(dims);
      std::vector<int64_t> out_dims;
      for (int p : perm) out_dims.push_back(dims[p]);
      const std::vector<uint8_t> in =
          RandomValues(dtype, in_shape.NumElements(), 23);
      // Byte moves: the CPU reference handles every dtype directly.
      DevTensor x = Upload(*device_, dtype, in_shape, in);
      DevTensor out = Empty(*device_, dtype, S(out_dims));
      ASSERT_TRUE(
          device_->Launch({PermuteArgs{perm}, {x.ref()}, out.ref()}).ok());
      DevTensor rx = Upload(*ref_, dtype, in_shape, in);
      DevTensor rout = Empty(*ref_, dtype, S(out_dims));
      ASSERT_TRUE(
          ref_->Launch({PermuteArgs{perm}, {rx.ref()}, rout.ref()}).ok());
      EXPECT_TRUE(Download(out) == Download(rout))
          << DTypeName(dtype) << " " << in_shape.ToString();
    }
  }
}

TEST_P(ConformanceTest, CopyBlocksPatterns) {
  const std::vector<BlockCopy> cases = {
      {1, 64, 0, 0, 0, 0},     {8, 16, 4, 32, 0, 16},
      {5, 12, 8, 24, 100, 40}, {3, 7, 1, 9, 2, 11},
      {1000, 4, 0, 4, 0, 8},   {4, 24, 0, 8, 0, 24},  // overlapping reads
      {0, 16, 0, 16, 0, 16}};
  const std::vector<uint8_t> src = RandomValues(DType::kInt64, 1024, 29);
  for (size_t i = 0; i < cases.size(); ++i) {
    SCOPED_TRACE(i);
    const BlockCopy& c = cases[i];
    std::vector<uint8_t> zero(8192, 0);
    DevTensor s = Upload(*device_, DType::kInt64, S({1024}), src);
    DevTensor d = Upload(*device_, DType::kBool, S({8192}), zero);
    ASSERT_TRUE(device_->Launch({c, {s.ref()}, d.ref()}).ok());
    DevTensor rs = Upload(*ref_, DType::kInt64, S({1024}), src);
    DevTensor rd = Upload(*ref_, DType::kBool, S({8192}), zero);
    ASSERT_TRUE(ref_->Launch({c, {rs.ref()}, rd.ref()}).ok());
    EXPECT_TRUE(Download(d) == Download(rd));
  }
  BlockCopy past{2, 16, 0, 8192, 0, 0};
  DevTensor s = Upload(*device_, DType::kInt64, S({1024}), src);
  EXPECT_EQ(device_->Launch({past, {s.ref()}, s.ref()}).code(),
            absl::StatusCode::kOutOfRange);
}

// --- MatMul
// -----------------------------------------------------------------------

TEST_P(ConformanceTest, MatMulEveryDTypeAndBatchLayout) {
  struct Case {
    int64_t batch, m, n, k;
    bool a_broadcast, b_broadcast;
  };
  const std::vector<Case> cases = {
      {1, 1, 1, 1, false, false},    {1, 3, 5, 4, false, false},
      {1, 64, 48, 96, false, false}, {4, 7, 9, 5, false, false},
      {3, 16, 8, 32, true, false},   {3, 8, 16, 32, false, true},
      {2, 5, 3, 0, false, false},    {1, 1, 130, 257, false, false},
      {2, 0, 4, 3, false, false}};
  for (DType dtype : kAllDTypes) {
    if (!device_->Supports(OpKind::kMatMul, dtype).ok()) continue;
    for (const Case& c : cases) {
      MatMulDims d;
      d.batch = c.batch;
      d.m = c.m;
      d.n = c.n;
      d.k = c.k;
      d.a_batch_stride = c.a_broadcast ? 0 : c.m * c.k;
      d.b_batch_stride = c.b_broadcast ? 0 : c.k * c.n;
      d.out_batch_stride = c.m * c.n;
      const Shape a = S({c.a_broadcast ? 1 : c.batch, c.m, c.k});
      const Shape b = S({c.b_broadcast ? 1 : c.batch, c.k, c.n});
      const Shape out = S({c.batch, c.m, c.n});
      CheckOp("matmul " + std::string(DTypeName(dtype)) + " " + a.ToString() +
                  " x " + b.ToString(),
              dtype, {a, b},
              {RandomValues(dtype, a.NumElements(), 31),
               RandomValues(dtype, b.NumElements(), 37)},
              dtype, out, MatMulTolerance(dtype, c.k),
              [d](Device& dev, std::vector<DevTensor>& x, DevTensor& o) {
                return dev.Launch({d, {x[0].ref(), x[1].ref()}, o.ref()});
              });
    }
  }
}

std::string ParamName(const ::testing::TestParamInfo<std::string>& info) {
  std::string name = info.param;
  std::replace(name.begin(), name.end(), ':', '_');
  return name;
}

INSTANTIATE_TEST_SUITE_P(Devices, ConformanceTest,
                         ::testing::ValuesIn(DeviceParams()), ParamName);

}  // namespace
}  // namespace tensord::core

// CPU device kernels against hand-computed values.
#include "core/cpu/cpu_device.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <random>
#include <thread>
#include <vector>

#include "core/cpu/blas.h"
#include "core/cpu/library_kernels.h"
#include "tests/core/device_test_access.h"

namespace tensord::core {
namespace {

using ::testing::ElementsAre;
using ::testing::ElementsAreArray;
using ::testing::HasSubstr;

Shape S(std::vector<int64_t> dims) { return Shape::Make(dims).value(); }

// A host tensor on the CPU device: a buffer plus dtype and shape.
struct HostTensor {
  std::unique_ptr<Buffer> buffer;
  DType dtype;
  Shape shape;
  TensorRef ref() const { return TensorRef{buffer.get(), dtype, shape}; }
  template <typename T>
  std::vector<T> values() const {
    std::vector<T> v(shape.NumElements());
    std::memcpy(v.data(), buffer->data(), v.size() * sizeof(T));
    return v;
  }
};

class CpuDeviceTest : public ::testing::Test {
 protected:
  CpuDeviceTest() : device_(CreateCpuDevice({})) {}

  HostTensor Empty(DType dtype, std::vector<int64_t> dims) {
    Shape shape = S(dims);
    auto buffer =
        DeviceTestAccess::Allocate(*device_, shape.ByteSize(dtype).value())
            .value();
    return HostTensor{std::move(buffer), dtype, shape};
  }
  template <typename T>
  HostTensor From(DType dtype, std::vector<int64_t> dims,
                  const std::vector<T>& values) {
    HostTensor t = Empty(dtype, dims);
    EXPECT_EQ(values.size(), static_cast<size_t>(t.shape.NumElements()));
    EXPECT_TRUE(device_
                    ->CopyFromHost(values.data(), *t.buffer, 0,
                                   values.size() * sizeof(T))
                    .ok());
    return t;
  }
  HostTensor Filled(DType dtype, std::vector<int64_t> dims,
                    const FillSpec& spec) {
    HostTensor t = Empty(dtype, dims);
    absl::Status s = device_->Launch({spec, {}, t.ref()});
    EXPECT_TRUE(s.ok()) << s;
    return t;
  }
  HostTensor Bin(BinaryOp op, const HostTensor& a, const HostTensor& b) {
    HostTensor out =
        Empty(a.dtype, BroadcastShapes(a.shape, b.shape)->DimsVector());
    absl::Status s =
        device_->Launch({BinaryArgs{op}, {a.ref(), b.ref()}, out.ref()});
    EXPECT_TRUE(s.ok()) << s;
    return out;
  }

  std::unique_ptr<Device> device_;
};

FillSpec Spec(FillSpec::Kind kind) {
  FillSpec f;
  f.kind = kind;
  return f;
}

TEST_F(CpuDeviceTest, Identity) {
  EXPECT_EQ(device_->name(), "cpu");
  EXPECT_EQ(device_->kind(), DeviceKind::kCpu);
  DeviceProperties p = device_->Properties();
  EXPECT_FALSE(p.model.empty());
  EXPECT_GT(p.total_memory, 0u);
  EXPECT_GT(p.free_memory, 0u);
  EXPECT_LE(p.free_memory, p.total_memory);
  auto named =
      CreateCpuDevice({.name = "cpu:1", .index = 1, .total_memory = 1 << 30});
  EXPECT_EQ(named->name(), "cpu:1");
  EXPECT_EQ(named->index(), 1);
  EXPECT_EQ(named->Properties().total_memory, 1u << 30);
}

TEST_F(CpuDeviceTest, AllocationIsAligned) {
  for (size_t bytes : {0, 1, 63, 64, 1000}) {
    auto b = DeviceTestAccess::Allocate(*device_, bytes).value();
    EXPECT_EQ(b->size(), bytes);
    EXPECT_NE(b->data(), nullptr);
    EXPECT_EQ(reinterpret_cast<uintptr_t>(b->data()) % 64, 0u);
  }
}

TEST_F(CpuDeviceTest, CopiesAndRangeChecks) {
  HostTensor t = From<int32_t>(DType::kInt32, {4}, {1, 2, 3, 4});
  int32_t two[2];
  ASSERT_TRUE(device_->CopyToHost(*t.buffer, 8, two, 8).ok());
  EXPECT_EQ(two[0], 3);
  EXPECT_EQ(two[1], 4);
  EXPECT_EQ(device_->CopyToHost(*t.buffer, 12, two, 8).code(),
            absl::StatusCode::kOutOfRange);
  auto other = CreateCpuDevice({.name = "cpu:1", .index = 1});
  auto dst = DeviceTestAccess::Allocate(*other, 16).value();
  ASSERT_TRUE(other->CopyFromDevice(*device_, *t.buffer, *dst, 16).ok());
  EXPECT_EQ(std::memcmp(dst->data(), t.buffer->data(), 16), 0);
}

TEST_F(CpuDeviceTest, Supports) {
  EXPECT_TRUE(device_->Supports(OpKind::kMatMul, DType::kFloat32).ok());
  absl::Status s = device_->Supports(OpKind::kMatMul, DType::kBool);
  EXPECT_EQ(s.code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_EQ(s.message(), "\"matmul\" not implemented for 'Bool' on cpu");
  EXPECT_EQ(device_->Supports(OpKind::kRandomFill, DType::kInt64).code(),
            absl::StatusCode::kFailedPrecondition);
  EXPECT_TRUE(device_->Supports(OpKind::kRandomFill, DType::kFloat64).ok());
  // Half precision computes in float32 and rounds back (PyTorch's CPU);
  // only random fills are float32/float64 alone.
  for (DType half : {DType::kFloat16, DType::kBFloat16}) {
    for (OpKind op : {OpKind::kFill, OpKind::kCast, OpKind::kBinary,
                      OpKind::kMatMul, OpKind::kUnary, OpKind::kReduce}) {
      EXPECT_TRUE(device_->Supports(op, half).ok());
    }
    EXPECT_EQ(device_->Supports(OpKind::kRandomFill, half).code(),
              absl::StatusCode::kFailedPrecondition);
  }
}

TEST_F(CpuDeviceTest, FillConstantsAllDtypes) {
  FillSpec full = Spec(FillSpec::Kind::kFull);
  full.value = 2.5;
  EXPECT_THAT(Filled(DType::kFloat32, {3}, full).values<float>(),
              ElementsAre(2.5f, 2.5f, 2.5f));
  EXPECT_THAT(Filled(DType::kFloat64, {2}, Spec(FillSpec::Kind::kOnes))
                  .values<double>(),
              ElementsAre(1.0, 1.0));
  EXPECT_THAT(Filled(DType::kInt64, {2}, full).values<int64_t>(),
              ElementsAre(2, 2));
  EXPECT_THAT(Filled(DType::kInt32, {2}, Spec(FillSpec::Kind::kZeros))
                  .values<int32_t>(),
              ElementsAre(0, 0));
  EXPECT_THAT(Filled(DType::kBool, {2}, full).values<uint8_t>(),
              ElementsAre(1, 1));
  EXPECT_THAT(
      Filled(DType::kBool, {1}, Spec(FillSpec::Kind::kZeros)).values<uint8_t>(),
      ElementsAre(0));
  // Half types: bit patterns of 1.0 and 2.5.
  EXPECT_THAT(Filled(DType::kFloat16, {2}, Spec(FillSpec::Kind::kOnes))
                  .values<uint16_t>(),
              ElementsAre(0x3c00, 0x3c00));
  EXPECT_THAT(Filled(DType::kBFloat16, {1}, full).values<uint16_t>(),
              ElementsAre(0x4020));
  EXPECT_THAT(Filled(DType::kFloat16, {1}, full).values<uint16_t>(),
              ElementsAre(0x4100));
  // Out-of-range values saturate instead of being undefined behaviour.
  full.value = 1e30;
  EXPECT_THAT(Filled(DType::kInt32, {1}, full).values<int32_t>(),
              ElementsAre(std::numeric_limits<int32_t>::max()));
}

TEST_F(CpuDeviceTest, Arange) {
  FillSpec a = Spec(FillSpec::Kind::kArange);
  a.start = 1;
  a.step = 0.5;
  EXPECT_THAT(Filled(DType::kFloat32, {4}, a).values<float>(),
              ElementsAre(1.0f, 1.5f, 2.0f, 2.5f));
  EXPECT_THAT(Filled(DType::kInt32, {4}, a).values<int32_t>(),
              ElementsAre(1, 1, 2, 2));
  a.start = 10;
  a.step = -3;
  EXPECT_THAT(Filled(DType::kInt64, {2, 2}, a).values<int64_t>(),
              ElementsAre(10, 7, 4, 1));
  a.start = 0;
  a.step = 1;
  EXPECT_THAT(Filled(DType::kBool, {3}, a).values<uint8_t>(),
              ElementsAre(0, 1, 1));
  // Exact beyond 2^53 for integer dtypes.
  a.start = 9007199254740992.0;  // 2^53
  EXPECT_THAT(Filled(DType::kInt64, {2}, a).values<int64_t>(),
              ElementsAre(int64_t{1} << 53, (int64_t{1} << 53) + 1));
}

TEST_F(CpuDeviceTest, SeededRandIsReproducibleAndInRange) {
  FillSpec r = Spec(FillSpec::Kind::kRand);
  r.low = -2;
  r.high = 3;
  r.seed = 42;
  std::vector<float> a = Filled(DType::kFloat32, {1000}, r).values<float>();
  std::vector<float> b = Filled(DType::kFloat32, {1000}, r).values<float>();
  EXPECT_EQ(a, b);
  for (float v : a) {
    EXPECT_GE(v, -2.0f);
    EXPECT_LT(v, 3.0f);
  }
  // Element i depends only on (seed, i): a prefix is a prefix.
  std::vector<float> prefix = Filled(DType::kFloat32, {10}, r).values<float>();
  EXPECT_THAT(prefix, ElementsAreArray(a.begin(), a.begin() + 10));
  r.seed = 43;
  EXPECT_NE(Filled(DType::kFloat32, {1000}, r).values<float>(), a);
  r.seed.reset();
  EXPECT_NE(Filled(DType::kFloat64, {100}, r).values<double>(),
            Filled(DType::kFloat64, {100}, r).values<double>());
}

TEST_F(CpuDeviceTest, RandnMoments) {
  FillSpec r = Spec(FillSpec::Kind::kRandn);
  r.mean = 3;
  r.stddev = 2;
  r.seed = 7;
  const int n = 100000;
  std::vector<double> v = Filled(DType::kFloat64, {n}, r).values<double>();
  double sum = 0, sq = 0;
  for (double x : v) sum += x;
  const double mean = sum / n;
  for (double x : v) sq += (x - mean) * (x - mean);
  const double stddev = std::sqrt(sq / (n - 1));
  EXPECT_NEAR(mean, 3.0, 0.03);
  EXPECT_NEAR(stddev, 2.0, 0.03);
  EXPECT_EQ(Filled(DType::kFloat64, {n}, r).values<double>(), v);
}

TEST_F(CpuDeviceTest, RandomFillRejectsIntegers) {
  FillSpec r = Spec(FillSpec::Kind::kRand);
  HostTensor t = Empty(DType::kInt32, {3});
  absl::Status s = device_->Launch({r, {}, t.ref()});
  EXPECT_EQ(s.code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(std::string(s.message()), HasSubstr("'Int'"));
}

TEST_F(CpuDeviceTest, Casts) {
  HostTensor f =
      From<float>(DType::kFloat32, {5}, {-1.5f, 0.0f, 2.7f, NAN, 3e10f});
  HostTensor i = Empty(DType::kInt32, {5});
  ASSERT_TRUE(device_->Launch({CastArgs{}, {f.ref()}, i.ref()}).ok());
  EXPECT_THAT(i.values<int32_t>(),
              ElementsAre(-1, 0, 2, 0, std::numeric_limits<int32_t>::max()));
  HostTensor b = Empty(DType::kBool, {5});
  ASSERT_TRUE(device_->Launch({CastArgs{}, {f.ref()}, b.ref()}).ok());
  EXPECT_THAT(b.values<uint8_t>(), ElementsAre(1, 0, 1, 1, 1));
  HostTensor d = Empty(DType::kFloat64, {5});
  ASSERT_TRUE(device_->Launch({CastArgs{}, {b.ref()}, d.ref()}).ok());
  EXPECT_THAT(d.values<double>(), ElementsAre(1, 0, 1, 1, 1));
  HostTensor l =
      From<int64_t>(DType::kInt64, {2}, {(int64_t{1} << 32) + 5, -7});
  HostTensor i2 = Empty(DType::kInt32, {2});
  ASSERT_TRUE(device_->Launch({CastArgs{}, {l.ref()}, i2.ref()}).ok());
  EXPECT_THAT(i2.values<int32_t>(), ElementsAre(5, -7));
  // Any nonzero byte is true.
  HostTensor raw = From<uint8_t>(DType::kBool, {2}, {0, 7});
  HostTensor r64 = Empty(DType::kInt64, {2});
  ASSERT_TRUE(device_->Launch({CastArgs{}, {raw.ref()}, r64.ref()}).ok());
  EXPECT_THAT(r64.values<int64_t>(), ElementsAre(0, 1));
}

TEST_F(CpuDeviceTest, BinarySameShape) {
  HostTensor a = From<float>(DType::kFloat32, {4}, {1, 2, 3, 4});
  HostTensor b = From<float>(DType::kFloat32, {4}, {4, 3, 2, 0});
  EXPECT_THAT(Bin(BinaryOp::kAdd, a, b).values<float>(),
              ElementsAre(5, 5, 5, 4));
  EXPECT_THAT(Bin(BinaryOp::kSub, a, b).values<float>(),
              ElementsAre(-3, -1, 1, 4));
  EXPECT_THAT(Bin(BinaryOp::kMul, a, b).values<float>(),
              ElementsAre(4, 6, 6, 0));
  std::vector<float> q = Bin(BinaryOp::kDiv, a, b).values<float>();
  EXPECT_FLOAT_EQ(q[0], 0.25f);
  EXPECT_TRUE(std::isinf(q[3]));
}

TEST_F(CpuDeviceTest, BinaryBroadcasting) {
  HostTensor m = From<int64_t>(DType::kInt64, {2, 3}, {1, 2, 3, 4, 5, 6});
  HostTensor row = From<int64_t>(DType::kInt64, {3}, {10, 20, 30});
  HostTensor col = From<int64_t>(DType::kInt64, {2, 1}, {100, 200});
  HostTensor scalar = From<int64_t>(DType::kInt64, {}, {2});
  EXPECT_THAT(Bin(BinaryOp::kAdd, m, row).values<int64_t>(),
              ElementsAre(11, 22, 33, 14, 25, 36));
  EXPECT_THAT(Bin(BinaryOp::kSub, col, m).values<int64_t>(),
              ElementsAre(99, 98, 97, 196, 195, 194));
  EXPECT_THAT(Bin(BinaryOp::kMul, scalar, m).values<int64_t>(),
              ElementsAre(2, 4, 6, 8, 10, 12));
  // Outer product through broadcasting: [2, 1] x [3] -> [2, 3].
  EXPECT_THAT(Bin(BinaryOp::kMul, col, row).values<int64_t>(),
              ElementsAre(1000, 2000, 3000, 2000, 4000, 6000));
  // Rank 3 with broadcasting in a middle dim.
  HostTensor x = From<double>(DType::kFloat64, {2, 1, 2}, {1, 2, 3, 4});
  HostTensor y = From<double>(DType::kFloat64, {3, 1}, {10, 20, 30});
  EXPECT_THAT(Bin(BinaryOp::kAdd, x, y).values<double>(),
              ElementsAre(11, 12, 21, 22, 31, 32, 13, 14, 23, 24, 33, 34));
  // Empty result.
  HostTensor e = Empty(DType::kInt64, {0, 3});
  EXPECT_EQ(Bin(BinaryOp::kAdd, e, row).shape, S({0, 3}));
}

TEST_F(CpuDeviceTest, IntegerWraparound) {
  constexpr int32_t kMax = std::numeric_limits<int32_t>::max();
  constexpr int32_t kMin = std::numeric_limits<int32_t>::min();
  HostTensor a = From<int32_t>(DType::kInt32, {3}, {kMax, kMin, 65536});
  HostTensor b = From<int32_t>(DType::kInt32, {3}, {1, 1, 65536});
  EXPECT_THAT(Bin(BinaryOp::kAdd, a, b).values<int32_t>(),
              ElementsAre(kMin, kMin + 1, 131072));
  EXPECT_THAT(Bin(BinaryOp::kSub, a, b).values<int32_t>(),
              ElementsAre(kMax - 1, kMax, 0));
  EXPECT_THAT(Bin(BinaryOp::kMul, a, b).values<int32_t>(),
              ElementsAre(kMax, kMin, 0));  // 2^32 wraps to 0
  constexpr int64_t kMax64 = std::numeric_limits<int64_t>::max();
  HostTensor c = From<int64_t>(DType::kInt64, {1}, {kMax64});
  EXPECT_THAT(Bin(BinaryOp::kAdd, c, c).values<int64_t>(), ElementsAre(-2));
}

TEST_F(CpuDeviceTest, BoolOps) {
  HostTensor a = From<uint8_t>(DType::kBool, {4}, {0, 0, 1, 5});
  HostTensor b = From<uint8_t>(DType::kBool, {4}, {0, 1, 0, 1});
  EXPECT_THAT(Bin(BinaryOp::kAdd, a, b).values<uint8_t>(),
              ElementsAre(0, 1, 1, 1));
  EXPECT_THAT(Bin(BinaryOp::kMul, a, b).values<uint8_t>(),
              ElementsAre(0, 0, 0, 1));
  // A nonzero byte other than 1 reads as true everywhere.
  EXPECT_THAT(Bin(BinaryOp::kMaximum, a, b).values<uint8_t>(),
              ElementsAre(0, 1, 1, 1));
  EXPECT_THAT(Bin(BinaryOp::kEq, a, b).values<uint8_t>(),
              ElementsAre(1, 0, 0, 1));
  // The planner refuses bool sub with PyTorch's message (planner_test); a
  // kernel asked for it anyway refuses too, and writes nothing.
  HostTensor out = From<uint8_t>(DType::kBool, {4}, {9, 9, 9, 9});
  absl::Status s = device_->Launch(
      {BinaryArgs{BinaryOp::kSub}, {a.ref(), b.ref()}, out.ref()});
  EXPECT_EQ(s.code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_EQ(s.message(), "\"sub\" not implemented for 'Bool' on cpu");
  EXPECT_THAT(out.values<uint8_t>(), ElementsAre(9, 9, 9, 9));
}

TEST_F(CpuDeviceTest, MatMulSmall) {
  // [2, 3] x [3, 2]
  HostTensor a = From<float>(DType::kFloat32, {2, 3}, {1, 2, 3, 4, 5, 6});
  HostTensor b = From<float>(DType::kFloat32, {3, 2}, {7, 8, 9, 10, 11, 12});
  HostTensor out = Empty(DType::kFloat32, {2, 2});
  MatMulDims dims{.batch = 1, .m = 2, .n = 2, .k = 3};
  ASSERT_TRUE(device_->Launch({dims, {a.ref(), b.ref()}, out.ref()}).ok());
  EXPECT_THAT(out.values<float>(), ElementsAre(58, 64, 139, 154));

  HostTensor ai = From<int64_t>(DType::kInt64, {2, 3}, {1, 2, 3, 4, 5, 6});
  HostTensor bi = From<int64_t>(DType::kInt64, {3, 2}, {7, 8, 9, 10, 11, 12});
  HostTensor oi = Empty(DType::kInt64, {2, 2});
  ASSERT_TRUE(device_->Launch({dims, {ai.ref(), bi.ref()}, oi.ref()}).ok());
  EXPECT_THAT(oi.values<int64_t>(), ElementsAre(58, 64, 139, 154));

  HostTensor bb = Empty(DType::kBool, {2, 2});
  EXPECT_EQ(device_->Launch({dims, {bb.ref(), bb.ref()}, bb.ref()}).code(),
            absl::StatusCode::kFailedPrecondition);
}

TEST_F(CpuDeviceTest, MatMulIntWraps) {
  constexpr int32_t kMax = std::numeric_limits<int32_t>::max();
  HostTensor a = From<int32_t>(DType::kInt32, {1, 2}, {kMax, 1});
  HostTensor b = From<int32_t>(DType::kInt32, {2, 1}, {2, 2});
  HostTensor out = Empty(DType::kInt32, {1, 1});
  MatMulDims dims{.batch = 1, .m = 1, .n = 1, .k = 2};
  ASSERT_TRUE(device_->Launch({dims, {a.ref(), b.ref()}, out.ref()}).ok());
  EXPECT_THAT(out.values<int32_t>(), ElementsAre(0));  // 2*(2^31-1)+2 = 2^32
}

TEST_F(CpuDeviceTest, BatchedSgemmMatchesNaiveLoop) {
  const int64_t batch = 3, m = 37, n = 29, k = 53;
  std::mt19937 gen(1);
  std::uniform_real_distribution<float> dist(-1, 1);
  std::vector<float> av(batch * m * k), bv(k * n);
  for (float& x : av) x = dist(gen);
  for (float& x : bv) x = dist(gen);
  HostTensor a = From<float>(DType::kFloat32, {batch, m, k}, av);
  HostTensor b = From<float>(DType::kFloat32, {k, n}, bv);  // broadcast
  HostTensor out = Empty(DType::kFloat32, {batch, m, n});
  MatMulDims dims{.batch = batch,
                  .m = m,
                  .n = n,
                  .k = k,
                  .a_batch_stride = m * k,
                  .b_batch_stride = 0,
                  .out_batch_stride = m * n};
  ASSERT_TRUE(device_->Launch({dims, {a.ref(), b.ref()}, out.ref()}).ok());
  std::vector<float> got = out.values<float>();
  for (int64_t p = 0; p < batch; ++p) {
    for (int64_t i = 0; i < m; ++i) {
      for (int64_t j = 0; j < n; ++j) {
        double want = 0;
        for (int64_t kk = 0; kk < k; ++kk) {
          want += double{av[p * m * k + i * k + kk]} * bv[kk * n + j];
        }
        ASSERT_NEAR(got[p * m * n + i * n + j], want, 1e-4)
            << p << "," << i << "," << j;
      }
    }
  }
}

TEST_F(CpuDeviceTest, MalformedKernelCallIsInternalAndNamesTheKind) {
  HostTensor a = Filled(DType::kFloat32, {2}, Spec(FillSpec::Kind::kOnes));
  HostTensor out = Empty(DType::kFloat32, {2});
  // A binary call with one input.
  absl::Status s =
      device_->Launch({BinaryArgs{BinaryOp::kAdd}, {a.ref()}, out.ref()});
  EXPECT_EQ(s.code(), absl::StatusCode::kInternal);
  EXPECT_EQ(std::string(s.message()),
            "cpu: malformed binary kernel call (1 inputs of 2, or a tensor "
            "without a buffer)");
  // A tensor without a buffer.
  EXPECT_EQ(device_->Launch({CastArgs{}, {TensorRef{}}, out.ref()}).code(),
            absl::StatusCode::kInternal);
  EXPECT_EQ(device_->Launch({FillSpec{}, {}, TensorRef{}}).code(),
            absl::StatusCode::kInternal);
  // The arity table covers every kind.
  for (int k = 0; k < kKernelKindCount; ++k) {
    EXPECT_GE(KernelArity(static_cast<KernelKind>(k)), 0);
    EXPECT_NE(KernelKindName(static_cast<KernelKind>(k)), "unknown");
  }
  // The device still runs well-formed calls.
  EXPECT_TRUE(
      device_
          ->Launch({BinaryArgs{BinaryOp::kAdd}, {a.ref(), a.ref()}, out.ref()})
          .ok());
  EXPECT_EQ(out.values<float>(), (std::vector<float>{2, 2}));
}

// The thread policy (core/cpu/library_kernels.h): library calls from many
// threads at once (concurrent sessions) each compute what one call alone
// does, but only one runs on a team of threads at a time; the others run
// on their own threads, counted as contended. Calls below the grain never
// wake a team.
TEST_F(CpuDeviceTest, LibraryCallsShareOneTeam) {
  using cpu::GetLibraryKernelCounters;
  using cpu::LibraryKernelCounters;
  using cpu::LibraryThreads;
  if (cpu::KernelLibraryName().empty()) {
    GTEST_SKIP() << "this build runs conv2d without a library";
  }
  SetBlasThreads(2);
  Conv2dArgs args;
  args.dims = WindowDims{8, 16, 32, 32, 3, 3, 1, 1, 0, 0, 1, 1, 30, 30};
  args.out_channels = 32;  // 66 MFLOP: over the grain
  ASSERT_EQ(device_->Select(args, DType::kFloat32),
            Device::Implementation::kLibrary);
  ASSERT_GT(LibraryThreads(2.0 * 8 * 32 * 30 * 30 * 16 * 9), 1);
  EXPECT_EQ(LibraryThreads(1e5), 1);
  const uint64_t bytes = device_->WorkspaceBytes(args, DType::kFloat32).value();
  std::mt19937 gen(5);
  std::uniform_real_distribution<float> uniform(-1, 1);
  std::vector<float> xs(8 * 16 * 32 * 32), ws(32 * 16 * 3 * 3);
  for (float& v : xs) v = uniform(gen);
  for (float& v : ws) v = uniform(gen);
  const HostTensor x = From(DType::kFloat32, {8, 16, 32, 32}, xs);
  const HostTensor w = From(DType::kFloat32, {32, 16, 3, 3}, ws);
  auto conv = [&]() {
    HostTensor workspace = Empty(DType::kBool, {static_cast<int64_t>(bytes)});
    HostTensor y = Empty(DType::kFloat32, {8, 32, 30, 30});
    const absl::Status s =
        device_->Launch({args,
                         {x.ref(), w.ref(), w.ref(), workspace.ref()},
                         y.ref()});  // no bias: the weight stands in
    EXPECT_TRUE(s.ok()) << s;
    return y.values<float>();
  };
  const std::vector<float> alone = conv();
  const LibraryKernelCounters before = GetLibraryKernelCounters();
  constexpr int kThreads = 4, kCalls = 8;
  int rounds = 0;
  std::vector<std::vector<float>> results(kThreads * kCalls);
  // Contention is a race: rounds until one call found the team busy.
  while (GetLibraryKernelCounters().contended == before.contended &&
         rounds < 50) {
    ++rounds;
    std::vector<std::thread> threads;
    for (int t = 0; t < kThreads; ++t) {
      threads.emplace_back([&, t] {
        for (int c = 0; c < kCalls; ++c) results[t * kCalls + c] = conv();
      });
    }
    for (std::thread& t : threads) t.join();
    for (const std::vector<float>& y : results) {
      ASSERT_EQ(y.size(), alone.size());
      for (size_t i = 0; i < y.size(); ++i) {
        ASSERT_NEAR(y[i], alone[i], 1e-4f * std::max(1.0f, std::abs(alone[i])));
      }
    }
  }
  const LibraryKernelCounters after = GetLibraryKernelCounters();
  const uint64_t calls = uint64_t{kThreads} * kCalls * rounds;
  EXPECT_EQ((after.team_calls - before.team_calls) +
                (after.alone_calls - before.alone_calls),
            calls);
  EXPECT_GT(after.team_calls, before.team_calls);
  EXPECT_GT(after.contended, before.contended) << rounds << " rounds";
  EXPECT_LE(after.contended - before.contended,
            after.alone_calls - before.alone_calls);
}

}  // namespace
}  // namespace tensord::core

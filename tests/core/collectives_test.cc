// Issue 36 stage 1: collectives over host devices — the element-wise
// reductions, the communicator on Gloo (one rank per device over loopback
// TCP), and the Runtime's groups: one tensor per member, PyTorch-style
// results, the refusals and their codes, admission, a group's life.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <limits>
#include <thread>
#include <vector>

#include "core/base/half.h"
#include "core/collectives/host_communicator.h"
#include "core/collectives/reduce_kernels.h"
#include "core/runtime/runtime.h"

namespace tensord::core {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;

template <typename T>
std::span<const uint8_t> Bytes(const std::vector<T>& v) {
  return {reinterpret_cast<const uint8_t*>(v.data()), v.size() * sizeof(T)};
}

#define SKIP_WITHOUT_GLOO()                                              \
  if (!HostCollectivesBuilt())                                          \
  GTEST_SKIP() << "this build has no Gloo (libgloo-dev): collectives are " \
                  "off"

TEST(ReduceKernelsTest, EachOpOnEachDType) {
  std::vector<float> a{1, -2, 3}, b{4, 5, -6}, o(3);
  ReduceFunction(Reduction::kSum, DType::kFloat32)(o.data(), a.data(),
                                                   b.data(), 3);
  EXPECT_THAT(o, ElementsAre(5, 3, -3));
  ReduceFunction(Reduction::kProduct, DType::kFloat32)(o.data(), a.data(),
                                                       b.data(), 3);
  EXPECT_THAT(o, ElementsAre(4, -10, -18));
  ReduceFunction(Reduction::kMax, DType::kFloat32)(o.data(), a.data(),
                                                   b.data(), 3);
  EXPECT_THAT(o, ElementsAre(4, 5, 3));
  ReduceFunction(Reduction::kMin, DType::kFloat32)(o.data(), a.data(),
                                                   b.data(), 3);
  EXPECT_THAT(o, ElementsAre(1, -2, -6));
  // NaN wins max and min, as torch.maximum's.
  std::vector<double> n{std::nan(""), 1}, m{2, 3}, p(2);
  ReduceFunction(Reduction::kMax, DType::kFloat64)(p.data(), n.data(),
                                                   m.data(), 2);
  EXPECT_TRUE(std::isnan(p[0]));
  EXPECT_EQ(p[1], 3);
  ReduceFunction(Reduction::kMin, DType::kFloat64)(p.data(), m.data(),
                                                   n.data(), 2);
  EXPECT_TRUE(std::isnan(p[0]));  // either side's NaN wins
  std::vector<int64_t> i{7, -1}, j{-3, 9}, k(2);
  ReduceFunction(Reduction::kSum, DType::kInt64)(k.data(), i.data(),
                                                 j.data(), 2);
  EXPECT_THAT(k, ElementsAre(4, 8));
  std::vector<uint8_t> t{1, 0, 1, 0}, u{1, 1, 0, 0}, v(4);
  ReduceFunction(Reduction::kSum, DType::kBool)(v.data(), t.data(), u.data(),
                                                4);
  EXPECT_THAT(v, ElementsAre(1, 1, 1, 0));
  ReduceFunction(Reduction::kMin, DType::kBool)(v.data(), t.data(), u.data(),
                                                4);
  EXPECT_THAT(v, ElementsAre(1, 0, 0, 0));
  // The 16-bit floats add in float and round once.
  std::vector<BFloat16> x{BFloat16{FloatToBFloat16Bits(1.5f)}},
      y{BFloat16{FloatToBFloat16Bits(2.25f)}}, z(1);
  ReduceFunction(Reduction::kSum, DType::kBFloat16)(z.data(), x.data(),
                                                    y.data(), 1);
  EXPECT_EQ(BFloat16BitsToFloat(z[0].bits), 3.75f);
  std::vector<Float16> h{Float16{FloatToHalfBits(3.0f)}};
  DivideBy(h.data(), 1, DType::kFloat16, 2);
  EXPECT_EQ(HalfBitsToFloat(h[0].bits), 1.5f);
}

TEST(ReduceKernelsTest, AvgIsForFloatingDTypesOnly) {
  EXPECT_TRUE(CheckReduceOp("all_reduce", Reduction::kAvg, DType::kFloat16)
                  .ok());
  absl::Status s = CheckReduceOp("all_reduce", Reduction::kAvg, DType::kInt64);
  EXPECT_EQ(s.code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(s.message(), HasSubstr("AVG is defined for floating dtypes "
                                     "only, not int64"));
}

TEST(HostCommunicatorTest, EveryCollectiveOnOneToThreeRanks) {
  SKIP_WITHOUT_GLOO();
  for (int world = 1; world <= 3; ++world) {
    SCOPED_TRACE(world);
    auto comm =
        ConnectHostCommunicator(world, std::chrono::seconds(10)).value();
    EXPECT_EQ(comm->world_size(), world);
    EXPECT_THAT(comm->engine(), HasSubstr("gloo"));
    // all_reduce: rank r holds {r, 10 r, 1}; 3 MiB of float32 besides, past
    // Gloo's 1 MiB segments.
    std::vector<std::vector<float>> small(world), big(world);
    std::vector<void*> sp, bp;
    const size_t n = 3 << 18;
    for (int r = 0; r < world; ++r) {
      small[r] = {float(r), float(10 * r), 1};
      big[r].assign(n, float(r + 1));
      sp.push_back(small[r].data());
      bp.push_back(big[r].data());
    }
    ASSERT_TRUE(comm->AllReduce(sp, 3, DType::kFloat32, Reduction::kSum).ok());
    const float sum = world * (world - 1) / 2.0f;
    for (int r = 0; r < world; ++r) {
      EXPECT_THAT(small[r], ElementsAre(sum, 10 * sum, float(world)));
    }
    ASSERT_TRUE(comm->AllReduce(bp, n, DType::kFloat32, Reduction::kAvg).ok());
    for (int r = 0; r < world; ++r) {
      EXPECT_EQ(big[r][0], (world + 1) / 2.0f);
      EXPECT_EQ(big[r][n - 1], (world + 1) / 2.0f);
    }
    // broadcast from the last rank.
    std::vector<std::vector<int64_t>> b(world);
    std::vector<void*> bb;
    for (int r = 0; r < world; ++r) {
      b[r] = {r, -r};
      bb.push_back(b[r].data());
    }
    ASSERT_TRUE(comm->Broadcast(bb, 16, world - 1).ok());
    for (int r = 0; r < world; ++r) {
      EXPECT_THAT(b[r], ElementsAre(world - 1, 1 - world));
    }
    // all_gather.
    std::vector<std::vector<int32_t>> in(world), out(world);
    std::vector<const void*> ip;
    std::vector<void*> op;
    for (int r = 0; r < world; ++r) {
      in[r] = {r, r + 100};
      out[r].assign(2 * world, -1);
      ip.push_back(in[r].data());
      op.push_back(out[r].data());
    }
    ASSERT_TRUE(comm->AllGather(ip, op, 8).ok());
    for (int r = 0; r < world; ++r) {
      for (int q = 0; q < world; ++q) {
        EXPECT_EQ(out[r][2 * q], q);
        EXPECT_EQ(out[r][2 * q + 1], q + 100);
      }
    }
    EXPECT_TRUE(comm->Barrier().ok());
  }
  EXPECT_EQ(ConnectHostCommunicator(0, std::chrono::seconds(1)).status().code(),
            absl::StatusCode::kInvalidArgument);
}

class CollectivesRuntimeTest : public ::testing::Test {
 protected:
  void SetUp() override {
    RuntimeOptions options;
    options.host_devices = 3;
    options.host_memory_budget = 64 << 20;
    options.session_max_groups = 2;
    rt_ = Runtime::Create(std::move(options)).value();
    session_ = rt_->OpenSession("test").value();
  }

  template <typename T>
  uint64_t Make(std::vector<int64_t> dims, const std::vector<T>& values,
                std::string_view device, DType dtype) {
    auto m = rt_->CreateFromData(session_, device, dtype, dims, Bytes(values),
                                 "");
    EXPECT_TRUE(m.ok()) << m.status();
    return m->handle;
  }
  uint64_t F32(std::vector<float> v, std::string_view device,
               std::vector<int64_t> dims = {}) {
    if (dims.empty()) dims = {static_cast<int64_t>(v.size())};
    return Make(dims, v, device, DType::kFloat32);
  }

  template <typename T>
  std::vector<T> Fetch(uint64_t handle) {
    auto reader = rt_->OpenReader(session_, handle).value();
    std::vector<T> out(reader->meta().nbytes / sizeof(T));
    EXPECT_TRUE(reader
                    ->Read(0, {reinterpret_cast<uint8_t*>(out.data()),
                               out.size() * sizeof(T)})
                    .ok());
    return out;
  }

  uint64_t Group(std::vector<std::string> devices) {
    auto g = rt_->CreateGroup(session_, devices, "g");
    EXPECT_TRUE(g.ok()) << g.status();
    return g.ok() ? g->id : 0;
  }

  absl::StatusOr<std::vector<TensorMeta>> Run(
      uint64_t group, CollectiveKind kind, std::vector<uint64_t> handles,
      Reduction op = Reduction::kSum, uint32_t root = 0) {
    Runtime::CollectiveArgs args;
    args.kind = kind;
    args.op = op;
    args.root = root;
    return rt_->Collective(session_, group, args, handles);
  }

  std::unique_ptr<Runtime> rt_;
  std::string session_;
};

TEST_F(CollectivesRuntimeTest, AllReduceAndBroadcastWriteInPlace) {
  SKIP_WITHOUT_GLOO();
  const uint64_t g = Group({"cpu:0", "cpu:1"});
  auto groups = rt_->ListGroups(session_).value();
  ASSERT_EQ(groups.size(), 1u);
  EXPECT_THAT(groups[0].devices, ElementsAre("cpu:0", "cpu:1"));
  EXPECT_THAT(groups[0].engine, HasSubstr("gloo"));
  EXPECT_EQ(groups[0].tag, "g");
  const uint64_t a = F32({1, 2}, "cpu:0"), b = F32({10, 20}, "cpu:1");
  // Handles in any order; results in the handles' order.
  auto r = Run(g, CollectiveKind::kAllReduce, {b, a});
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ((*r)[0].handle, b);
  EXPECT_EQ((*r)[1].handle, a);
  EXPECT_THAT(Fetch<float>(a), ElementsAre(11, 22));
  EXPECT_THAT(Fetch<float>(b), ElementsAre(11, 22));
  ASSERT_TRUE(Run(g, CollectiveKind::kAllReduce, {a, b}, Reduction::kAvg).ok());
  EXPECT_THAT(Fetch<float>(b), ElementsAre(11, 22));
  const uint64_t c = F32({3, 4}, "cpu:0");
  ASSERT_TRUE(Run(g, CollectiveKind::kBroadcast, {b, c}, Reduction::kSum, 1)
                  .ok());
  EXPECT_THAT(Fetch<float>(c), ElementsAre(11, 22));
  EXPECT_EQ(rt_->ListGroups(session_).value()[0].collectives, 3u);
  // A barrier takes no tensors.
  EXPECT_TRUE(Run(g, CollectiveKind::kBarrier, {}).ok());
  EXPECT_EQ(Run(g, CollectiveKind::kBarrier, {a}).status().code(),
            absl::StatusCode::kInvalidArgument);
}

TEST_F(CollectivesRuntimeTest, AllGatherAndReduceScatterMakeNewTensors) {
  SKIP_WITHOUT_GLOO();
  const uint64_t g = Group({"cpu:2", "cpu:0", "cpu:1"});  // cpu:2 is rank 0
  const uint64_t x0 = F32({0, 1}, "cpu:2"), x1 = F32({2, 3}, "cpu:0"),
                 x2 = F32({4, 5}, "cpu:1");
  auto gathered = Run(g, CollectiveKind::kAllGather, {x1, x2, x0});
  ASSERT_TRUE(gathered.ok()) << gathered.status();
  ASSERT_EQ(gathered->size(), 3u);
  EXPECT_EQ((*gathered)[0].device, "cpu:0");
  EXPECT_EQ((*gathered)[0].shape.ToString(), "[6]");
  for (const TensorMeta& m : *gathered) {
    EXPECT_THAT(Fetch<float>(m.handle), ElementsAre(0, 1, 2, 3, 4, 5));
  }
  // 0-d tensors gather into 1-D.
  std::vector<uint64_t> scalars;
  for (const char* d : {"cpu:0", "cpu:1", "cpu:2"}) {
    scalars.push_back(Make<int64_t>({}, {7}, d, DType::kInt64));
  }
  auto s = Run(g, CollectiveKind::kAllGather, scalars).value();
  EXPECT_EQ(s[0].shape.ToString(), "[3]");
  // reduce_scatter: 3 x [2] per rank, each rank keeps its slice.
  std::vector<float> v(6);
  for (int i = 0; i < 6; ++i) v[i] = float(i);
  const uint64_t y0 = F32(v, "cpu:2", {3, 2}), y1 = F32(v, "cpu:0", {3, 2}),
                 y2 = F32(v, "cpu:1", {3, 2});
  auto scattered = Run(g, CollectiveKind::kReduceScatter, {y0, y1, y2},
                       Reduction::kMax);
  ASSERT_TRUE(scattered.ok()) << scattered.status();
  EXPECT_EQ((*scattered)[0].shape.ToString(), "[1, 2]");
  EXPECT_THAT(Fetch<float>((*scattered)[0].handle), ElementsAre(0, 1));
  EXPECT_THAT(Fetch<float>((*scattered)[1].handle), ElementsAre(2, 3));
  EXPECT_THAT(Fetch<float>((*scattered)[2].handle), ElementsAre(4, 5));
  EXPECT_THAT(Fetch<float>(y1), ElementsAre(0, 1, 2, 3, 4, 5));  // unchanged
  auto bad = Run(g, CollectiveKind::kReduceScatter, {x0, x1, x2});
  EXPECT_EQ(bad.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(bad.status().message(),
              HasSubstr("first dimension must divide by the group's 3"));
}

TEST_F(CollectivesRuntimeTest, RefusalsNameTheProblem) {
  SKIP_WITHOUT_GLOO();
  const uint64_t g = Group({"cpu:0", "cpu:1"});
  const uint64_t a = F32({1, 2}, "cpu:0"), a2 = F32({1, 2}, "cpu:0"),
                 c = F32({1, 2}, "cpu:2"), b3 = F32({1, 2, 3}, "cpu:1");
  auto s = Run(g, CollectiveKind::kAllReduce, {a, a2}).status();
  EXPECT_EQ(s.code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_EQ(s.message(),
            "all_reduce: expected one tensor on each of cpu:0, cpu:1, but "
            "found two on cpu:0 and none on cpu:1");
  s = Run(g, CollectiveKind::kAllReduce, {a, c}).status();
  EXPECT_THAT(s.message(), HasSubstr("none on cpu:1 and one on cpu:2, which "
                                     "is not in the group"));
  s = Run(g, CollectiveKind::kAllReduce, {a, b3}).status();
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(s.message(),
            "all_reduce: the tensor on cpu:1 is float32 [3] but the one on "
            "cpu:0 is float32 [2]: a collective's tensors have one dtype and "
            "shape");
  const uint64_t i0 = Make<int64_t>({1}, {1}, "cpu:0", DType::kInt64),
                 i1 = Make<int64_t>({1}, {2}, "cpu:1", DType::kInt64);
  s = Run(g, CollectiveKind::kAllReduce, {i0, i1}, Reduction::kAvg).status();
  EXPECT_EQ(s.code(), absl::StatusCode::kFailedPrecondition);
  s = Run(g, CollectiveKind::kBroadcast, {i0, i1}, Reduction::kSum, 2)
          .status();
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(s.message(), HasSubstr("root is rank 2, but the group has 2"));
  EXPECT_EQ(Run(g + 100, CollectiveKind::kBarrier, {}).status().code(),
            absl::StatusCode::kNotFound);
  EXPECT_EQ(Run(g, CollectiveKind::kAllReduce, {a, 999999}).status().code(),
            absl::StatusCode::kNotFound);
  // Nothing ran: the tensors are as made.
  EXPECT_THAT(Fetch<int64_t>(i1), ElementsAre(2));
  // Groups themselves.
  std::vector<std::string> twice{"cpu:1", "cpu:0", "cpu"};
  s = rt_->CreateGroup(session_, twice, "").status();
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(s.message(), HasSubstr("device cpu:0 is named twice (devices #1 and #2)"));
  EXPECT_EQ(rt_->CreateGroup(session_, {}, "").status().code(),
            absl::StatusCode::kInvalidArgument);
  std::vector<std::string> absent{"cpu:7"};
  EXPECT_EQ(rt_->CreateGroup(session_, absent, "").status().code(),
            absl::StatusCode::kNotFound);
  Group({"cpu:2"});
  std::vector<std::string> one{"cpu:1"};
  s = rt_->CreateGroup(session_, one, "").status();
  EXPECT_EQ(s.code(), absl::StatusCode::kResourceExhausted);
  EXPECT_THAT(s.message(), HasSubstr("max_session_groups"));
  EXPECT_TRUE(rt_->DestroyGroup(session_, g).ok());
  EXPECT_EQ(rt_->DestroyGroup(session_, g).code(), absl::StatusCode::kNotFound);
  EXPECT_TRUE(rt_->CreateGroup(session_, one, "").ok());
}

TEST_F(CollectivesRuntimeTest, AllGatherIsAdmittedAgainstTheSessionsQuota) {
  SKIP_WITHOUT_GLOO();
  RuntimeOptions options;
  options.host_devices = 2;
  options.session_max_bytes = 3 * 4096;
  auto rt = Runtime::Create(std::move(options)).value();
  const std::string session = rt->OpenSession("q").value();
  std::vector<std::string> devices{"cpu:0", "cpu:1"};
  const uint64_t g = rt->CreateGroup(session, devices, "").value().id;
  std::vector<float> v(1024, 1.0f);
  std::vector<int64_t> dims{1024};
  const uint64_t a = rt->CreateFromData(session, "cpu:0", DType::kFloat32,
                                        dims, Bytes(v), "")->handle;
  const uint64_t b = rt->CreateFromData(session, "cpu:1", DType::kFloat32,
                                        dims, Bytes(v), "")->handle;
  Runtime::CollectiveArgs gather;
  gather.kind = CollectiveKind::kAllGather;
  std::vector<uint64_t> handles{a, b};
  auto s = rt->Collective(session, g, gather, handles).status();
  EXPECT_EQ(s.code(), absl::StatusCode::kResourceExhausted) << s;
  EXPECT_EQ(rt->ListTensors(session)->size(), 2u);  // nothing left behind
  Runtime::CollectiveArgs reduce;
  EXPECT_TRUE(rt->Collective(session, g, reduce, handles).ok());
}

TEST_F(CollectivesRuntimeTest, AGroupGoesWithItsSession) {
  SKIP_WITHOUT_GLOO();
  Group({"cpu:0", "cpu:1", "cpu:2"});
  EXPECT_EQ(rt_->ListGroups(session_)->size(), 1u);
  ASSERT_TRUE(rt_->CloseSession(session_).ok());
  EXPECT_EQ(rt_->ListGroups(session_).status().code(),
            absl::StatusCode::kNotFound);
  // A new session starts with none.
  session_ = rt_->OpenSession("again").value();
  EXPECT_TRUE(rt_->ListGroups(session_)->empty());
  Group({"cpu:0", "cpu:1"});
}

TEST_F(CollectivesRuntimeTest, AnInPlaceCollectiveMovesTheVersionOnForBackward) {
  SKIP_WITHOUT_GLOO();
  const uint64_t g = Group({"cpu:0", "cpu:1"});
  const uint64_t a = F32({1, 2}, "cpu:0"), b = F32({3, 4}, "cpu:1");
  // x requires grad; y = x * a saves a; all_reduce writes a.
  OpSpec rg;
  rg.kind = OpSpec::Kind::kRequiresGrad;
  rg.requires_grad = true;
  const uint64_t x = F32({5, 6}, "cpu:0");
  rg.inputs = {Operand::Handle(x)};
  ASSERT_TRUE(rt_->Run(session_, rg).ok());
  OpSpec mul;
  mul.kind = OpSpec::Kind::kBinary;
  mul.binary = BinaryOp::kMul;
  mul.inputs = {Operand::Handle(x), Operand::Handle(a)};
  auto y = rt_->Run(session_, mul);
  ASSERT_TRUE(y.ok()) << y.status();
  ASSERT_TRUE(Run(g, CollectiveKind::kAllReduce, {a, b}).ok());
  OpSpec sum;
  sum.kind = OpSpec::Kind::kReduce;
  sum.reduce = ReduceOp::kSum;
  sum.inputs = {Operand::Handle(y->handle)};
  auto loss = rt_->Run(session_, sum);
  ASSERT_TRUE(loss.ok()) << loss.status();
  OpSpec backward;
  backward.kind = OpSpec::Kind::kBackward;
  backward.inputs = {Operand::Handle(loss->handle)};
  auto s = rt_->Run(session_, backward).status();
  EXPECT_EQ(s.code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(s.message(), HasSubstr("modified by an inplace operation"));
}

}  // namespace
}  // namespace tensord::core

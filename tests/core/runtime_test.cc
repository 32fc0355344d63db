#include "core/runtime/runtime.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cstring>
#include <thread>
#include <vector>

#include "core/planner/planner.h"

namespace tensord::core {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;

constexpr uint64_t kMiB = uint64_t{1} << 20;

template <typename T>
std::span<const uint8_t> Bytes(const std::vector<T>& v) {
  return {reinterpret_cast<const uint8_t*>(v.data()), v.size() * sizeof(T)};
}

RuntimeOptions HostOptions(int host_devices) {
  RuntimeOptions options;
  options.host_devices = host_devices;
  return options;
}

template <typename T>
constexpr DType DTypeOf() {
  if constexpr (std::is_same_v<T, float>) return DType::kFloat32;
  if constexpr (std::is_same_v<T, double>) return DType::kFloat64;
  if constexpr (std::is_same_v<T, int32_t>) return DType::kInt32;
  if constexpr (std::is_same_v<T, int64_t>) return DType::kInt64;
  return DType::kBool;
}

class RuntimeTest : public ::testing::Test {
 protected:
  void SetUp() override { Start(2, 64 * kMiB); }

  void Start(int host_devices, uint64_t budget) {
    session_.clear();
    rt_.reset();
    RuntimeOptions options;
    options.host_devices = host_devices;
    options.host_memory_budget = budget;
    rt_ = Runtime::Create(std::move(options)).value();
    session_ = rt_->OpenSession("test").value();
  }

  template <typename T>
  TensorMeta Make(std::vector<int64_t> dims, const std::vector<T>& values,
                  std::string_view device = "cpu") {
    auto m = rt_->CreateFromData(session_, device, DTypeOf<T>(), dims,
                                 Bytes(values), "");
    EXPECT_TRUE(m.ok()) << m.status();
    return *m;
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

  // Bytes of the session's live tensors.
  uint64_t LiveBytes() {
    uint64_t live = 0;
    auto tensors = rt_->ListTensors(session_);
    EXPECT_TRUE(tensors.ok());
    for (const TensorMeta& m : *tensors) live += m.nbytes;
    return live;
  }

  uint64_t Held(std::string_view device) {
    for (const DeviceStatus& d : rt_->ListDevices()) {
      if (d.name == device) return d.held_bytes;
    }
    ADD_FAILURE() << "no device " << device;
    return 0;
  }

  std::unique_ptr<Runtime> rt_;
  std::string session_;
};

TEST(RuntimeCreateTest, Options) {
  EXPECT_EQ(Runtime::Create(HostOptions(0)).status().code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(Runtime::Create(HostOptions(65)).status().code(),
            absl::StatusCode::kInvalidArgument);
  auto one = Runtime::Create({}).value();
  auto devices = one->ListDevices();
  ASSERT_EQ(devices.size(), 1u);
  EXPECT_EQ(devices[0].name, "cpu");
  EXPECT_GT(devices[0].budget_bytes, 0u);
  EXPECT_EQ(one->FindDevice("").value()->name(), "cpu");
  EXPECT_EQ(one->FindDevice("cpu:0").value()->name(), "cpu");
}

TEST_F(RuntimeTest, DeviceNames) {
  auto devices = rt_->ListDevices();
  ASSERT_EQ(devices.size(), 2u);
  EXPECT_EQ(devices[0].name, "cpu:0");
  EXPECT_EQ(devices[1].name, "cpu:1");
  EXPECT_EQ(devices[1].budget_bytes, 64 * kMiB);
  EXPECT_EQ(rt_->FindDevice("cpu").value()->name(), "cpu:0");
  EXPECT_EQ(rt_->FindDevice("").value()->name(), "cpu:0");
  EXPECT_EQ(rt_->FindDevice("cpu:1").value()->name(), "cpu:1");
  auto bad = rt_->FindDevice("gpu:0");
  EXPECT_EQ(bad.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(bad.status().message(),
            "invalid device name 'gpu:0': expected 'cpu', 'cpu:<index>', "
            "'cuda' or 'cuda:<index>'");
  for (const char* name : {"cpu:", "cpu:-1", "cuda:x", "CPU", "cpu:1:2"}) {
    EXPECT_EQ(rt_->FindDevice(name).status().code(),
              absl::StatusCode::kInvalidArgument)
        << name;
  }
  auto absent = rt_->FindDevice("cuda:3");
  EXPECT_EQ(absent.status().code(), absl::StatusCode::kNotFound);
  EXPECT_EQ(absent.status().message(),
            "device cuda:3 not found; available devices: cpu:0, cpu:1");
  EXPECT_EQ(rt_->FindDevice("cpu:2").status().code(),
            absl::StatusCode::kNotFound);
}

TEST(RuntimeNodeTest, DeviceNamesQualifiedByTheNode) {
  RuntimeOptions options;
  options.host_devices = 2;
  options.node_name = "tensord-0";
  auto rt = Runtime::Create(std::move(options)).value();
  EXPECT_EQ(rt->node_name(), "tensord-0");
  EXPECT_EQ(rt->FindDevice("tensord-0/cpu:1").value()->name(), "cpu:1");
  EXPECT_EQ(rt->FindDevice("tensord-0/cpu").value()->name(), "cpu:0");
  auto other = rt->FindDevice("tensord-1/cpu:1");
  EXPECT_EQ(other.status().code(), absl::StatusCode::kNotFound);
  EXPECT_EQ(other.status().message(),
            "device 'tensord-1/cpu:1' is on node 'tensord-1', but this server "
            "is node 'tensord-0': a cluster client sends each node its own "
            "devices' names");
  for (const char* name : {"tensord-0/", "tensord-0/gpu", "tensord-0/cpu/1"}) {
    EXPECT_EQ(rt->FindDevice(name).status().code(),
              absl::StatusCode::kInvalidArgument)
        << name;
  }
  // A qualified name works wherever a device is named: creates, moves.
  const std::string s = rt->OpenSession("node").value();
  const int64_t dims[] = {2};
  auto t = rt->CreateFromData(s, "tensord-0/cpu:1", DType::kFloat32, dims,
                              std::vector<uint8_t>(8, 0), "");
  ASSERT_TRUE(t.ok()) << t.status();
  EXPECT_EQ(t->device, "cpu:1");
  EXPECT_TRUE(rt->To(s, t->handle, "tensord-0/cpu:0", false).ok());

  RuntimeOptions unnamed;
  auto plain = Runtime::Create(std::move(unnamed)).value();
  EXPECT_EQ(plain->node_name(), "");
  EXPECT_THAT(plain->FindDevice("tensord-0/cpu").status().message(),
              HasSubstr("but this server is unnamed (start it with "
                        "--node-name)"));
}

TEST(RuntimeNodeTest, NodeNamesAreChecked) {
  EXPECT_TRUE(CheckNodeName("tensord-0").ok());
  EXPECT_TRUE(CheckNodeName("gpu-node_7.example").ok());
  EXPECT_TRUE(CheckNodeName(std::string(63, 'a')).ok());
  for (const std::string& bad :
       {std::string(), std::string(64, 'a'), std::string("a/b"),
        std::string("a:b"), std::string("a b"), std::string("\xff")}) {
    EXPECT_EQ(CheckNodeName(bad).code(), absl::StatusCode::kInvalidArgument)
        << bad;
  }
  RuntimeOptions options;
  options.node_name = "no/slashes";
  auto rt = Runtime::Create(std::move(options));
  EXPECT_EQ(rt.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(rt.status().message(), HasSubstr("may hold only letters"));
}

// Issue 32: the executor runs PlanOp's plan: each op of an Execute is
// planned once by its family's planner (a binary op was twice: PlanOp,
// then BinaryOut; a conv2d twice, a loss twice, ...). Each family runs as
// a list of two ops; a composite's steps plan other families.
TEST_F(RuntimeTest, AnExecutePlansEachOpOnceAndAProgramOnlyWhenRegistered) {
  const TensorMeta x = Make<float>({1, 2, 2, 2}, {1, 2, 3, 4, 5, 6, 7, 8});
  const TensorMeta w = Make<float>({2, 2, 1, 1}, {1, 0, 0, 1});
  const TensorMeta m = Make<float>({2, 2}, {1, 2, 3, 4});
  const TensorMeta t = Make<int64_t>({2}, {0, 1});
  auto op = [](OpSpec::Kind kind, std::vector<uint64_t> handles) {
    OpSpec s;
    s.kind = kind;
    for (uint64_t h : handles) s.inputs.push_back(Operand::Handle(h));
    return s;
  };
  OpSpec binary = op(OpSpec::Kind::kBinary, {x.handle, x.handle});
  OpSpec unary = op(OpSpec::Kind::kUnary, {x.handle});
  unary.unary = UnaryOp::kExp;
  OpSpec reduce = op(OpSpec::Kind::kReduce, {x.handle});
  reduce.dim = 1;
  OpSpec softmax = op(OpSpec::Kind::kSoftmax, {x.handle});
  OpSpec permute = op(OpSpec::Kind::kPermute, {x.handle});
  permute.dims = {3, 2, 1, 0};
  OpSpec transpose = op(OpSpec::Kind::kTranspose, {x.handle});
  transpose.dim = 0;
  transpose.dim1 = 1;
  OpSpec narrow = op(OpSpec::Kind::kNarrow, {x.handle});
  narrow.dim = 1;
  narrow.length = 1;
  OpSpec conv = op(OpSpec::Kind::kConv2d, {x.handle, w.handle});
  OpSpec pool = op(OpSpec::Kind::kMaxPool2d, {x.handle});
  pool.window.kernel_size = {2};
  OpSpec adaptive = op(OpSpec::Kind::kAdaptiveAvgPool2d, {x.handle});
  adaptive.window.output_size = {1};
  OpSpec loss = op(OpSpec::Kind::kLoss, {m.handle, t.handle});
  loss.loss = LossKind::kCrossEntropy;
  OpSpec norm = op(OpSpec::Kind::kNorm, {x.handle});
  norm.train = true;
  const TensorMeta cond = Make<uint8_t>({2}, {1, 0});
  OpSpec where = op(OpSpec::Kind::kWhere, {cond.handle, m.handle});
  where.where_input = OpSpec::Bound{OpSpec::Bound::Kind::kTensor, {}};
  where.where_other =
      OpSpec::Bound{OpSpec::Bound::Kind::kScalar, Scalar::Int(0)};
  OpSpec clamp = op(OpSpec::Kind::kClamp, {x.handle});
  clamp.clamp_min = OpSpec::Bound{OpSpec::Bound::Kind::kScalar, Scalar::Int(2)};
  OpSpec reshape = op(OpSpec::Kind::kReshape, {x.handle});
  reshape.dims = {-1};
  OpSpec cat = op(OpSpec::Kind::kCat, {x.handle, x.handle});
  const std::vector<std::pair<Planner, std::vector<OpSpec>>> families = {
      {Planner::kBinary, {binary}},
      {Planner::kUnary, {unary}},
      {Planner::kMatMul,
       {op(OpSpec::Kind::kMatMul, {m.handle, m.handle}),
        op(OpSpec::Kind::kLinear, {m.handle, m.handle})}},
      {Planner::kReduce, {reduce}},
      {Planner::kSoftmax, {softmax}},
      {Planner::kPermute, {permute, transpose}},
      {Planner::kSlice, {narrow}},
      {Planner::kConv2d, {conv}},
      {Planner::kPool2d, {pool}},
      {Planner::kAdaptiveAvgPool2d, {adaptive}},
      {Planner::kLoss, {loss}},
      {Planner::kNorm, {norm}},
      {Planner::kWhere, {where}},
      {Planner::kClamp, {clamp}},
      {Planner::kReshape, {reshape}},
      {Planner::kCat, {cat}},
  };
  for (const auto& [family, ops] : families) {
    SCOPED_TRACE(::testing::Message()
                 << "planner " << static_cast<int>(family));
    std::vector<OpSpec> list = ops;
    list.insert(list.end(), ops.begin(), ops.end());  // each twice
    const uint32_t keep[] = {static_cast<uint32_t>(list.size() - 1)};
    const uint64_t before = PlanCalls(family);
    auto kept = rt_->Execute(session_, list, keep);
    ASSERT_TRUE(kept.ok()) << kept.status();
    EXPECT_EQ(PlanCalls(family) - before, list.size());
    ASSERT_TRUE(rt_->Release(session_, (*kept)[0].handle).ok());
    // A program plans the list when it is registered, and never again.
    const uint64_t before_register = PlanCalls(family);
    auto program = rt_->RegisterProgram(
        session_, {}, list, std::vector<uint32_t>(std::begin(keep), std::end(keep)),
        "");
    ASSERT_TRUE(program.ok()) << program.status();
    EXPECT_EQ(PlanCalls(family) - before_register, list.size());
    const uint64_t before_runs = PlanCalls(family);
    for (int run = 0; run < 2; ++run) {
      auto ran = rt_->RunProgram(session_, program->id, {});
      ASSERT_TRUE(ran.ok()) << ran.status();
      ASSERT_EQ(ran->size(), 1u);
      EXPECT_EQ((*ran)[0].shape, program->results[0].shape);
      EXPECT_EQ((*ran)[0].dtype, program->results[0].dtype);
      ASSERT_TRUE(rt_->Release(session_, (*ran)[0].handle).ok());
    }
    EXPECT_EQ(PlanCalls(family), before_runs);
    ASSERT_TRUE(rt_->ReleaseProgram(session_, program->id).ok());
  }
}

TEST_F(RuntimeTest, CreateFromDataAndRead) {
  TensorMeta m = Make<int32_t>({2, 2}, {1, 2, 3, 4}, "cpu:1");
  EXPECT_EQ(m.device, "cpu:1");
  EXPECT_EQ(m.dtype, DType::kInt32);
  EXPECT_EQ(m.shape.ToString(), "[2, 2]");
  EXPECT_EQ(m.nbytes, 16u);
  EXPECT_THAT(Fetch<int32_t>(m.handle), ElementsAre(1, 2, 3, 4));
  EXPECT_EQ(Held("cpu:1"), 16u);
  auto reader = rt_->OpenReader(session_, m.handle).value();
  uint8_t buf[8];
  EXPECT_TRUE(reader->Read(8, buf).ok());
  EXPECT_EQ(reader->Read(12, buf).code(), absl::StatusCode::kOutOfRange);
  EXPECT_EQ(reader->Read(~uint64_t{0}, buf).code(),
            absl::StatusCode::kOutOfRange);
  // The reader keeps the memory alive after a release.
  ASSERT_TRUE(rt_->Release(session_, m.handle).ok());
  int32_t tail[2];
  ASSERT_TRUE(reader->Read(8, {reinterpret_cast<uint8_t*>(tail), 8}).ok());
  EXPECT_EQ(tail[0], 3);
  EXPECT_EQ(Held("cpu:1"), 16u);
  reader.reset();
  EXPECT_EQ(Held("cpu:1"), 0u);
}

TEST_F(RuntimeTest, BadInput) {
  std::vector<uint8_t> eleven(11);
  auto r = rt_->CreateFromData(session_, "cpu", DType::kInt32,
                               std::vector<int64_t>{3}, eleven, "");
  EXPECT_EQ(r.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(r.status().message(),
            "data is 11 bytes but shape [3] of dtype int32 needs 12 bytes");
  r = rt_->CreateFromData(session_, "cpu", DType::kInt32,
                          std::vector<int64_t>{2, -3}, {}, "");
  EXPECT_EQ(r.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(r.status().message()),
              HasSubstr("dimension 1 is -3"));
  r = rt_->CreateFromData(session_, "cpu", DType::kInt32,
                          std::vector<int64_t>(9, 1), {}, "");
  EXPECT_THAT(std::string(r.status().message()),
              HasSubstr("rank 9 exceeds the maximum rank 8"));
  r = rt_->CreateFromData(session_, "cpu", DType::kFloat32,
                          std::vector<int64_t>{int64_t{1} << 62, 4}, {}, "");
  EXPECT_EQ(r.status().code(), absl::StatusCode::kInvalidArgument);
  r = rt_->CreateFromData(session_, "cpu", DType::kFloat32,
                          std::vector<int64_t>{int64_t{1} << 61, 2}, {}, "");
  EXPECT_EQ(r.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(r.status().message()), HasSubstr("too large"));
  r = rt_->CreateFromData(session_, "cpu", static_cast<DType>(99),
                          std::vector<int64_t>{1}, {}, "");
  EXPECT_EQ(r.status().code(), absl::StatusCode::kInvalidArgument);
  r = rt_->CreateFromData(session_, "tpu", DType::kFloat32,
                          std::vector<int64_t>{0}, {}, "");
  EXPECT_EQ(r.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(Held("cpu:0"), 0u);
  EXPECT_TRUE(rt_->ListTensors(session_).value().empty());
}

TEST_F(RuntimeTest, EmptyAndZeroDimTensors) {
  TensorMeta e = Make<float>({0, 3}, {});
  EXPECT_EQ(e.nbytes, 0u);
  EXPECT_TRUE(Fetch<float>(e.handle).empty());
  TensorMeta s = Make<float>({}, {2.5f});
  EXPECT_EQ(s.shape.rank(), 0);
  TensorMeta row = Make<float>({3}, {1, 2, 3});
  auto sum = rt_->Binary(session_, BinaryOp::kAdd, e.handle, row.handle);
  ASSERT_TRUE(sum.ok()) << sum.status();
  EXPECT_EQ(sum->shape.ToString(), "[0, 3]");
  auto scaled = rt_->Binary(session_, BinaryOp::kMul, s.handle, s.handle);
  ASSERT_TRUE(scaled.ok());
  EXPECT_EQ(scaled->shape.rank(), 0);
  EXPECT_THAT(Fetch<float>(scaled->handle), ElementsAre(6.25f));
}

TEST_F(RuntimeTest, Fills) {
  FillSpec arange;
  arange.kind = FillSpec::Kind::kArange;
  arange.start = 0;
  arange.step = 3;
  auto a = rt_->CreateFilled(session_, "cpu", DType::kInt64, {}, arange, 10,
                             "range");
  ASSERT_TRUE(a.ok()) << a.status();
  EXPECT_EQ(a->shape.ToString(), "[4]");  // ceil(10 / 3)
  EXPECT_EQ(a->tag, "range");
  EXPECT_THAT(Fetch<int64_t>(a->handle), ElementsAre(0, 3, 6, 9));
  arange.step = 0;
  EXPECT_EQ(
      rt_->CreateFilled(session_, "cpu", DType::kInt64, {}, arange, 10, "")
          .status()
          .code(),
      absl::StatusCode::kInvalidArgument);
  arange.step = -1;
  EXPECT_EQ(
      rt_->CreateFilled(session_, "cpu", DType::kInt64, {}, arange, 10, "")
          .status()
          .code(),
      absl::StatusCode::kInvalidArgument);
  FillSpec full;
  full.kind = FillSpec::Kind::kFull;
  full.value = 7;
  const int64_t dims[] = {2, 2};
  auto f =
      rt_->CreateFilled(session_, "cpu:1", DType::kFloat64, dims, full, 0, "");
  ASSERT_TRUE(f.ok());
  EXPECT_THAT(Fetch<double>(f->handle), ElementsAre(7, 7, 7, 7));
  FillSpec randn;
  randn.kind = FillSpec::Kind::kRandn;
  randn.seed = 5;
  auto r1 =
      rt_->CreateFilled(session_, "cpu", DType::kFloat32, dims, randn, 0, "")
          .value();
  auto r2 =
      rt_->CreateFilled(session_, "cpu:1", DType::kFloat32, dims, randn, 0, "")
          .value();
  EXPECT_EQ(Fetch<float>(r1.handle), Fetch<float>(r2.handle));
  auto bad =
      rt_->CreateFilled(session_, "cpu", DType::kInt32, dims, randn, 0, "");
  EXPECT_EQ(bad.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(std::string(bad.status().message()), HasSubstr("'Int'"));
  // float16 zeros are supported as storage.
  FillSpec zeros;
  auto h =
      rt_->CreateFilled(session_, "cpu", DType::kFloat16, dims, zeros, 0, "");
  ASSERT_TRUE(h.ok());
  EXPECT_EQ(h->nbytes, 8u);
}

TEST_F(RuntimeTest, CrossDeviceOpsFail) {
  TensorMeta a = Make<float>({2}, {1, 2}, "cpu:0");
  TensorMeta b = Make<float>({2}, {3, 4}, "cpu:1");
  const char kWant[] =
      "Expected all tensors to be on the same device, but found at least two "
      "devices, cpu:0 and cpu:1!";
  auto sum = rt_->Binary(session_, BinaryOp::kAdd, a.handle, b.handle);
  EXPECT_EQ(sum.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_EQ(sum.status().message(), kWant);
  auto mm = rt_->MatMul(session_, a.handle, b.handle);
  EXPECT_EQ(mm.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_EQ(mm.status().message(), kWant);
  // Checked before dtype or shape.
  TensorMeta c = Make<int64_t>({3}, {1, 2, 3}, "cpu:1");
  auto rev = rt_->MatMul(session_, c.handle, a.handle);
  EXPECT_EQ(rev.status().message(),
            "Expected all tensors to be on the same device, but found at "
            "least two devices, cpu:1 and cpu:0!");
}

TEST_F(RuntimeTest, ToSameHandleAndCopies) {
  TensorMeta a = Make<int32_t>({3}, {7, 8, 9}, "cpu:0");
  auto same = rt_->To(session_, a.handle, "cpu", false).value();
  EXPECT_EQ(same.handle, a.handle);
  EXPECT_EQ(same.device, "cpu:0");
  auto copy = rt_->To(session_, a.handle, "cpu:0", true).value();
  EXPECT_NE(copy.handle, a.handle);
  EXPECT_THAT(Fetch<int32_t>(copy.handle), ElementsAre(7, 8, 9));
  auto moved = rt_->To(session_, a.handle, "cpu:1", false).value();
  EXPECT_NE(moved.handle, a.handle);
  EXPECT_EQ(moved.device, "cpu:1");
  EXPECT_THAT(Fetch<int32_t>(moved.handle), ElementsAre(7, 8, 9));
  EXPECT_EQ(Held("cpu:0"), 24u);
  EXPECT_EQ(Held("cpu:1"), 12u);
  EXPECT_EQ(rt_->To(session_, a.handle, "cuda:0", false).status().code(),
            absl::StatusCode::kNotFound);
  EXPECT_EQ(rt_->ListTensors(session_).value().size(), 3u);
}

TEST_F(RuntimeTest, BinaryPromotion) {
  TensorMeta i = Make<int32_t>({3}, {1, 2, 3});
  TensorMeta l = Make<int64_t>({}, {10});
  TensorMeta f = Make<float>({}, {0.5f});
  TensorMeta d = Make<double>({3}, {1, 1, 1});
  TensorMeta b = Make<uint8_t>({3}, {1, 0, 1});
  // 0-d int64 does not widen an int32 tensor.
  auto il = rt_->Binary(session_, BinaryOp::kMul, i.handle, l.handle).value();
  EXPECT_EQ(il.dtype, DType::kInt32);
  EXPECT_THAT(Fetch<int32_t>(il.handle), ElementsAre(10, 20, 30));
  // 0-d float32 does make it float.
  auto ifl = rt_->Binary(session_, BinaryOp::kAdd, i.handle, f.handle).value();
  EXPECT_EQ(ifl.dtype, DType::kFloat32);
  EXPECT_THAT(Fetch<float>(ifl.handle), ElementsAre(1.5f, 2.5f, 3.5f));
  auto id = rt_->Binary(session_, BinaryOp::kSub, i.handle, d.handle).value();
  EXPECT_EQ(id.dtype, DType::kFloat64);
  EXPECT_THAT(Fetch<double>(id.handle), ElementsAre(0, 1, 2));
  // True division of integers gives float32.
  TensorMeta two = Make<int32_t>({}, {2});
  auto q = rt_->Binary(session_, BinaryOp::kDiv, i.handle, two.handle).value();
  EXPECT_EQ(q.dtype, DType::kFloat32);
  EXPECT_THAT(Fetch<float>(q.handle), ElementsAre(0.5f, 1.0f, 1.5f));
  auto bb = rt_->Binary(session_, BinaryOp::kDiv, b.handle, b.handle).value();
  EXPECT_EQ(bb.dtype, DType::kFloat32);
  auto bi = rt_->Binary(session_, BinaryOp::kAdd, b.handle, i.handle).value();
  EXPECT_EQ(bi.dtype, DType::kInt32);
  EXPECT_THAT(Fetch<int32_t>(bi.handle), ElementsAre(2, 2, 4));
  auto bsub = rt_->Binary(session_, BinaryOp::kSub, b.handle, b.handle);
  EXPECT_EQ(bsub.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(std::string(bsub.status().message()),
              HasSubstr("Subtraction, the `-` operator, with two bool tensors "
                        "is not supported"));
  TensorMeta four = Make<float>({4}, {1, 2, 3, 4});
  auto mismatch = rt_->Binary(session_, BinaryOp::kAdd, i.handle, four.handle);
  EXPECT_EQ(mismatch.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(mismatch.status().message()),
              HasSubstr("The size of tensor a (3) must match the size of "
                        "tensor b (4) at non-singleton dimension 0"));
  // Temporaries are gone after the calls.
  EXPECT_EQ(Held("cpu:0"), LiveBytes());
}

TEST_F(RuntimeTest, MatMulShapes) {
  TensorMeta v = Make<float>({3}, {1, 2, 3});
  TensorMeta w = Make<float>({3}, {4, 5, 6});
  TensorMeta m23 = Make<float>({2, 3}, {1, 2, 3, 4, 5, 6});
  TensorMeta m32 = Make<float>({3, 2}, {1, 0, 0, 1, 1, 1});
  auto dot = rt_->MatMul(session_, v.handle, w.handle).value();
  EXPECT_EQ(dot.shape.rank(), 0);
  EXPECT_THAT(Fetch<float>(dot.handle), ElementsAre(32));
  auto mv = rt_->MatMul(session_, m23.handle, v.handle).value();
  EXPECT_EQ(mv.shape.ToString(), "[2]");
  EXPECT_THAT(Fetch<float>(mv.handle), ElementsAre(14, 32));
  auto vm = rt_->MatMul(session_, v.handle, m32.handle).value();
  EXPECT_EQ(vm.shape.ToString(), "[2]");
  EXPECT_THAT(Fetch<float>(vm.handle), ElementsAre(4, 5));
  auto mm = rt_->MatMul(session_, m23.handle, m32.handle).value();
  EXPECT_EQ(mm.shape.ToString(), "[2, 2]");
  EXPECT_THAT(Fetch<float>(mm.handle), ElementsAre(4, 5, 10, 11));

  auto bad = rt_->MatMul(session_, m23.handle, m23.handle);
  EXPECT_EQ(bad.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(bad.status().message(),
            "mat1 and mat2 shapes cannot be multiplied (2x3 and 2x3)");
  TensorMeta s = Make<float>({}, {1});
  auto zero_d = rt_->MatMul(session_, s.handle, v.handle);
  EXPECT_EQ(zero_d.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(zero_d.status().message()),
              HasSubstr("need to be at least 1D"));
  TensorMeta li = Make<int64_t>({3}, {1, 2, 3});
  auto mixed = rt_->MatMul(session_, li.handle, v.handle);
  EXPECT_EQ(mixed.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(mixed.status().message()),
              HasSubstr("dot : expected both vectors to have same dtype, but "
                        "found Long and Float"));
  TensorMeta bv = Make<uint8_t>({2}, {1, 1});
  auto bm = rt_->MatMul(session_, bv.handle, bv.handle);
  EXPECT_EQ(bm.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_EQ(bm.status().message(), "\"dot\" not implemented for 'Bool'");
  // Empty inner dimension: zeros.
  TensorMeta e20 = Make<float>({2, 0}, {});
  TensorMeta e03 = Make<float>({0, 3}, {});
  auto ez = rt_->MatMul(session_, e20.handle, e03.handle).value();
  EXPECT_THAT(Fetch<float>(ez.handle), ElementsAre(0, 0, 0, 0, 0, 0));
}

TEST_F(RuntimeTest, MatMulBatchedBroadcast) {
  // a: [2, 1, 2, 2], b: [3, 2, 1] -> batch [2, 3], out [2, 3, 2, 1].
  std::vector<int64_t> av = {1, 2, 3, 4, 5, 6, 7, 8};
  std::vector<int64_t> bv = {1, 1, 1, -1, 2, 0};
  TensorMeta a = Make<int64_t>({2, 1, 2, 2}, av);
  TensorMeta b = Make<int64_t>({3, 2, 1}, bv);
  auto out = rt_->MatMul(session_, a.handle, b.handle);
  ASSERT_TRUE(out.ok()) << out.status();
  EXPECT_EQ(out->shape.ToString(), "[2, 3, 2, 1]");
  std::vector<int64_t> want;
  for (int p = 0; p < 2; ++p) {
    for (int q = 0; q < 3; ++q) {
      for (int i = 0; i < 2; ++i) {
        want.push_back(av[p * 4 + i * 2] * bv[q * 2] +
                       av[p * 4 + i * 2 + 1] * bv[q * 2 + 1]);
      }
    }
  }
  EXPECT_EQ(Fetch<int64_t>(out->handle), want);
  // Batched float with a shared rhs (stride 0).
  TensorMeta x = Make<double>({2, 1, 2}, {1, 2, 3, 4});
  TensorMeta y = Make<double>({2, 2}, {1, 0, 0, 2});
  auto xy = rt_->MatMul(session_, x.handle, y.handle).value();
  EXPECT_EQ(xy.shape.ToString(), "[2, 1, 2]");
  EXPECT_THAT(Fetch<double>(xy.handle), ElementsAre(1, 4, 3, 8));
  TensorMeta z = Make<double>({3, 2, 2}, std::vector<double>(12, 1));
  auto bad = rt_->MatMul(session_, x.handle, z.handle);
  EXPECT_EQ(bad.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(bad.status().message()),
              HasSubstr("The size of tensor a (2) must match the size of "
                        "tensor b (3) at non-singleton dimension 0"));
  EXPECT_EQ(Held("cpu:0"), LiveBytes());
}

TEST_F(RuntimeTest, SessionsIsolateHandles) {
  TensorMeta a = Make<float>({1}, {1});
  std::string other = rt_->OpenSession("other").value();
  auto stolen = rt_->GetTensor(other, a.handle);
  EXPECT_EQ(stolen.status().code(), absl::StatusCode::kNotFound);
  EXPECT_EQ(
      stolen.status().message(),
      absl::StrCat("unknown tensor handle ", a.handle, " in this session"));
  EXPECT_EQ(rt_->Release(other, a.handle).code(), absl::StatusCode::kNotFound);
  EXPECT_EQ(rt_->OpenReader(other, a.handle).status().code(),
            absl::StatusCode::kNotFound);
  auto unknown = rt_->ListTensors("nope");
  EXPECT_EQ(unknown.status().code(), absl::StatusCode::kNotFound);
  EXPECT_EQ(unknown.status().message(), "unknown session 'nope'");
  EXPECT_EQ(rt_->CreateFromData("nope", "cpu", DType::kFloat32,
                                std::vector<int64_t>{}, {}, "")
                .status()
                .code(),
            absl::StatusCode::kNotFound);
  EXPECT_EQ(rt_->session_count(), 2u);
  EXPECT_TRUE(rt_->GetTensor(session_, a.handle).ok());
}

TEST_F(RuntimeTest, ListAndRelease) {
  TensorMeta a = Make<float>({2}, {1, 2});
  auto tagged = rt_->CreateFromData(session_, "cpu:1", DType::kFloat32,
                                    std::vector<int64_t>{1},
                                    Bytes(std::vector<float>{3}), "w")
                    .value();
  auto list = rt_->ListTensors(session_).value();
  ASSERT_EQ(list.size(), 2u);
  EXPECT_EQ(list[1].tag, "w");
  EXPECT_EQ(list[1].device, "cpu:1");
  EXPECT_GE(list[0].age_ms, 0);
  auto devices = rt_->ListDevices();
  EXPECT_EQ(devices[0].live_tensors, 1u);
  EXPECT_EQ(devices[1].live_tensors, 1u);
  ASSERT_TRUE(rt_->Release(session_, a.handle).ok());
  EXPECT_EQ(rt_->Release(session_, a.handle).code(),
            absl::StatusCode::kNotFound);
  EXPECT_EQ(Held("cpu:0"), 0u);
  EXPECT_EQ(rt_->ListDevices()[0].live_tensors, 0u);
  auto stats = rt_->CloseSession(session_).value();
  EXPECT_EQ(stats.released_tensors, 1u);
  EXPECT_EQ(stats.released_bytes, 4u);
  EXPECT_EQ(Held("cpu:1"), 0u);
  EXPECT_EQ(rt_->ListDevices()[1].live_tensors, 0u);
  EXPECT_EQ(rt_->GetTensor(session_, tagged.handle).status().code(),
            absl::StatusCode::kNotFound);
  EXPECT_EQ(rt_->session_count(), 0u);
}

TEST_F(RuntimeTest, BudgetExhaustion) {
  Start(2, 1536 * kMiB);  // 1.5 GiB per host device, never touched in full
  FillSpec zeros;
  const int64_t half_gib[] = {512 * int64_t{kMiB}};
  auto held = rt_->CreateFilled(session_, "cpu:1", DType::kBool, half_gib,
                                zeros, 0, "");
  ASSERT_TRUE(held.ok()) << held.status();
  // Just over the 1 GiB that is left.
  const int64_t too_big[] = {256 * int64_t{kMiB} + 1};
  auto oom = rt_->CreateFilled(session_, "cpu:1", DType::kFloat32, too_big,
                               zeros, 0, "");
  EXPECT_EQ(oom.status().code(), absl::StatusCode::kResourceExhausted);
  EXPECT_THAT(std::string(oom.status().message()),
              HasSubstr("cpu:1 out of memory: tried to allocate 1.00 GiB "
                        "(1073741828 bytes); tensord holds 512.00 MiB of a "
                        "1.50 GiB budget, 1.00 GiB left"));
  EXPECT_EQ(Held("cpu:1"), 512 * kMiB);
  EXPECT_EQ(rt_->ListDevices()[1].allocation_failures, 1u);
  EXPECT_EQ(rt_->ListDevices()[0].allocation_failures, 0u);
  // A smaller allocation still fits.
  const int64_t small[] = {1024};
  EXPECT_TRUE(
      rt_->CreateFilled(session_, "cpu:1", DType::kFloat32, small, zeros, 0, "")
          .ok());
  // An upload past the budget fails in BeginUpload.
  EXPECT_EQ(rt_->BeginUpload(session_, "cpu:1", DType::kFloat32, too_big, "")
                .status()
                .code(),
            absl::StatusCode::kResourceExhausted);
  auto stats = rt_->CloseSession(session_).value();
  EXPECT_EQ(stats.released_tensors, 2u);
  EXPECT_EQ(Held("cpu:1"), 0u);
  EXPECT_EQ(Held("cpu:0"), 0u);
}

TEST_F(RuntimeTest, TemporariesAreAdmitted) {
  Start(1, 1000);
  // int32 [100] (400 bytes) + float32 0-d: result float32 [100] (400 bytes)
  // plus a 400-byte cast temporary exceeds 1000 with the 400 held.
  TensorMeta i = Make<int32_t>({100}, std::vector<int32_t>(100, 1));
  TensorMeta f = Make<float>({}, {1});
  EXPECT_EQ(Held("cpu"), 404u);
  auto r = rt_->Binary(session_, BinaryOp::kAdd, i.handle, f.handle);
  EXPECT_EQ(r.status().code(), absl::StatusCode::kResourceExhausted);
  EXPECT_EQ(Held("cpu"), 404u);
  TensorMeta j = Make<int32_t>({100}, std::vector<int32_t>(100, 2));
  auto ok = rt_->Binary(session_, BinaryOp::kAdd, i.handle, j.handle);
  EXPECT_EQ(ok.status().code(), absl::StatusCode::kResourceExhausted)
      << "404 + 400 held, 400 more is past 1000";
  ASSERT_TRUE(rt_->Release(session_, f.handle).ok());
  ASSERT_TRUE(rt_->Release(session_, j.handle).ok());
  auto sum = rt_->Binary(session_, BinaryOp::kAdd, i.handle, i.handle);
  ASSERT_TRUE(sum.ok()) << sum.status();
  EXPECT_EQ(Held("cpu"), 800u);
}

TEST_F(RuntimeTest, Upload) {
  const int64_t dims[] = {4};
  std::vector<int32_t> data = {1, 2, 3, 4};
  auto bytes = Bytes(data);
  {
    auto up =
        rt_->BeginUpload(session_, "cpu:1", DType::kInt32, dims, "up").value();
    EXPECT_EQ(up->expected_bytes(), 16u);
    EXPECT_EQ(Held("cpu:1"), 16u);
    ASSERT_TRUE(up->Append(bytes.subspan(0, 6)).ok());
    ASSERT_TRUE(up->Append(bytes.subspan(6)).ok());
    EXPECT_EQ(up->received_bytes(), 16u);
    auto m = up->Finish();
    ASSERT_TRUE(m.ok()) << m.status();
    EXPECT_EQ(m->tag, "up");
    EXPECT_EQ(m->device, "cpu:1");
    EXPECT_THAT(Fetch<int32_t>(m->handle), ElementsAre(1, 2, 3, 4));
    ASSERT_TRUE(rt_->Release(session_, m->handle).ok());
  }
  EXPECT_EQ(Held("cpu:1"), 0u);
  {
    auto up =
        rt_->BeginUpload(session_, "cpu:1", DType::kInt32, dims, "").value();
    ASSERT_TRUE(up->Append(bytes.subspan(0, 12)).ok());
    auto short_up = up->Finish();
    EXPECT_EQ(short_up.status().code(), absl::StatusCode::kInvalidArgument);
    EXPECT_THAT(std::string(short_up.status().message()),
                HasSubstr("received 12 of 16 bytes"));
    auto longer = up->Append(bytes.subspan(0, 8));
    EXPECT_EQ(longer.code(), absl::StatusCode::kInvalidArgument);
    EXPECT_THAT(std::string(longer.message()), HasSubstr("overflows"));
  }  // aborted: freed
  EXPECT_EQ(Held("cpu:1"), 0u);
  EXPECT_TRUE(rt_->ListTensors(session_).value().empty());
  auto unknown = rt_->BeginUpload("nope", "cpu", DType::kInt32, dims, "");
  EXPECT_EQ(unknown.status().code(), absl::StatusCode::kNotFound);
}

// AppendFrom / ReadWith: on a host device the source writes straight into
// the tensor's memory (one call), and reads see it in place.
TEST_F(RuntimeTest, AppendFromAndReadWithUseTheHostMemoryInPlace) {
  const int64_t dims[] = {4};
  auto up = rt_->BeginUpload(session_, "cpu:1", DType::kInt32, dims, "").value();
  int calls = 0;
  ASSERT_TRUE(up->Append(Bytes(std::vector<int32_t>{7})).ok());
  ASSERT_TRUE(up->AppendFrom(12, [&](std::span<uint8_t> dst, uint64_t at) {
                  ++calls;
                  EXPECT_EQ(at, 0u);
                  EXPECT_EQ(dst.size(), 12u);
                  const int32_t v[] = {8, 9, 10};
                  std::memcpy(dst.data(), v, sizeof(v));
                  return absl::OkStatus();
                }).ok());
  EXPECT_EQ(calls, 1);
  // Past the size: the same refusal as Append, and the source is not asked.
  const absl::Status over = up->AppendFrom(4, [&](std::span<uint8_t>, uint64_t) {
    ADD_FAILURE() << "filled past the end";
    return absl::OkStatus();
  });
  EXPECT_THAT(std::string(over.message()), HasSubstr("overflows"));
  auto m = up->Finish();
  ASSERT_TRUE(m.ok()) << m.status();
  EXPECT_THAT(Fetch<int32_t>(m->handle), ElementsAre(7, 8, 9, 10));

  auto reader = rt_->OpenReader(session_, m->handle).value();
  std::vector<int32_t> seen;
  ASSERT_TRUE(reader->ReadWith(4, 8, [&](std::span<const uint8_t> src, uint64_t at) {
                  EXPECT_EQ(at, 0u);
                  seen.resize(src.size() / 4);
                  std::memcpy(seen.data(), src.data(), src.size());
                  return absl::OkStatus();
                }).ok());
  EXPECT_THAT(seen, ElementsAre(8, 9));
  EXPECT_EQ(reader->ReadWith(8, 12, [](std::span<const uint8_t>, uint64_t) {
                     return absl::OkStatus();
                   }).code(),
            absl::StatusCode::kOutOfRange);
  // A failing consumer's status comes back as it is.
  EXPECT_EQ(reader->ReadWith(0, 4, [](std::span<const uint8_t>, uint64_t) {
                     return absl::DataLossError("client went away");
                   }).code(),
            absl::StatusCode::kDataLoss);
}

TEST_F(RuntimeTest, ConcurrentSessions) {
  constexpr int kThreads = 8, kIters = 200;
  std::vector<std::thread> threads;
  std::atomic<int> failures{0};
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&, t] {
      std::string s = rt_->OpenSession("worker").value();
      std::string device = t % 2 == 0 ? "cpu:0" : "cpu:1";
      for (int i = 0; i < kIters; ++i) {
        std::vector<int64_t> v = {i, t};
        auto a = rt_->CreateFromData(s, device, DType::kInt64,
                                     std::vector<int64_t>{2}, Bytes(v), "");
        if (!a.ok()) {
          ++failures;
          continue;
        }
        auto b = rt_->Binary(s, BinaryOp::kAdd, a->handle, a->handle);
        if (!b.ok()) {
          ++failures;
          continue;
        }
        auto r = rt_->OpenReader(s, b->handle);
        int64_t out[2] = {0, 0};
        if (!r.ok() ||
            !(*r)->Read(0, {reinterpret_cast<uint8_t*>(out), 16}).ok() ||
            out[0] != 2 * i || out[1] != 2 * t) {
          ++failures;
        }
        if (!rt_->Release(s, a->handle).ok()) ++failures;
        if (i % 2 == 0 && !rt_->Release(s, b->handle).ok()) ++failures;
      }
      if (!rt_->CloseSession(s).ok()) ++failures;
    });
  }
  for (std::thread& th : threads) th.join();
  EXPECT_EQ(failures.load(), 0);
  EXPECT_EQ(Held("cpu:0"), 0u);
  EXPECT_EQ(Held("cpu:1"), 0u);
  EXPECT_EQ(rt_->session_count(), 1u);
}

TEST(RuntimeDestructionTest, FreesEverything) {
  auto rt = Runtime::Create(HostOptions(2)).value();
  std::string s = rt->OpenSession("x").value();
  FillSpec ones;
  ones.kind = FillSpec::Kind::kOnes;
  const int64_t dims[] = {1000};
  ASSERT_TRUE(
      rt->CreateFilled(s, "cpu:1", DType::kFloat64, dims, ones, 0, "").ok());
  rt.reset();  // must not leak or crash (run under ASan to check the former)
}

}  // namespace
}  // namespace tensord::core

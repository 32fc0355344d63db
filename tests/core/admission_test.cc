// Issue 30: every byte a session causes is admitted before it is allocated,
// by core/runtime/admission.h, on every path: what fits exactly at a quota is
// admitted, one element more is refused with the quota's message, and a
// refused request leaves the session's bytes (and the device's) where they
// were.
#include "core/runtime/admission.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <memory>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "core/runtime/runtime.h"

namespace tensord::core {
namespace {

using ::testing::AllOf;
using ::testing::HasSubstr;
using ::testing::StartsWith;
using Kind = OpSpec::Kind;

constexpr int64_t kN = 1024;         // elements of the leaf
constexpr uint64_t kBytes = kN * 4;  // float32
constexpr uint64_t kElement = 4;

class AdmissionTest : public ::testing::Test {
 protected:
  void Start(uint64_t session_max_bytes, uint64_t budget = 64 << 20) {
    RuntimeOptions options;
    options.host_memory_budget = budget;
    options.session_max_bytes = session_max_bytes;
    auto rt = Runtime::Create(std::move(options));
    ASSERT_TRUE(rt.ok()) << rt.status();
    rt_ = std::move(*rt);
    session_ = rt_->OpenSession("admission").value();
  }

  absl::StatusOr<TensorMeta> Zeros(int64_t n) {
    FillSpec fill;
    fill.kind = FillSpec::Kind::kOnes;
    const int64_t dims[] = {n};
    return rt_->CreateFilled(session_, "cpu", DType::kFloat32, dims, fill, 0,
                             "");
  }

  uint64_t SessionBytes() const {
    for (const SessionInfo& s : rt_->ListSessions()) {
      if (session_.starts_with(s.id_prefix)) return s.bytes;
    }
    return 0;
  }
  uint64_t DeviceHeld() const {
    uint64_t held = 0;
    for (const DeviceStatus& d : rt_->ListDevices()) held += d.held_bytes;
    return held;
  }

  // A leaf of kN float32 ones that requires grad.
  uint64_t Leaf() {
    const uint64_t x = Zeros(kN).value().handle;
    OpSpec mark;
    mark.kind = Kind::kRequiresGrad;
    mark.requires_grad = true;
    mark.inputs = {Operand::Handle(x)};
    EXPECT_TRUE(rt_->Run(session_, mark).ok());
    return x;
  }

  // `n` chained exps of `x`, keeping the last: each result is saved by
  // ExpBackward0, so all of them stay alive with the graph.
  absl::StatusOr<std::vector<TensorMeta>> Exps(uint64_t x, int n) {
    std::vector<OpSpec> ops(n);
    for (int i = 0; i < n; ++i) {
      ops[i].kind = Kind::kUnary;
      ops[i].unary = UnaryOp::kExp;
      ops[i].inputs = {i == 0 ? Operand::Handle(x) : Operand::Result(i - 1)};
    }
    const uint32_t keep[] = {static_cast<uint32_t>(n - 1)};
    return rt_->Execute(session_, ops, keep);
  }

  std::unique_ptr<Runtime> rt_;
  std::string session_;
};

// The leaf and seven saved exps fill the quota exactly: admitted.
TEST_F(AdmissionTest, ExecuteWhoseSavedIntermediatesFitExactlyIsAdmitted) {
  Start(8 * kBytes);
  const uint64_t x = Leaf();
  auto kept = Exps(x, 7);
  ASSERT_TRUE(kept.ok()) << kept.status();
  EXPECT_EQ(SessionBytes(), 8 * kBytes);
  EXPECT_EQ(DeviceHeld(), 8 * kBytes);
}

// One element less of quota: the 7th exp (op #6) crosses it and is refused
// before it allocates; nothing of the Execute stays.
TEST_F(AdmissionTest, ExecuteOneElementOverIsRefusedAtTheOpThatCrosses) {
  Start(8 * kBytes - kElement);
  const uint64_t x = Leaf();
  const uint64_t before = SessionBytes();
  const uint64_t device_before = DeviceHeld();
  const AdmissionTotals totals_before = GetAdmissionTotals();
  auto kept = Exps(x, 7);
  ASSERT_EQ(kept.status().code(), absl::StatusCode::kResourceExhausted);
  EXPECT_THAT(
      std::string(kept.status().message()),
      AllOf(StartsWith("op #6 (exp"),
            HasSubstr("session memory quota exceeded (--session-max-bytes): "
                      "requested 4096 bytes; the session holds 28672 of its "
                      "limit of 32764 bytes (24576 bytes of them held by "
                      "autograd")));
  EXPECT_EQ(SessionBytes(), before);
  EXPECT_EQ(DeviceHeld(), device_before);
  // Refused before allocating: the 7th result was never allocated.
  EXPECT_EQ(GetAdmissionTotals().spent_bytes - totals_before.spent_bytes,
            6 * kBytes);
  // The session keeps working.
  EXPECT_TRUE(Exps(x, 6).ok());
}

// A kept result and a saved one that are the same buffer are charged once.
TEST_F(AdmissionTest, AResultKeptAndSavedIsChargedOnce) {
  Start(2 * kBytes);
  const uint64_t x = Leaf();
  auto kept = Exps(x, 1);
  ASSERT_TRUE(kept.ok()) << kept.status();
  EXPECT_EQ(SessionBytes(), 2 * kBytes);
}

// Intermediates nothing saves are freed as the list goes: a long chain
// without grad needs two results at a time.
TEST_F(AdmissionTest, UnsavedIntermediatesAreFreedAsTheListGoes) {
  Start(3 * kBytes);
  const uint64_t x = Zeros(kN).value().handle;
  auto kept = Exps(x, 20);
  ASSERT_TRUE(kept.ok()) << kept.status();
  EXPECT_EQ(SessionBytes(), 2 * kBytes);
}

// The unary path: the same admission, the same message.
TEST_F(AdmissionTest, RunAtTheEdge) {
  Start(2 * kBytes);
  const uint64_t x = Zeros(kN).value().handle;
  OpSpec exp;
  exp.kind = Kind::kUnary;
  exp.unary = UnaryOp::kExp;
  exp.inputs = {Operand::Handle(x)};
  auto fits = rt_->Run(session_, exp);
  ASSERT_TRUE(fits.ok()) << fits.status();
  ASSERT_TRUE(rt_->Release(session_, fits->handle).ok());

  Start(2 * kBytes - kElement);
  const uint64_t y = Zeros(kN).value().handle;
  exp.inputs = {Operand::Handle(y)};
  const uint64_t before = SessionBytes();
  auto refused = rt_->Run(session_, exp);
  ASSERT_EQ(refused.status().code(), absl::StatusCode::kResourceExhausted);
  EXPECT_THAT(std::string(refused.status().message()),
              HasSubstr("requested 4096 bytes; the session holds 4096 of its "
                        "limit of 8188 bytes"));
  EXPECT_EQ(SessionBytes(), before);
  EXPECT_EQ(DeviceHeld(), kBytes);
}

// Creates, fills and moves: admitted at the edge, refused one element over.
TEST_F(AdmissionTest, CreatesAtTheEdge) {
  Start(2 * kBytes);
  ASSERT_TRUE(Zeros(kN).ok());
  const int64_t dims[] = {kN};
  auto data = rt_->CreateFromData(session_, "cpu", DType::kFloat32, dims,
                                  std::vector<uint8_t>(kBytes, 0), "");
  ASSERT_TRUE(data.ok()) << data.status();
  EXPECT_EQ(SessionBytes(), 2 * kBytes);
  ASSERT_TRUE(rt_->Release(session_, data->handle).ok());

  const int64_t over[] = {kN + 1};
  auto refused = rt_->CreateFromData(session_, "cpu", DType::kFloat32, over,
                                     std::vector<uint8_t>(kBytes + 4, 0), "");
  ASSERT_EQ(refused.status().code(), absl::StatusCode::kResourceExhausted);
  EXPECT_THAT(std::string(refused.status().message()),
              HasSubstr("requested 4100 bytes; the session holds 4096 of its "
                        "limit of 8192 bytes"));
  EXPECT_EQ(Zeros(kN + 1).status().code(),
            absl::StatusCode::kResourceExhausted);
  EXPECT_EQ(SessionBytes(), kBytes);
  EXPECT_EQ(DeviceHeld(), kBytes);
}

TEST_F(AdmissionTest, ForcedCopyAtTheEdge) {
  Start(2 * kBytes);
  const uint64_t x = Zeros(kN).value().handle;
  auto copy = rt_->To(session_, x, "cpu", /*copy=*/true);
  ASSERT_TRUE(copy.ok()) << copy.status();
  auto refused = rt_->To(session_, x, "cpu", /*copy=*/true);
  ASSERT_EQ(refused.status().code(), absl::StatusCode::kResourceExhausted);
  EXPECT_EQ(SessionBytes(), 2 * kBytes);
  EXPECT_EQ(DeviceHeld(), 2 * kBytes);
}

// An upload's memory is admitted when the upload begins.
TEST_F(AdmissionTest, UploadAtTheEdge) {
  Start(2 * kBytes);
  ASSERT_TRUE(Zeros(kN).ok());
  const int64_t over[] = {kN + 1};
  auto refused = rt_->BeginUpload(session_, "cpu", DType::kFloat32, over, "");
  ASSERT_EQ(refused.status().code(), absl::StatusCode::kResourceExhausted);
  EXPECT_EQ(DeviceHeld(), kBytes);
  const int64_t fits[] = {kN};
  auto upload = rt_->BeginUpload(session_, "cpu", DType::kFloat32, fits, "");
  ASSERT_TRUE(upload.ok()) << upload.status();
  // While it is open its memory counts: nothing more fits.
  EXPECT_EQ(Zeros(1).status().code(), absl::StatusCode::kResourceExhausted);
  upload->reset();
  EXPECT_EQ(DeviceHeld(), kBytes);
  EXPECT_TRUE(Zeros(kN).ok());
}

// The device budget is admitted by the same function: a tensor that fits
// the budget exactly is allocated, one element more is refused.
TEST_F(AdmissionTest, DeviceBudgetAtTheEdge) {
  Start(/*session_max_bytes=*/0, /*budget=*/2 * kBytes);
  ASSERT_TRUE(Zeros(kN).ok());
  auto refused = Zeros(kN + 1);
  ASSERT_EQ(refused.status().code(), absl::StatusCode::kResourceExhausted);
  EXPECT_THAT(std::string(refused.status().message()), HasSubstr("cpu out of memory"));
  EXPECT_EQ(DeviceHeld(), kBytes);
  EXPECT_TRUE(Zeros(kN).ok());
}

// --- Backward and the optimizers' steps --------------------------------------
//
// Each case is set up under a quota and runs one request; the tests below
// run it at the quota it needs exactly and one element under.

class StepAdmissionTest : public AdmissionTest {
 public:
  absl::Status RunOp(OpSpec op) { return rt_->Run(session_, op).status(); }
  OpSpec On(Kind kind, std::vector<uint64_t> handles) {
    OpSpec op;
    op.kind = kind;
    for (uint64_t h : handles) op.inputs.push_back(Operand::Handle(h));
    return op;
  }
  // p = a leaf of kN elements; its grad: backward of sum(p), a tensor of
  // kN ones (the sum itself released).
  uint64_t LeafWithGrad() {
    const uint64_t p = Leaf();
    auto s = rt_->Run(session_, On(Kind::kReduce, {p}));
    EXPECT_TRUE(s.ok()) << s.status();
    EXPECT_TRUE(RunOp(On(Kind::kBackward, {s->handle})).ok());
    EXPECT_TRUE(rt_->Release(session_, s->handle).ok());
    return p;
  }

  // Starts under `quota`, sets `which` up and runs its request: the
  // status, with the session's bytes before and after it.
  struct Outcome {
    absl::Status status;
    uint64_t before = 0, after = 0;
  };
  Outcome Try(const std::string& which, uint64_t quota) {
    Start(quota);
    Outcome o;
    OpSpec op;
    if (which == "backward") {
      // sum(exp(p)).backward(): ExpBackward0 multiplies the incoming grad
      // by the exp it saved, and the leaf's grad is made.
      const uint64_t p = Leaf();
      OpSpec exp = On(Kind::kUnary, {p});
      exp.unary = UnaryOp::kExp;
      const uint64_t y = rt_->Run(session_, exp).value().handle;
      const uint64_t s =
          rt_->Run(session_, On(Kind::kReduce, {y})).value().handle;
      op = On(Kind::kBackward, {s});
    } else if (which == "sgd") {
      const uint64_t p = LeafWithGrad();
      const uint64_t buf = Zeros(kN).value().handle;
      op = On(Kind::kOptimizerStep, {p, buf});
      op.optimizer.kind = OptimizerKind::kSgd;
      op.optimizer.lr = 0.1;
      op.optimizer.momentum = 0.9;
      op.optimizer.step = 2;  // buf = 0.9 buf + g: a temporary for g
    } else {
      const uint64_t p = LeafWithGrad();
      const uint64_t m = Zeros(kN).value().handle;
      const uint64_t v = Zeros(kN).value().handle;
      op = On(Kind::kOptimizerStep, {p, m, v});
      op.optimizer.kind = OptimizerKind::kAdam;
    }
    o.before = SessionBytes();
    o.status = RunOp(op);
    o.after = SessionBytes();
    return o;
  }
};

// Fits at `fit` bytes; at one element less it is refused, for the quota,
// at a buffer of kN elements, and the session's bytes are where they were.
void ExpectEdge(StepAdmissionTest& t, const std::string& which, uint64_t fit) {
  SCOPED_TRACE(which);
  const StepAdmissionTest::Outcome fits = t.Try(which, fit);
  EXPECT_TRUE(fits.status.ok()) << fits.status;
  const StepAdmissionTest::Outcome refused = t.Try(which, fit - kElement);
  ASSERT_EQ(refused.status.code(), absl::StatusCode::kResourceExhausted)
      << refused.status;
  EXPECT_THAT(std::string(refused.status.message()),
              AllOf(HasSubstr("session memory quota exceeded "
                              "(--session-max-bytes): requested 4096 bytes"),
                    HasSubstr(absl::StrCat("of its limit of ", fit - kElement,
                                           " bytes"))));
  EXPECT_EQ(refused.after, refused.before);
}

// sum(exp(p)).backward() with p, exp(p) (kept and saved: one buffer) and
// the sum held: the seed (4 bytes), SumBackward0's grad of kN elements and
// ExpBackward0's product, p's grad, are admitted as backward makes them.
TEST_F(StepAdmissionTest, BackwardGradientsAtTheEdge) {
  ExpectEdge(*this, "backward", 2 * kBytes + 4 + 4 + 2 * kBytes);
}

// SGD with momentum (step 2) over p, its grad and the momentum buffer: the
// step's temporaries (one of kN elements, one scalar) are admitted.
TEST_F(StepAdmissionTest, SgdMomentumStepAtTheEdge) {
  ExpectEdge(*this, "sgd", 3 * kBytes + kBytes + 4);
}

// Adam over p, its grad, exp_avg and exp_avg_sq: six temporaries of kN
// elements are alive at once (the step's first and second moments' terms,
// the denominator, the ratio and the update) and one scalar.
TEST_F(StepAdmissionTest, AdamStepAtTheEdge) {
  ExpectEdge(*this, "adam", 4 * kBytes + 6 * kBytes + 4);
}

}  // namespace
}  // namespace tensord::core

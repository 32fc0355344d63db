// Leases, quotas, the request log and cancellation in core: sessions whose
// lease runs out are reaped and every byte is freed; quotas are admitted
// before allocation; request ids are remembered within a bounded window;
// a cancelled Execute stops and frees what it made.
#include <atomic>
#include <chrono>
#include <cstring>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "absl/synchronization/mutex.h"
#include "core/runtime/handle_table.h"
#include "core/runtime/runtime.h"

namespace tensord::core {
namespace {

using ::testing::AllOf;
using ::testing::HasSubstr;
using std::chrono::milliseconds;

uint64_t HeldBytes(const Runtime& rt) {
  uint64_t held = 0;
  for (const DeviceStatus& d : rt.ListDevices()) held += d.held_bytes;
  return held;
}

std::unique_ptr<Runtime> MakeRuntime(RuntimeOptions options) {
  options.host_memory_budget = 64 << 20;
  options.reap_interval = milliseconds(20);
  auto rt = Runtime::Create(std::move(options));
  EXPECT_TRUE(rt.ok()) << rt.status();
  return std::move(*rt);
}

absl::StatusOr<TensorMeta> Zeros(Runtime& rt, const std::string& session,
                                 int64_t n) {
  FillSpec fill;
  fill.kind = FillSpec::Kind::kZeros;
  const int64_t dims[] = {n};
  return rt.CreateFilled(session, "cpu", DType::kFloat32, dims, fill, 0, "");
}

// Polls `done` every 10 ms for at most `limit`.
template <typename F>
bool Eventually(F done, milliseconds limit = milliseconds(1000)) {
  const auto deadline = std::chrono::steady_clock::now() + limit;
  while (std::chrono::steady_clock::now() < deadline) {
    if (done()) return true;
    std::this_thread::sleep_for(milliseconds(10));
  }
  return done();
}

TEST(LeaseTest, ExpiredSessionIsReapedAndItsMemoryFreed) {
  absl::Mutex mu;
  std::vector<ExpiredSessionInfo> reaped;
  RuntimeOptions options;
  options.on_session_expired = [&](const ExpiredSessionInfo& info) {
    absl::MutexLock lock(&mu);
    reaped.push_back(info);
  };
  auto rt = MakeRuntime(std::move(options));
  auto lease = rt->OpenSession("short", milliseconds(300));
  ASSERT_TRUE(lease.ok()) << lease.status();
  EXPECT_EQ(lease->ttl, milliseconds(300));
  // The clock starts before the last call that renews the lease, so however
  // slowly a loaded machine runs the lines between, the session may not be
  // reaped sooner than one whole lease after `start`.
  const auto start = std::chrono::steady_clock::now();
  ASSERT_TRUE(Zeros(*rt, lease->id, 1024).ok());
  ASSERT_TRUE(Zeros(*rt, lease->id, 256).ok());
  EXPECT_EQ(HeldBytes(*rt), (1024 + 256) * 4u);

  // The reaper drops the session, frees its tensors, then reports it: wait
  // for the report, the last step.
  ASSERT_TRUE(Eventually(
      [&] {
        absl::MutexLock lock(&mu);
        return !reaped.empty();
      },
      milliseconds(10000)));
  const auto took = std::chrono::steady_clock::now() - start;
  EXPECT_GE(took, milliseconds(300));  // not before the lease ran out
  EXPECT_EQ(rt->session_count(), 0u);
  EXPECT_EQ(HeldBytes(*rt), 0u);
  EXPECT_EQ(rt->KeepAlive(lease->id).status().code(),
            absl::StatusCode::kNotFound);
  absl::MutexLock lock(&mu);
  ASSERT_EQ(reaped.size(), 1u);
  EXPECT_EQ(reaped[0].id_prefix, lease->id.substr(0, 8));
  EXPECT_EQ(reaped[0].client_name, "short");
  EXPECT_EQ(reaped[0].released_tensors, 2u);
  EXPECT_EQ(reaped[0].released_bytes, (1024 + 256) * 4u);
}

TEST(LeaseTest, CallsAndKeepAliveRenewTheLease) {
  auto rt = MakeRuntime({});
  // A lease well above the 50 ms renewal period, so a loaded machine that
  // oversleeps does not let a renewed session lapse.
  auto kept = rt->OpenSession("kept", milliseconds(400));
  auto used = rt->OpenSession("used", milliseconds(400));
  auto idle = rt->OpenSession("idle", milliseconds(400));
  ASSERT_TRUE(kept.ok() && used.ok() && idle.ok());
  ASSERT_TRUE(Zeros(*rt, used->id, 16).ok());
  for (int i = 0; i < 20; ++i) {  // >= 1 s, more than twice the lease
    std::this_thread::sleep_for(milliseconds(50));
    ASSERT_TRUE(rt->KeepAlive(kept->id).ok()) << i;
    ASSERT_TRUE(rt->ListTensors(used->id).ok()) << i;
  }
  EXPECT_EQ(rt->KeepAlive(idle->id).status().code(),
            absl::StatusCode::kNotFound);
  EXPECT_EQ(rt->session_count(), 2u);
}

TEST(LeaseTest, TtlIsClampedAndZeroNeverExpires) {
  RuntimeOptions options;
  options.session_ttl = milliseconds(5000);
  options.min_session_ttl = milliseconds(100);
  options.max_session_ttl = milliseconds(60000);
  auto rt = MakeRuntime(std::move(options));
  EXPECT_EQ(rt->OpenSession("a", milliseconds(0))->ttl, milliseconds(5000));
  EXPECT_EQ(rt->OpenSession("b", milliseconds(1))->ttl, milliseconds(100));
  EXPECT_EQ(rt->OpenSession("c", milliseconds(1) * 10'000'000)->ttl,
            milliseconds(60000));
  EXPECT_EQ(*rt->KeepAlive(*rt->OpenSession("d")), milliseconds(5000));

  auto forever = MakeRuntime({});  // session_ttl 0: never expires
  auto s = forever->OpenSession("x", milliseconds(0));
  ASSERT_TRUE(s.ok());
  EXPECT_EQ(s->ttl, milliseconds(0));
  std::this_thread::sleep_for(milliseconds(60));
  EXPECT_EQ(forever->ReapExpiredSessions(), 0u);
  EXPECT_TRUE(forever->KeepAlive(s->id).ok());
}

TEST(QuotaTest, SessionBytesAreAdmittedBeforeAllocation) {
  RuntimeOptions options;
  options.session_max_bytes = 4096;
  auto rt = MakeRuntime(std::move(options));
  const std::string s = *rt->OpenSession("q");
  const std::string other = *rt->OpenSession("other");
  ASSERT_TRUE(Zeros(*rt, s, 768).ok());  // 3072 bytes
  auto over = Zeros(*rt, s, 512);        // 2048 more: over 4096
  ASSERT_EQ(over.status().code(), absl::StatusCode::kResourceExhausted);
  EXPECT_THAT(over.status().message(),
              AllOf(HasSubstr("--session-max-bytes"),
                    HasSubstr("requested 2048 bytes"),
                    HasSubstr("holds 3072"), HasSubstr("limit of 4096")));
  EXPECT_EQ(HeldBytes(*rt), 3072u);  // nothing was allocated
  // Uploads and moves are admitted the same way.
  const int64_t dims[] = {512};
  EXPECT_EQ(rt->BeginUpload(s, "cpu", DType::kFloat32, dims, "").status().code(),
            absl::StatusCode::kResourceExhausted);
  // An op's result counts too: x + x would make 3072 more bytes.
  auto x = rt->ListTensors(s);
  ASSERT_TRUE(x.ok());
  auto sum = rt->Binary(s, BinaryOp::kAdd, (*x)[0].handle, (*x)[0].handle);
  EXPECT_EQ(sum.status().code(), absl::StatusCode::kResourceExhausted);
  EXPECT_EQ(HeldBytes(*rt), 3072u);
  // The quota is per session; releasing makes room again.
  EXPECT_TRUE(Zeros(*rt, other, 768).ok());
  ASSERT_TRUE(rt->Release(s, (*x)[0].handle).ok());
  EXPECT_TRUE(Zeros(*rt, s, 1024).ok());
}

TEST(QuotaTest, SessionTensorCount) {
  RuntimeOptions options;
  options.session_max_tensors = 2;
  auto rt = MakeRuntime(std::move(options));
  const std::string s = *rt->OpenSession("q");
  ASSERT_TRUE(Zeros(*rt, s, 1).ok());
  ASSERT_TRUE(Zeros(*rt, s, 1).ok());
  auto third = Zeros(*rt, s, 1);
  ASSERT_EQ(third.status().code(), absl::StatusCode::kResourceExhausted);
  EXPECT_THAT(third.status().message(),
              AllOf(HasSubstr("--session-max-tensors"),
                    HasSubstr("requested 1 more tensor"), HasSubstr("holds 2"),
                    HasSubstr("limit of 2")));
  EXPECT_EQ(HeldBytes(*rt), 8u);
}

TEST(QuotaTest, MaxSessions) {
  RuntimeOptions options;
  options.max_sessions = 2;
  auto rt = MakeRuntime(std::move(options));
  const std::string a = *rt->OpenSession("a");
  ASSERT_TRUE(rt->OpenSession("b").ok());
  auto c = rt->OpenSession("c");
  ASSERT_EQ(c.status().code(), absl::StatusCode::kResourceExhausted);
  EXPECT_THAT(c.status().message(),
              AllOf(HasSubstr("too many sessions"), HasSubstr("2 are open"),
                    HasSubstr("--max-sessions")));
  ASSERT_TRUE(rt->CloseSession(a).ok());
  EXPECT_TRUE(rt->OpenSession("c").ok());
}

TEST(LimitTest, MaxTensorBytes) {
  RuntimeOptions options;
  options.max_tensor_bytes = 1024;
  auto rt = MakeRuntime(std::move(options));
  const std::string s = *rt->OpenSession("l");
  EXPECT_TRUE(Zeros(*rt, s, 256).ok());
  auto big = Zeros(*rt, s, 257);
  ASSERT_EQ(big.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(big.status().message(),
              AllOf(HasSubstr("1028 bytes"), HasSubstr("--max-tensor-bytes")));
}

TEST(RequestLogTest, RemembersFinishedRequestsOnly) {
  auto rt = MakeRuntime({});
  const std::string s = *rt->OpenSession("r");
  auto first = rt->BeginRequest(s, "id-1");
  ASSERT_TRUE(first.ok());
  EXPECT_FALSE(first->has_value());  // ours to run
  // A retry while the first runs is told to come back.
  EXPECT_EQ(rt->BeginRequest(s, "id-1").status().code(),
            absl::StatusCode::kUnavailable);
  const std::string response = "response bytes";
  rt->EndRequest(s, "id-1", &response);
  auto again = rt->BeginRequest(s, "id-1");
  ASSERT_TRUE(again.ok());
  ASSERT_TRUE(again->has_value());
  EXPECT_EQ(**again, response);
  // A failed request is forgotten: its retry runs again.
  ASSERT_FALSE(rt->BeginRequest(s, "id-2")->has_value());
  rt->EndRequest(s, "id-2", nullptr);
  EXPECT_FALSE(rt->BeginRequest(s, "id-2")->has_value());
  // Ids are per session, and checked.
  const std::string other = *rt->OpenSession("other");
  EXPECT_FALSE(rt->BeginRequest(other, "id-1")->has_value());
  EXPECT_EQ(rt->BeginRequest(s, "").status().code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(rt->BeginRequest(s, std::string(65, 'x')).status().code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(rt->BeginRequest("nope", "id").status().code(),
            absl::StatusCode::kNotFound);
}

TEST(RequestLogTest, WindowIsBounded) {
  HandleTableOptions options;
  options.dedupe_entries = 4;
  HandleTable table(options);
  const std::string s = table.OpenSession("w");
  const std::string r = "r";
  for (int i = 0; i < 10; ++i) {
    const std::string id = "id-" + std::to_string(i);
    ASSERT_FALSE(table.BeginRequest(s, id)->has_value());
    table.EndRequest(s, id, &r);
  }
  // The newest ids are remembered; the oldest fell out of the window.
  EXPECT_TRUE(table.BeginRequest(s, "id-9")->has_value());
  EXPECT_FALSE(table.BeginRequest(s, "id-0")->has_value());
}

TEST(CancelTest, CancelledExecuteStopsAndFreesEverything) {
  auto rt = MakeRuntime({});
  const std::string s = *rt->OpenSession("c");
  auto x = Zeros(*rt, s, 1000);
  ASSERT_TRUE(x.ok());
  const uint64_t baseline = HeldBytes(*rt);
  std::vector<OpSpec> ops;
  for (uint32_t i = 0; i < 10; ++i) {
    OpSpec op;
    op.kind = OpSpec::Kind::kBinary;
    op.binary = BinaryOp::kAdd;
    op.inputs = {i == 0 ? Operand::Handle(x->handle) : Operand::Result(i - 1),
                 Operand::Handle(x->handle)};
    ops.push_back(op);
  }
  const uint32_t keep[] = {9};
  int polls = 0;
  auto result = rt->Execute(s, ops, keep, [&] { return ++polls > 4; });
  ASSERT_EQ(result.status().code(), absl::StatusCode::kCancelled);
  EXPECT_THAT(result.status().message(), HasSubstr("before op #4 of 10"));
  EXPECT_EQ(polls, 5);  // it stopped at once
  EXPECT_EQ(HeldBytes(*rt), baseline);
  EXPECT_EQ(rt->ListTensors(s)->size(), 1u);
  // Not cancelled: it runs to the end.
  EXPECT_TRUE(rt->Execute(s, ops, keep, [] { return false; }).ok());
}

}  // namespace
}  // namespace tensord::core

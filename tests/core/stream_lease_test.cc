// The lease rule of issue 14 in core: every message of a stream renews its
// session (Upload::Append, Reader::Read), a call in progress (CallScope)
// pins it, a stalled stream lets the lease run out and lets go of its
// memory at once; and the client-facing argument rules next to it (BOOL
// bytes, bounded strings, no silent defaults, Execute naming the op that
// passes a quota).
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <chrono>
#include <cstdint>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "core/runtime/runtime.h"

namespace tensord::core {
namespace {

using std::chrono::milliseconds;
using ::testing::AllOf;
using ::testing::HasSubstr;
using ::testing::StartsWith;

uint64_t HeldBytes(const Runtime& rt) {
  uint64_t held = 0;
  for (const DeviceStatus& d : rt.ListDevices()) held += d.held_bytes;
  return held;
}

std::unique_ptr<Runtime> MakeRuntime(RuntimeOptions options = {}) {
  options.host_memory_budget = 64 << 20;
  options.reap_interval = milliseconds(10);
  auto rt = Runtime::Create(std::move(options));
  EXPECT_TRUE(rt.ok()) << rt.status();
  return std::move(*rt);
}

template <typename F>
bool Eventually(F done, milliseconds limit = milliseconds(5000)) {
  const auto deadline = std::chrono::steady_clock::now() + limit;
  while (std::chrono::steady_clock::now() < deadline) {
    if (done()) return true;
    std::this_thread::sleep_for(milliseconds(5));
  }
  return done();
}

absl::StatusOr<TensorMeta> Bytes(Runtime& rt, const std::string& session,
                                 DType dtype, std::vector<uint8_t> data,
                                 std::string_view tag = "") {
  const int64_t dims[] = {static_cast<int64_t>(data.size() / 4)};
  return rt.CreateFromData(session, "cpu", dtype, dims, data, tag);
}

TEST(StreamLeaseTest, EachUploadChunkRenewsTheLease) {
  auto rt = MakeRuntime();
  auto lease = rt->OpenSession("slow uploader", milliseconds(200));
  ASSERT_TRUE(lease.ok());
  const int64_t dims[] = {12};
  auto upload = rt->BeginUpload(lease->id, "cpu", DType::kFloat32, dims, "");
  ASSERT_TRUE(upload.ok()) << upload.status();
  const std::vector<uint8_t> chunk(4, 0);
  // 12 chunks 50 ms apart: three leases long, with no other call.
  for (int i = 0; i < 12; ++i) {
    std::this_thread::sleep_for(milliseconds(50));
    ASSERT_TRUE((*upload)->Append(chunk).ok()) << "chunk " << i;
  }
  auto meta = (*upload)->Finish();
  ASSERT_TRUE(meta.ok()) << meta.status();
  EXPECT_EQ(rt->session_count(), 1u);
}

TEST(StreamLeaseTest, EachReadRenewsTheLease) {
  auto rt = MakeRuntime();
  auto lease = rt->OpenSession("slow fetcher", milliseconds(200));
  ASSERT_TRUE(lease.ok());
  auto t = Bytes(*rt, lease->id, DType::kFloat32, std::vector<uint8_t>(48));
  ASSERT_TRUE(t.ok());
  auto reader = rt->OpenReader(lease->id, t->handle);
  ASSERT_TRUE(reader.ok());
  uint8_t byte[4];
  for (int i = 0; i < 12; ++i) {
    std::this_thread::sleep_for(milliseconds(50));
    ASSERT_TRUE((*reader)->Read(i * 4, byte).ok()) << "read " << i;
  }
  EXPECT_TRUE(rt->GetTensor(lease->id, t->handle).ok());
}

TEST(StreamLeaseTest, StalledUploadLetsTheLeaseRunOutAndFreesItsMemory) {
  auto rt = MakeRuntime();
  auto lease = rt->OpenSession("stalled", milliseconds(150));
  ASSERT_TRUE(lease.ok());
  const int64_t dims[] = {1 << 20};
  auto upload = rt->BeginUpload(lease->id, "cpu", DType::kFloat32, dims, "");
  ASSERT_TRUE(upload.ok());
  ASSERT_TRUE((*upload)->Append(std::vector<uint8_t>(1024, 1)).ok());
  EXPECT_EQ(HeldBytes(*rt), 4u << 20);
  // The stream is still open (the Upload lives) but sends nothing.
  ASSERT_TRUE(Eventually([&] { return HeldBytes(*rt) == 0; }));
  EXPECT_EQ(rt->session_count(), 0u);
  absl::Status next = (*upload)->Append(std::vector<uint8_t>(4, 0));
  EXPECT_EQ(next.code(), absl::StatusCode::kNotFound);
  EXPECT_THAT(std::string(next.message()),
              AllOf(HasSubstr(lease->id.substr(0, 8)),
                    HasSubstr("lease of 150 ms ran out")));
  EXPECT_EQ((*upload)->Finish().status().code(), absl::StatusCode::kNotFound);
}

TEST(StreamLeaseTest, StalledReaderLetsGoOfItsTensorWhenTheSessionEnds) {
  auto rt = MakeRuntime();
  auto lease = rt->OpenSession("stalled", milliseconds(150));
  ASSERT_TRUE(lease.ok());
  auto t = Bytes(*rt, lease->id, DType::kFloat32, std::vector<uint8_t>(4096));
  ASSERT_TRUE(t.ok());
  auto reader = rt->OpenReader(lease->id, t->handle);
  ASSERT_TRUE(reader.ok());
  ASSERT_TRUE(rt->Release(lease->id, t->handle).ok());
  EXPECT_EQ(HeldBytes(*rt), 4096u);  // the reader keeps it past a release
  ASSERT_TRUE(Eventually([&] { return HeldBytes(*rt) == 0; }));
  uint8_t byte[4];
  EXPECT_EQ((*reader)->Read(0, byte).code(), absl::StatusCode::kNotFound);
}

TEST(StreamLeaseTest, CloseSessionEndsItsOpenStreams) {
  auto rt = MakeRuntime();
  auto lease = rt->OpenSession("closing", milliseconds(0));
  ASSERT_TRUE(lease.ok());
  const int64_t dims[] = {256};
  auto upload = rt->BeginUpload(lease->id, "cpu", DType::kFloat32, dims, "");
  ASSERT_TRUE(upload.ok());
  ASSERT_TRUE(rt->CloseSession(lease->id).ok());
  EXPECT_EQ(HeldBytes(*rt), 0u);
  absl::Status next = (*upload)->Append(std::vector<uint8_t>(4, 0));
  EXPECT_EQ(next.code(), absl::StatusCode::kNotFound);
}

TEST(StreamLeaseTest, ACallsReaderIsNotTiedToTheSession) {
  auto rt = MakeRuntime();
  auto lease = rt->OpenSession("unary read", milliseconds(0));
  ASSERT_TRUE(lease.ok());
  auto t = Bytes(*rt, lease->id, DType::kFloat32, std::vector<uint8_t>(64, 7));
  ASSERT_TRUE(t.ok());
  // A unary Read's reader (the call's pin keeps the session): closing the
  // session does not cut the call short; the memory goes with the reader.
  auto reader = rt->OpenReader(lease->id, t->handle, Runtime::ReaderUse::kCall);
  ASSERT_TRUE(reader.ok());
  ASSERT_TRUE(rt->CloseSession(lease->id).ok());
  uint8_t bytes[4] = {};
  EXPECT_TRUE((*reader)->Read(60, bytes).ok());
  EXPECT_EQ(bytes[3], 7);
  EXPECT_EQ(HeldBytes(*rt), 64u);
  reader->reset();
  EXPECT_EQ(HeldBytes(*rt), 0u);
}

TEST(StreamLeaseTest, ACallInProgressPinsItsSession) {
  auto rt = MakeRuntime();
  auto lease = rt->OpenSession("busy", milliseconds(100));
  ASSERT_TRUE(lease.ok());
  {
    auto call = rt->BeginCall(lease->id);
    ASSERT_TRUE(call.ok());
    std::this_thread::sleep_for(milliseconds(300));  // three leases
    EXPECT_EQ(rt->ReapExpiredSessions(), 0u);
    EXPECT_EQ(rt->session_count(), 1u);
  }
  // Ended just now, so renewed just now: a whole lease is left.
  EXPECT_EQ(rt->ReapExpiredSessions(), 0u);
  EXPECT_TRUE(Eventually([&] { return rt->session_count() == 0; }));
  EXPECT_EQ(rt->BeginCall(lease->id).status().code(),
            absl::StatusCode::kNotFound);
}

TEST(ArgumentRulesTest, BoolBytesMustBeZeroOrOne) {
  auto rt = MakeRuntime();
  auto s = rt->OpenSession("bools", milliseconds(0));
  ASSERT_TRUE(s.ok());
  const int64_t dims[] = {4};
  const std::vector<uint8_t> bad = {0, 1, 2, 255};
  auto created = rt->CreateFromData(s->id, "cpu", DType::kBool, dims, bad, "");
  EXPECT_EQ(created.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(created.status().message()),
              HasSubstr("bool data must be 0 or 1 in every byte; byte 2 is 2"));
  const std::vector<uint8_t> good = {0, 1, 1, 0};
  EXPECT_TRUE(
      rt->CreateFromData(s->id, "cpu", DType::kBool, dims, good, "").ok());

  auto upload = rt->BeginUpload(s->id, "cpu", DType::kBool, dims, "");
  ASSERT_TRUE(upload.ok());
  ASSERT_TRUE((*upload)->Append(std::vector<uint8_t>{1, 0}).ok());
  absl::Status second = (*upload)->Append(std::vector<uint8_t>{1, 7});
  EXPECT_EQ(second.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(second.message()), HasSubstr("byte 3 is 7"));

  // AppendFrom checks the bytes where they landed, after the copy.
  auto from = rt->BeginUpload(s->id, "cpu", DType::kBool, dims, "");
  ASSERT_TRUE(from.ok());
  absl::Status filled =
      (*from)->AppendFrom(4, [](std::span<uint8_t> dst, uint64_t) {
        for (uint8_t& b : dst) b = 3;
        return absl::OkStatus();
      });
  EXPECT_EQ(filled.code(), absl::StatusCode::kInvalidArgument);
  upload->reset();  // the server ends a failed stream so
  from->reset();
  EXPECT_EQ(HeldBytes(*rt), 4u);  // only the good tensor
}

TEST(ArgumentRulesTest, ClientStringsAreBoundedAndEchoedShort) {
  auto rt = MakeRuntime();
  auto s = rt->OpenSession("strings", milliseconds(0));
  ASSERT_TRUE(s.ok());
  const std::string huge(100000, 'x');
  const int64_t dims[] = {1};
  const std::vector<uint8_t> data(4, 0);

  auto device =
      rt->CreateFromData(s->id, huge, DType::kFloat32, dims, data, "");
  EXPECT_EQ(device.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(device.status().message()),
              AllOf(HasSubstr("invalid device name"), HasSubstr("128 bytes"),
                    HasSubstr("(100000 bytes)")));
  EXPECT_LT(device.status().message().size(), 300u);

  auto t = rt->CreateFromData(s->id, "cpu", DType::kFloat32, dims, data, "");
  ASSERT_TRUE(t.ok());
  auto to = rt->To(s->id, t->handle, huge, false);
  EXPECT_EQ(to.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_LT(to.status().message().size(), 300u);
  auto missing =
      rt->To(s->id, t->handle, "cuda:7" + std::string(50, '0'), false);
  EXPECT_LT(missing.status().message().size(), 300u);

  auto tag = rt->CreateFromData(s->id, "cpu", DType::kFloat32, dims, data,
                                std::string(3 << 20, 't'));
  EXPECT_EQ(tag.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(tag.status().message()),
              AllOf(StartsWith("tag is 3145728 bytes long"),
                    HasSubstr("limit is 256 bytes")));
  EXPECT_LT(tag.status().message().size(), 300u);
  EXPECT_TRUE(rt->CreateFromData(s->id, "cpu", DType::kFloat32, dims, data,
                                 std::string(kMaxTagBytes, 't'))
                  .ok());
  const int64_t up_dims[] = {1};
  EXPECT_EQ(rt->BeginUpload(s->id, "cpu", DType::kFloat32, up_dims,
                            std::string(kMaxTagBytes + 1, 't'))
                .status()
                .code(),
            absl::StatusCode::kInvalidArgument);

  auto name = rt->OpenSession(std::string(4 << 20, 'n'), milliseconds(0));
  EXPECT_EQ(name.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(name.status().message()),
              StartsWith("client_name is 4194304 bytes long"));
}

TEST(ArgumentRulesTest, NoSilentDefaults) {
  auto rt = MakeRuntime();
  auto negative = rt->OpenSession("x", milliseconds(-5));
  EXPECT_EQ(negative.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(negative.status().message()),
              HasSubstr("ttl_ms is -5"));
  auto s = rt->OpenSession("x", milliseconds(0));
  ASSERT_TRUE(s.ok());
  auto t = Bytes(*rt, s->id, DType::kFloat32, std::vector<uint8_t>(4));
  ASSERT_TRUE(t.ok());
  auto to = rt->To(s->id, t->handle, "", false);
  EXPECT_EQ(to.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(to.status().message()),
              HasSubstr("To needs a target device"));
  // Create's empty device is the documented `cpu`; `cpu:0` names it too.
  EXPECT_EQ(t->device, "cpu");
  auto moved = rt->To(s->id, t->handle, "cpu:0", false);
  ASSERT_TRUE(moved.ok());
  EXPECT_EQ(moved->handle, t->handle);
}

TEST(ArgumentRulesTest, ExecuteNamesTheOpThatPassesTheQuota) {
  RuntimeOptions options;
  options.session_max_bytes = 6000;
  auto rt = MakeRuntime(std::move(options));
  auto s = rt->OpenSession("quota", milliseconds(0));
  ASSERT_TRUE(s.ok());
  auto x = Bytes(*rt, s->id, DType::kFloat32, std::vector<uint8_t>(2048));
  ASSERT_TRUE(x.ok());
  // op #0 keeps 2048 bytes (4096 in all: fits); op #1 another 2048 (6144:
  // past the 6000-byte quota).
  OpSpec exp;
  exp.kind = OpSpec::Kind::kUnary;
  exp.unary = UnaryOp::kExp;
  exp.inputs = {Operand::Handle(x->handle)};
  OpSpec neg = exp;
  neg.unary = UnaryOp::kNeg;
  neg.inputs = {Operand::Result(0)};
  const OpSpec ops[] = {exp, neg};
  const uint32_t keep[] = {0, 1};
  auto out = rt->Execute(s->id, ops, keep);
  ASSERT_FALSE(out.ok());
  EXPECT_EQ(out.status().code(), absl::StatusCode::kResourceExhausted);
  EXPECT_THAT(std::string(out.status().message()),
              AllOf(StartsWith("op #1 (neg; operands: result of op #0"),
                    HasSubstr("session memory quota exceeded")));
  EXPECT_EQ(HeldBytes(*rt), 2048u);  // nothing kept
  // Keeping only the last changes nothing: op #0's result is alive while
  // op #1 runs, and every byte alive is admitted (issue 30).
  const uint32_t keep_last[] = {1};
  auto last = rt->Execute(s->id, ops, keep_last);
  EXPECT_EQ(last.status().code(), absl::StatusCode::kResourceExhausted);
  EXPECT_THAT(std::string(last.status().message()),
              StartsWith("op #1 (neg; operands: result of op #0"));
  EXPECT_EQ(HeldBytes(*rt), 2048u);
  // The session keeps working.
  const uint32_t keep_first[] = {0};
  EXPECT_TRUE(rt->Execute(s->id, std::span(ops, 1), keep_first).ok());
}

}  // namespace
}  // namespace tensord::core

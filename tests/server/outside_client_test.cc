// Issue 14: what a client written from tensord.proto alone runs into, over
// the wire through raw generated stubs on a loopback server with gRPC's
// default client limits (4 MiB receive, 8 KiB metadata): leases under long
// and stalled streams, BOOL bytes on every path in, bounded strings echoed
// short, replies that fit a default client, Execute naming the op that
// passes a quota, limits a client can read, no silent defaults, paginated
// listings.
#include <gmock/gmock.h>
#include <grpcpp/grpcpp.h>
#include <gtest/gtest.h>

#include <chrono>
#include <cstdint>
#include <memory>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "server/server.h"
#include "tensord/v1/tensord.grpc.pb.h"
#include "tests/core/faulty_device.h"

namespace tensord::server {
namespace {

using std::chrono::milliseconds;
using ::testing::AllOf;
using ::testing::HasSubstr;
using ::testing::StartsWith;

template <typename F>
bool Eventually(F done, milliseconds limit = milliseconds(5000)) {
  const auto deadline = std::chrono::steady_clock::now() + limit;
  while (std::chrono::steady_clock::now() < deadline) {
    if (done()) return true;
    std::this_thread::sleep_for(milliseconds(5));
  }
  return done();
}

class OutsideClientTest : public ::testing::Test {
 protected:
  void Start(ServerOptions options = {}) {
    options.listen = "127.0.0.1:0";
    if (options.runtime.host_memory_budget == 0) {
      options.runtime.host_memory_budget = 256 << 20;
    }
    options.runtime.reap_interval = milliseconds(10);
    auto server = Server::Start(std::move(options));
    ASSERT_TRUE(server.ok()) << server.status();
    server_ = std::move(*server);
    // gRPC's defaults, as a client written from the proto alone has them.
    stub_ = v1::TensorService::NewStub(grpc::CreateChannel(
        server_->address(), grpc::InsecureChannelCredentials()));
  }

  std::string Open(int64_t ttl_ms = 0) {
    grpc::ClientContext ctx;
    v1::OpenSessionRequest req;
    req.set_ttl_ms(ttl_ms);
    v1::OpenSessionResponse resp;
    grpc::Status s = stub_->OpenSession(&ctx, req, &resp);
    EXPECT_TRUE(s.ok()) << s.error_message();
    return resp.session();
  }

  grpc::Status Create(const v1::CreateRequest& req,
                      v1::TensorInfo* out = nullptr) {
    grpc::ClientContext ctx;
    v1::TensorResponse resp;
    grpc::Status s = stub_->Create(&ctx, req, &resp);
    if (out != nullptr) *out = resp.tensor();
    return s;
  }

  v1::TensorInfo Zeros(const std::string& session, int64_t n,
                       v1::DType dtype = v1::FLOAT32) {
    v1::CreateRequest req;
    req.set_session(session);
    req.set_dtype(dtype);
    req.add_shape(n);
    req.mutable_fill()->set_kind(v1::Fill::ZEROS);
    v1::TensorInfo t;
    grpc::Status s = Create(req, &t);
    EXPECT_TRUE(s.ok()) << s.error_message();
    return t;
  }

  bool Alive(const std::string& session) {
    grpc::ClientContext ctx;
    v1::KeepAliveRequest req;
    req.set_session(session);
    v1::KeepAliveResponse resp;
    return stub_->KeepAlive(&ctx, req, &resp).ok();
  }

  uint64_t Held() {
    uint64_t held = 0;
    for (const auto& d : server_->runtime().ListDevices()) held += d.held_bytes;
    return held;
  }

  std::unique_ptr<Server> server_;
  std::unique_ptr<v1::TensorService::Stub> stub_;
};

// Point 1: each message of a stream renews the lease.
TEST_F(OutsideClientTest, ASlowUploadKeepsItsSessionAlive) {
  Start();
  const std::string s = Open(300);
  grpc::ClientContext ctx;
  v1::TensorResponse resp;
  auto writer = stub_->Upload(&ctx, &resp);
  v1::UploadRequest msg;
  msg.mutable_header()->set_session(s);
  msg.mutable_header()->set_dtype(v1::FLOAT32);
  msg.mutable_header()->add_shape(10);
  msg.set_data(std::string(4, '\0'));
  ASSERT_TRUE(writer->Write(msg));
  msg.clear_header();
  // A chunk every 100 ms for 0.9 s: three leases, and no other call.
  for (int i = 1; i < 10; ++i) {
    std::this_thread::sleep_for(milliseconds(100));
    ASSERT_TRUE(writer->Write(msg)) << i;
  }
  ASSERT_TRUE(writer->WritesDone());
  grpc::Status status = writer->Finish();
  ASSERT_TRUE(status.ok()) << status.error_message();
  EXPECT_EQ(resp.tensor().nbytes(), 40u);
  EXPECT_TRUE(Alive(s));
}

TEST_F(OutsideClientTest, ASlowFetchKeepsItsSessionAlive) {
  Start();
  const std::string s = Open(400);
  const v1::TensorInfo t = Zeros(s, 2 << 20);  // 8 MiB
  // A client that reads slowly, with a fixed HTTP/2 window (no BDP probes):
  // the server's sends are paced by its reads, not buffered ahead.
  grpc::ChannelArguments args;
  args.SetInt(GRPC_ARG_HTTP2_BDP_PROBE, 0);
  auto stub = v1::TensorService::NewStub(grpc::CreateCustomChannel(
      server_->address(), grpc::InsecureChannelCredentials(), args));
  grpc::ClientContext ctx;
  v1::FetchRequest req;
  req.set_session(s);
  req.set_handle(t.handle());
  req.set_chunk_bytes(64 << 10);
  auto reader = stub->Fetch(&ctx, req);
  v1::FetchChunk chunk;
  uint64_t bytes = 0;
  const auto start = std::chrono::steady_clock::now();
  while (reader->Read(&chunk)) {
    bytes += chunk.data().size();
    std::this_thread::sleep_for(milliseconds(15));  // 128 chunks: ~2 s
  }
  grpc::Status status = reader->Finish();
  ASSERT_TRUE(status.ok()) << status.error_message();
  EXPECT_EQ(bytes, 8u << 20);
  EXPECT_GT(std::chrono::steady_clock::now() - start, milliseconds(1200));
  EXPECT_TRUE(Alive(s));
}

TEST_F(OutsideClientTest, AStalledUploadDoesNotHoldItsSessionOrMemory) {
  Start();
  const std::string s = Open(200);
  grpc::ClientContext ctx;
  v1::TensorResponse resp;
  auto writer = stub_->Upload(&ctx, &resp);
  v1::UploadRequest msg;
  msg.mutable_header()->set_session(s);
  msg.mutable_header()->set_dtype(v1::FLOAT32);
  msg.mutable_header()->add_shape(1 << 20);  // 4 MiB
  msg.set_data(std::string(4096, '\0'));
  ASSERT_TRUE(writer->Write(msg));
  ASSERT_TRUE(Eventually([&] { return Held() == 4u << 20; }));
  // No message for a whole lease: the session goes, and with it the memory
  // the open stream held.
  ASSERT_TRUE(Eventually([&] { return Held() == 0; }));
  EXPECT_EQ(server_->runtime().session_count(), 0u);
  msg.clear_header();
  writer->Write(msg);
  writer->WritesDone();
  grpc::Status status = writer->Finish();
  EXPECT_EQ(status.error_code(), grpc::StatusCode::NOT_FOUND);
  EXPECT_THAT(status.error_message(),
              AllOf(HasSubstr(s.substr(0, 8)), HasSubstr("lease of 200 ms")));
}

// Point 4: BOOL bytes are 0 or 1 on every path in.
TEST_F(OutsideClientTest, BoolBytesOtherThanZeroOrOneAreRefused) {
  Start();
  const std::string s = Open();
  v1::CreateRequest req;
  req.set_session(s);
  req.set_dtype(v1::BOOL);
  req.add_shape(4);
  req.set_data(std::string("\x00\x01\x02\xff", 4));
  grpc::Status created = Create(req);
  EXPECT_EQ(created.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_THAT(created.error_message(), HasSubstr("byte 2 is 2"));

  grpc::ClientContext ctx;
  v1::TensorResponse resp;
  auto writer = stub_->Upload(&ctx, &resp);
  v1::UploadRequest msg;
  msg.mutable_header()->set_session(s);
  msg.mutable_header()->set_dtype(v1::BOOL);
  msg.mutable_header()->add_shape(4);
  msg.set_data(std::string("\x01\x00", 2));
  writer->Write(msg);
  msg.clear_header();
  msg.set_data(std::string("\x01\x80", 2));
  writer->Write(msg);
  writer->WritesDone();
  grpc::Status uploaded = writer->Finish();
  EXPECT_EQ(uploaded.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_THAT(uploaded.error_message(), HasSubstr("byte 3 is 128"));
  EXPECT_EQ(Held(), 0u);
}

// Points 3 and 5: strings are bounded, and echoed short.
TEST_F(OutsideClientTest, LongStringsAreRefusedWithShortMessages) {
  Start();
  const std::string s = Open();
  const std::string huge(100000, 'c');
  v1::CreateRequest req;
  req.set_session(s);
  req.set_device(huge);
  req.set_dtype(v1::FLOAT32);
  req.add_shape(1);
  req.mutable_fill()->set_kind(v1::Fill::ZEROS);
  grpc::Status device = Create(req);
  // Before: RESOURCE_EXHAUSTED "received initial metadata size exceeds
  // limit", the whole name echoed in the status.
  EXPECT_EQ(device.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_THAT(device.error_message(), AllOf(HasSubstr("invalid device name"),
                                            HasSubstr("100000 bytes")));
  EXPECT_LT(device.error_message().size(), 300u);

  const v1::TensorInfo t = Zeros(s, 1);
  grpc::ClientContext to_ctx;
  v1::ToRequest to;
  to.set_session(s);
  to.set_handle(t.handle());
  to.set_device(huge);
  v1::TensorResponse to_resp;
  grpc::Status moved = stub_->To(&to_ctx, to, &to_resp);
  EXPECT_EQ(moved.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_LT(moved.error_message().size(), 300u);

  // Eight 3 MiB tags no longer pass a quota that charges nothing for them.
  req.set_device("cpu");
  req.set_tag(std::string(3 << 20, 't'));
  grpc::Status tagged = Create(req);
  EXPECT_EQ(tagged.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_THAT(tagged.error_message(),
              AllOf(StartsWith("tag is 3145728 bytes long"),
                    HasSubstr("limit is 256 bytes")));

  grpc::ClientContext open_ctx;
  v1::OpenSessionRequest open;
  open.set_client_name(std::string(1 << 20, 'n'));
  v1::OpenSessionResponse open_resp;
  grpc::Status named = stub_->OpenSession(&open_ctx, open, &open_resp);
  EXPECT_EQ(named.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_THAT(named.error_message(),
              StartsWith("client_name is 1048576 bytes"));

  grpc::ClientContext get_ctx;
  v1::GetTensorRequest get;
  get.set_session(huge);
  v1::TensorResponse get_resp;
  grpc::Status unknown = stub_->GetTensor(&get_ctx, get, &get_resp);
  EXPECT_EQ(unknown.error_code(), grpc::StatusCode::NOT_FOUND);
  EXPECT_LT(unknown.error_message().size(), 300u);
}

// Point 7: every failure inside Execute names its op.
TEST_F(OutsideClientTest, ExecuteQuotaFailureNamesTheOp) {
  ServerOptions options;
  options.runtime.session_max_bytes = 6000;
  Start(std::move(options));
  const std::string s = Open();
  const v1::TensorInfo x = Zeros(s, 512);  // 2048 bytes
  v1::ExecuteRequest req;
  req.set_session(s);
  auto* exp = req.add_ops()->mutable_unary();
  exp->set_op(v1::EXP);
  exp->mutable_x()->set_handle(x.handle());
  auto* neg = req.add_ops()->mutable_unary();
  neg->set_op(v1::NEG);
  neg->mutable_x()->set_result_of(0);
  req.add_keep(0);
  req.add_keep(1);
  grpc::ClientContext ctx;
  v1::ExecuteResponse resp;
  grpc::Status status = stub_->Execute(&ctx, req, &resp);
  EXPECT_EQ(status.error_code(), grpc::StatusCode::RESOURCE_EXHAUSTED);
  EXPECT_THAT(status.error_message(),
              AllOf(StartsWith("op #1 (neg; operands: result of op #0"),
                    HasSubstr("session memory quota exceeded")));
  EXPECT_EQ(Held(), 2048u);
}

// Issue 30: intermediates an Execute does not keep but autograd saves are
// admitted before they are allocated. A 6 MiB leaf that requires grad and 8
// chained exps under a 48 MiB quota need 54 MiB: the 8th exp (op #7) is
// refused, naming the quota, the bytes asked, what the session holds (and
// autograd's share) and the limit; the session holds what it held before
// and its next request succeeds.
TEST_F(OutsideClientTest,
       ExecuteOfSavedIntermediatesIsRefusedAtTheOpThatCrosses) {
  constexpr int64_t kElems = (6 << 20) / 4;  // 6 MiB of float32
  ServerOptions options;
  options.runtime.session_max_bytes = 48 << 20;
  Start(std::move(options));
  const std::string s = Open();
  const v1::TensorInfo x = Zeros(s, kElems);
  auto execute = [&](int exps, v1::ExecuteResponse* resp) {
    v1::ExecuteRequest req;
    req.set_session(s);
    for (int i = 0; i < exps; ++i) {
      auto* exp = req.add_ops()->mutable_unary();
      exp->set_op(v1::EXP);
      if (i == 0) {
        exp->mutable_x()->set_handle(x.handle());
      } else {
        exp->mutable_x()->set_result_of(i - 1);
      }
    }
    req.add_keep(exps - 1);
    grpc::ClientContext ctx;
    return stub_->Execute(&ctx, req, resp);
  };
  {
    v1::ExecuteRequest req;
    req.set_session(s);
    req.add_ops()->mutable_requires_grad()->mutable_x()->set_handle(x.handle());
    grpc::ClientContext ctx;
    v1::ExecuteResponse resp;
    ASSERT_TRUE(stub_->Execute(&ctx, req, &resp).ok());
  }
  auto session_bytes = [&] {
    grpc::ClientContext ctx;
    v1::ListTensorsRequest req;
    req.set_session(s);
    v1::ListTensorsResponse resp;
    EXPECT_TRUE(stub_->ListTensors(&ctx, req, &resp).ok());
    return resp.total_bytes();
  };
  const uint64_t before = session_bytes();
  ASSERT_EQ(before, 6u << 20);
  v1::ExecuteResponse resp;
  grpc::Status status = execute(8, &resp);
  EXPECT_EQ(status.error_code(), grpc::StatusCode::RESOURCE_EXHAUSTED);
  EXPECT_THAT(status.error_message(),
              AllOf(StartsWith("op #7 (exp; operands: result of op #6"),
                    HasSubstr("session memory quota exceeded "
                              "(--session-max-bytes): requested 6291456 "
                              "bytes; the session holds 50331648 of its "
                              "limit of 50331648 bytes (44040192 bytes of "
                              "them held by autograd")));
  EXPECT_EQ(session_bytes(), before);
  EXPECT_EQ(Held(), 6u << 20);
  // The session keeps working: 7 exps fill the quota exactly.
  v1::ExecuteResponse fits;
  status = execute(7, &fits);
  ASSERT_TRUE(status.ok()) << status.error_message();
  EXPECT_EQ(session_bytes(), 48u << 20);
}

// Point 9: no silent defaults.
TEST_F(OutsideClientTest, NegativeTtlAndEmptyTargetDeviceAreErrors) {
  Start();
  grpc::ClientContext open_ctx;
  v1::OpenSessionRequest open;
  open.set_ttl_ms(-1);
  v1::OpenSessionResponse open_resp;
  grpc::Status negative = stub_->OpenSession(&open_ctx, open, &open_resp);
  EXPECT_EQ(negative.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_THAT(negative.error_message(), HasSubstr("ttl_ms is -1"));

  const std::string s = Open();
  const v1::TensorInfo t = Zeros(s, 1);
  EXPECT_EQ(t.device(), "cpu");  // Create's "" is the documented cpu
  grpc::ClientContext ctx;
  v1::ToRequest to;
  to.set_session(s);
  to.set_handle(t.handle());
  v1::TensorResponse resp;
  grpc::Status moved = stub_->To(&ctx, to, &resp);
  EXPECT_EQ(moved.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_THAT(moved.error_message(), HasSubstr("To needs a target device"));
}

// Point 6: the largest reply fits a default client (4 MiB receive limit).
TEST_F(OutsideClientTest, TheLargestReadAndFetchChunkFitADefaultClient) {
  Start();
  const std::string s = Open();
  const v1::TensorInfo t = Zeros(s, 2 << 20);  // 8 MiB
  grpc::ClientContext limits_ctx;
  v1::Limits limits;
  ASSERT_TRUE(stub_->GetLimits(&limits_ctx, {}, &limits).ok());
  ASSERT_EQ(limits.max_read_bytes(), (4u << 20) - (64u << 10));

  grpc::ClientContext read_ctx;
  v1::ReadRequest read;
  read.set_session(s);
  read.set_handle(t.handle());
  read.set_length(limits.max_read_bytes());
  v1::FetchChunk chunk;
  grpc::Status status = stub_->Read(&read_ctx, read, &chunk);
  ASSERT_TRUE(status.ok()) << status.error_message();
  EXPECT_EQ(chunk.data().size(), limits.max_read_bytes());

  grpc::ClientContext over_ctx;
  read.set_length(limits.max_read_bytes() + 1);
  status = stub_->Read(&over_ctx, read, &chunk);
  EXPECT_EQ(status.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_THAT(status.error_message(),
              HasSubstr("stream larger tensors with Fetch"));

  // Before: "Received message larger than max (4194344 vs. 4194304)".
  grpc::ClientContext fetch_ctx;
  v1::FetchRequest fetch;
  fetch.set_session(s);
  fetch.set_handle(t.handle());
  fetch.set_chunk_bytes(4 << 20);
  auto reader = stub_->Fetch(&fetch_ctx, fetch);
  uint64_t bytes = 0;
  while (reader->Read(&chunk)) {
    EXPECT_LE(chunk.data().size(), limits.max_read_bytes());
    bytes += chunk.data().size();
  }
  status = reader->Finish();
  ASSERT_TRUE(status.ok()) << status.error_message();
  EXPECT_EQ(bytes, 8u << 20);
}

// A read sent before the client knows the result's size or device (the
// pipelined Python client's numpy()): if_small_on_host answers a tensor
// too large for one reply, or on a device that is not a host device, with
// its info and no data, instead of INVALID_ARGUMENT or its bytes; a small
// one on a host device is read as usual.
TEST_F(OutsideClientTest, ASpeculativeReadReadsOnlySmallHostTensors) {
  ServerOptions options;
  options.runtime.extra_devices.push_back(core::FaultyDevice::OverCpu());
  Start(std::move(options));  // cpu and cuda:7 (a CPU posing as a GPU)
  const std::string s = Open();
  auto read = [&](uint64_t handle, v1::FetchChunk* chunk) {
    grpc::ClientContext ctx;
    v1::ReadRequest req;
    req.set_session(s);
    req.set_handle(handle);
    req.set_if_small_on_host(true);
    return stub_->Read(&ctx, req, chunk);
  };
  const v1::TensorInfo small = Zeros(s, 3);
  v1::FetchChunk chunk;
  ASSERT_TRUE(read(small.handle(), &chunk).ok());
  EXPECT_EQ(chunk.data().size(), 12u);
  EXPECT_EQ(chunk.tensor().nbytes(), 12u);

  const v1::TensorInfo big = Zeros(s, 2 << 20);  // 8 MiB
  chunk.Clear();
  grpc::Status status = read(big.handle(), &chunk);
  ASSERT_TRUE(status.ok()) << status.error_message();
  EXPECT_TRUE(chunk.data().empty());
  EXPECT_EQ(chunk.tensor().nbytes(), 8u << 20) << "the info, to fetch it by";

  v1::CreateRequest on_gpu;
  on_gpu.set_session(s);
  on_gpu.set_dtype(v1::FLOAT32);
  on_gpu.add_shape(3);
  on_gpu.set_device("cuda:7");
  on_gpu.mutable_fill()->set_kind(v1::Fill::ZEROS);
  v1::TensorInfo gpu;
  ASSERT_TRUE(Create(on_gpu, &gpu).ok());
  chunk.Clear();
  ASSERT_TRUE(read(gpu.handle(), &chunk).ok());
  EXPECT_TRUE(chunk.data().empty()) << "no bytes of a tensor on a GPU";
  EXPECT_EQ(chunk.tensor().device(), "cuda:7");
}

// Point 8: the limits are there to read, and they are the ones enforced.
TEST_F(OutsideClientTest, LimitsAreReportedAndMatchWhatIsEnforced) {
  ServerOptions options;
  options.max_inline_bytes = 1024;
  options.max_message_bytes = 32 << 20;
  options.runtime.session_max_bytes = 1 << 20;
  options.runtime.session_max_tensors = 100;
  options.runtime.max_sessions = 7;
  options.runtime.max_tensor_bytes = 512 << 10;
  options.runtime.session_ttl = milliseconds(60000);
  options.runtime.min_session_ttl = milliseconds(200);
  options.runtime.max_session_ttl = milliseconds(3600000);
  Start(std::move(options));
  grpc::ClientContext ctx;
  v1::Limits limits;
  ASSERT_TRUE(stub_->GetLimits(&ctx, {}, &limits).ok());
  EXPECT_EQ(limits.max_message_bytes(), 32u << 20);
  EXPECT_EQ(limits.max_inline_bytes(), 1024u);
  EXPECT_EQ(limits.default_fetch_chunk_bytes(), 1u << 20);
  EXPECT_EQ(limits.max_tensor_bytes(), 512u << 10);
  EXPECT_EQ(limits.session_max_bytes(), 1u << 20);
  EXPECT_EQ(limits.session_max_tensors(), 100u);
  EXPECT_EQ(limits.max_sessions(), 7u);
  EXPECT_EQ(limits.default_session_ttl_ms(), 60000);
  EXPECT_EQ(limits.min_session_ttl_ms(), 200);
  EXPECT_EQ(limits.max_session_ttl_ms(), 3600000);
  EXPECT_EQ(limits.max_device_name_bytes(), 128u);
  EXPECT_EQ(limits.max_tag_bytes(), 256u);
  EXPECT_EQ(limits.max_client_name_bytes(), 256u);
  EXPECT_EQ(limits.max_request_id_bytes(), 64u);
  EXPECT_EQ(limits.max_rank(), 8u);
  EXPECT_EQ(limits.max_shared_memory_regions(), 16u);
  EXPECT_EQ(limits.max_list_page_size(), 1000u);
  EXPECT_EQ(limits.max_release_handles(), 1024u);

  // OpenSession's reply carries the same.
  grpc::ClientContext open_ctx;
  v1::OpenSessionRequest open;
  open.set_ttl_ms(1);  // clamped to the reported minimum
  v1::OpenSessionResponse opened;
  ASSERT_TRUE(stub_->OpenSession(&open_ctx, open, &opened).ok());
  EXPECT_EQ(opened.ttl_ms(), limits.min_session_ttl_ms());
  EXPECT_EQ(opened.limits().SerializeAsString(), limits.SerializeAsString());

  // Enforced as reported: a tag of max_tag_bytes passes, one more fails;
  // inline data of max_inline_bytes passes, one more fails.
  v1::CreateRequest req;
  req.set_session(opened.session());
  req.set_dtype(v1::BOOL);
  req.add_shape(limits.max_inline_bytes());
  req.set_data(std::string(limits.max_inline_bytes(), '\1'));
  req.set_tag(std::string(limits.max_tag_bytes(), 't'));
  EXPECT_TRUE(Create(req).ok());
  req.set_tag(std::string(limits.max_tag_bytes() + 1, 't'));
  EXPECT_EQ(Create(req).error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  req.clear_tag();
  req.set_shape(0, limits.max_inline_bytes() + 1);
  req.set_data(std::string(limits.max_inline_bytes() + 1, '\1'));
  EXPECT_EQ(Create(req).error_code(), grpc::StatusCode::INVALID_ARGUMENT);
}

// Point 5: listings stay within a default client's limits, page by page.
TEST_F(OutsideClientTest, ListingsArePaginated) {
  Start();
  // 2500 tensors with the longest tags, over three sessions.
  std::vector<std::string> sessions = {Open(), Open(), Open()};
  std::set<uint64_t> made;
  for (int i = 0; i < 2500; ++i) {
    v1::CreateRequest req;
    req.set_session(sessions[i % 3]);
    req.set_dtype(v1::FLOAT32);
    req.mutable_fill()->set_kind(v1::Fill::ZEROS);
    req.set_tag(std::string(256, 'a' + i % 26));
    v1::TensorInfo t;
    ASSERT_TRUE(Create(req, &t).ok());
    made.insert(t.handle());
  }
  std::set<uint64_t> seen;
  v1::ListAllTensorsRequest all;
  int pages = 0;
  do {
    grpc::ClientContext ctx;
    v1::ListAllTensorsResponse page;
    grpc::Status status = stub_->ListAllTensors(&ctx, all, &page);
    ASSERT_TRUE(status.ok()) << status.error_message();
    EXPECT_LE(page.tensors_size(), 1000);
    EXPECT_LT(page.ByteSizeLong(), 4u << 20);
    for (const auto& e : page.tensors()) {
      EXPECT_TRUE(seen.insert(e.tensor().handle()).second) << "repeated";
    }
    all.set_page_token(page.next_page_token());
    ++pages;
  } while (!all.page_token().empty() && pages < 10);
  EXPECT_EQ(pages, 3);
  EXPECT_EQ(seen, made);

  v1::ListTensorsRequest mine;
  mine.set_session(sessions[0]);
  mine.set_page_size(300);
  size_t count = 0;
  pages = 0;
  do {
    grpc::ClientContext ctx;
    v1::ListTensorsResponse page;
    ASSERT_TRUE(stub_->ListTensors(&ctx, mine, &page).ok());
    EXPECT_EQ(page.total_bytes(), 834u * 4);  // every page: the session's
    count += page.tensors_size();
    mine.set_page_token(page.next_page_token());
    ++pages;
  } while (!mine.page_token().empty() && pages < 10);
  EXPECT_EQ(count, 834u);
  EXPECT_EQ(pages, 3);

  grpc::ClientContext sessions_ctx;
  v1::ListSessionsRequest list;
  list.set_page_size(2);
  v1::ListSessionsResponse first;
  ASSERT_TRUE(stub_->ListSessions(&sessions_ctx, list, &first).ok());
  ASSERT_EQ(first.sessions_size(), 2);
  EXPECT_EQ(first.sessions(0).id_prefix(), sessions[0].substr(0, 8));
  list.set_page_token(first.next_page_token());
  grpc::ClientContext second_ctx;
  v1::ListSessionsResponse second;
  ASSERT_TRUE(stub_->ListSessions(&second_ctx, list, &second).ok());
  ASSERT_EQ(second.sessions_size(), 1);
  EXPECT_EQ(second.sessions(0).id_prefix(), sessions[2].substr(0, 8));
  EXPECT_EQ(second.next_page_token(), "");

  grpc::ClientContext bad_ctx;
  list.set_page_token("not-a-token");
  v1::ListSessionsResponse bad;
  EXPECT_EQ(stub_->ListSessions(&bad_ctx, list, &bad).error_code(),
            grpc::StatusCode::INVALID_ARGUMENT);
}

}  // namespace
}  // namespace tensord::server

namespace tensord::server {
namespace {

// Releases that ride a request (ReleaseRequest in tensord.proto): the
// listed handles go before the request's own work, unknown ones are
// skipped, a list past Limits.max_release_handles is refused before
// anything is released.
TEST_F(OutsideClientTest, ReleasesRideTheNextRequest) {
  Start();
  const std::string session = Open();
  const v1::TensorInfo a = Zeros(session, 1024);
  const v1::TensorInfo b = Zeros(session, 1024);
  const v1::TensorInfo c = Zeros(session, 1024);
  ASSERT_EQ(Held(), 3u * 4096);

  // Too long a list: INVALID_ARGUMENT naming the bound; nothing released,
  // nothing made.
  v1::CreateRequest create;
  create.set_session(session);
  create.set_dtype(v1::FLOAT32);
  create.add_shape(1024);
  create.mutable_fill()->set_kind(v1::Fill::ZEROS);
  for (int i = 0; i < 1025; ++i) create.add_release(a.handle());
  grpc::Status s = Create(create);
  EXPECT_EQ(s.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_THAT(s.error_message(),
              AllOf(HasSubstr("1025"), HasSubstr("at most 1024"),
                    HasSubstr("max_release_handles")));
  EXPECT_EQ(Held(), 3u * 4096);

  // A Run that lists `a` (twice) and a handle never issued: `a` is freed
  // before the op's result is made, and the op runs.
  v1::RunRequest run;
  run.set_session(session);
  v1::UnaryArgs* neg = run.mutable_op()->mutable_unary();
  neg->set_op(v1::NEG);
  neg->mutable_x()->set_handle(b.handle());
  run.add_release(a.handle());
  run.add_release(a.handle());
  run.add_release(c.handle() + 1000);
  {
    grpc::ClientContext ctx;
    v1::TensorResponse resp;
    s = stub_->Run(&ctx, run, &resp);
    ASSERT_TRUE(s.ok()) << s.error_message();
  }
  EXPECT_EQ(Held(), 3u * 4096);  // b, c and the result

  // The listed handles go even when the request's own work fails.
  run.clear_release();
  run.add_release(c.handle());
  run.mutable_op()->mutable_unary()->mutable_x()->set_handle(a.handle());
  {
    grpc::ClientContext ctx;
    v1::TensorResponse resp;
    s = stub_->Run(&ctx, run, &resp);
    EXPECT_EQ(s.error_code(), grpc::StatusCode::NOT_FOUND);  // a is gone
  }
  EXPECT_EQ(Held(), 2u * 4096);

  // A Release of handle 0 with a list frees just the list; handle 0 alone
  // is still NOT_FOUND.
  v1::ReleaseRequest release;
  release.set_session(session);
  release.add_release(b.handle());
  {
    grpc::ClientContext ctx;
    v1::ReleaseResponse resp;
    s = stub_->Release(&ctx, release, &resp);
    EXPECT_TRUE(s.ok()) << s.error_message();
  }
  EXPECT_EQ(Held(), 4096u);
  release.clear_release();
  {
    grpc::ClientContext ctx;
    v1::ReleaseResponse resp;
    EXPECT_EQ(stub_->Release(&ctx, release, &resp).error_code(),
              grpc::StatusCode::NOT_FOUND);
  }

  // Another session's handles are not this one's to release.
  const std::string other = Open();
  const v1::TensorInfo theirs = Zeros(other, 1024);
  release.add_release(theirs.handle());
  {
    grpc::ClientContext ctx;
    v1::ReleaseResponse resp;
    EXPECT_TRUE(stub_->Release(&ctx, release, &resp).ok());
  }
  EXPECT_EQ(Held(), 2u * 4096);
}

}  // namespace
}  // namespace tensord::server

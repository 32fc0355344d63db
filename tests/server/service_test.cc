// TensorService through raw generated stubs against a real server on a
// loopback socket: the wire contract itself, including every RPC's bad input.
#include <cstring>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include <grpcpp/grpcpp.h>
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <zlib.h>

#include "server/server.h"
#include "tensord/v1/tensord.grpc.pb.h"

namespace tensord::server {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;

constexpr uint64_t kBudget = 8 << 20;  // per host device

template <typename T>
std::string Bytes(const std::vector<T>& values) {
  std::string out(values.size() * sizeof(T), '\0');
  if (!values.empty()) std::memcpy(out.data(), values.data(), out.size());
  return out;
}

class ServiceTest : public ::testing::Test {
 protected:
  void SetUp() override {
    ServerOptions options;
    options.listen = "127.0.0.1:0";
    options.runtime.host_devices = 2;
    options.runtime.host_memory_budget = kBudget;
    auto server = Server::Start(std::move(options));
    ASSERT_TRUE(server.ok()) << server.status();
    server_ = std::move(*server);
    ASSERT_GT(server_->port(), 0);
    stub_ = v1::TensorService::NewStub(grpc::CreateChannel(
        server_->address(), grpc::InsecureChannelCredentials()));
    session_ = OpenSession();
  }

  std::string OpenSession() {
    grpc::ClientContext ctx;
    v1::OpenSessionRequest req;
    v1::OpenSessionResponse resp;
    EXPECT_TRUE(stub_->OpenSession(&ctx, req, &resp).ok());
    EXPECT_FALSE(resp.session().empty());
    return resp.session();
  }

  grpc::Status Create(v1::CreateRequest req, v1::TensorInfo* out = nullptr) {
    if (req.session().empty()) req.set_session(session_);
    grpc::ClientContext ctx;
    v1::TensorResponse resp;
    grpc::Status s = stub_->Create(&ctx, req, &resp);
    if (out != nullptr) *out = resp.tensor();
    return s;
  }

  v1::TensorInfo CreateInt64(const std::vector<int64_t>& values,
                             const std::string& device = "cpu:0") {
    v1::CreateRequest req;
    req.set_device(device);
    req.set_dtype(v1::INT64);
    req.add_shape(static_cast<int64_t>(values.size()));
    req.set_data(Bytes(values));
    v1::TensorInfo info;
    grpc::Status s = Create(req, &info);
    EXPECT_TRUE(s.ok()) << s.error_message();
    return info;
  }

  grpc::Status Binary(v1::BinaryOp op, uint64_t a, uint64_t b,
                      v1::TensorInfo* out = nullptr) {
    grpc::ClientContext ctx;
    v1::BinaryRequest req;
    req.set_session(session_);
    req.set_op(op);
    req.set_lhs(a);
    req.set_rhs(b);
    v1::TensorResponse resp;
    grpc::Status s = stub_->Binary(&ctx, req, &resp);
    if (out != nullptr) *out = resp.tensor();
    return s;
  }

  grpc::Status To(uint64_t handle, const std::string& device, bool copy,
                  v1::TensorInfo* out, const std::string& session = "") {
    grpc::ClientContext ctx;
    v1::ToRequest req;
    req.set_session(session.empty() ? session_ : session);
    req.set_handle(handle);
    req.set_device(device);
    req.set_copy(copy);
    v1::TensorResponse resp;
    grpc::Status s = stub_->To(&ctx, req, &resp);
    if (out != nullptr) *out = resp.tensor();
    return s;
  }

  // Fetches all chunks; checks offsets and CRCs as it goes.
  grpc::Status Fetch(uint64_t handle, std::string* data, uint64_t offset = 0,
                     uint32_t chunk_bytes = 0, int* chunks = nullptr) {
    grpc::ClientContext ctx;
    v1::FetchRequest req;
    req.set_session(session_);
    req.set_handle(handle);
    req.set_offset(offset);
    req.set_chunk_bytes(chunk_bytes);
    auto reader = stub_->Fetch(&ctx, req);
    v1::FetchChunk chunk;
    data->clear();
    int n = 0;
    while (reader->Read(&chunk)) {
      EXPECT_EQ(chunk.has_tensor(), n == 0);
      EXPECT_EQ(chunk.offset(), offset + data->size());
      const uint32_t crc = static_cast<uint32_t>(crc32(
          crc32(0L, Z_NULL, 0),
          reinterpret_cast<const Bytef*>(chunk.data().data()),
          static_cast<uInt>(chunk.data().size())));
      EXPECT_EQ(chunk.crc32(), crc);
      data->append(chunk.data());
      ++n;
    }
    if (chunks != nullptr) *chunks = n;
    return reader->Finish();
  }

  template <typename T>
  std::vector<T> FetchAs(uint64_t handle) {
    std::string data;
    grpc::Status s = Fetch(handle, &data);
    EXPECT_TRUE(s.ok()) << s.error_message();
    std::vector<T> out(data.size() / sizeof(T));
    std::memcpy(out.data(), data.data(), data.size());
    return out;
  }
  std::vector<int64_t> FetchInt64(uint64_t handle) {
    return FetchAs<int64_t>(handle);
  }

  uint64_t HeldBytes(const std::string& device) {
    grpc::ClientContext ctx;
    v1::ListDevicesResponse resp;
    EXPECT_TRUE(stub_->ListDevices(&ctx, {}, &resp).ok());
    for (const auto& d : resp.devices()) {
      if (d.name() == device) return d.held_memory();
    }
    ADD_FAILURE() << "no device " << device;
    return 0;
  }

  std::unique_ptr<Server> server_;
  std::unique_ptr<v1::TensorService::Stub> stub_;
  std::string session_;
};

TEST_F(ServiceTest, ListsHostDevices) {
  grpc::ClientContext ctx;
  v1::ListDevicesResponse resp;
  ASSERT_TRUE(stub_->ListDevices(&ctx, {}, &resp).ok());
  std::vector<std::string> names;
  for (const auto& d : resp.devices()) names.push_back(d.name());
  ASSERT_GE(names.size(), 2u);
  EXPECT_EQ(names[0], "cpu:0");
  EXPECT_EQ(names[1], "cpu:1");
  EXPECT_EQ(resp.devices(0).kind(), "cpu");
  EXPECT_EQ(resp.devices(0).memory_budget(), kBudget);
  EXPECT_GT(resp.devices(0).total_memory(), 0u);
  EXPECT_FALSE(resp.server_version().empty());
}

TEST_F(ServiceTest, CreateMulFetch) {
  v1::TensorInfo x = CreateInt64({1, 2, 3});
  v1::TensorInfo y = CreateInt64({5, 8, 1});
  EXPECT_EQ(x.device(), "cpu:0");
  EXPECT_EQ(x.nbytes(), 24u);
  v1::TensorInfo z;
  ASSERT_TRUE(Binary(v1::MUL, x.handle(), y.handle(), &z).ok());
  EXPECT_EQ(z.dtype(), v1::INT64);
  ASSERT_EQ(z.shape_size(), 1);
  EXPECT_EQ(z.shape(0), 3);
  EXPECT_EQ(FetchInt64(z.handle()), (std::vector<int64_t>{5, 16, 3}));
}

TEST_F(ServiceTest, BinaryOpsPromoteAndBroadcast) {
  v1::CreateRequest req;
  req.set_device("cpu:0");
  req.set_dtype(v1::FLOAT32);
  req.add_shape(2);
  req.add_shape(1);
  req.set_data(Bytes(std::vector<float>{1.5f, -2.0f}));
  v1::TensorInfo col;
  ASSERT_TRUE(Create(req, &col).ok());
  v1::TensorInfo row = CreateInt64({1, 2, 4});
  v1::TensorInfo sum;
  ASSERT_TRUE(Binary(v1::ADD, col.handle(), row.handle(), &sum).ok());
  EXPECT_EQ(sum.dtype(), v1::FLOAT32);
  ASSERT_EQ(sum.shape_size(), 2);
  EXPECT_EQ(sum.shape(0), 2);
  EXPECT_EQ(sum.shape(1), 3);
  std::string data;
  ASSERT_TRUE(Fetch(sum.handle(), &data).ok());
  std::vector<float> v(6);
  std::memcpy(v.data(), data.data(), 24);
  EXPECT_EQ(v, (std::vector<float>{2.5f, 3.5f, 5.5f, -1.0f, 0.0f, 2.0f}));

  // Integer true division gives float32.
  v1::TensorInfo q;
  ASSERT_TRUE(Binary(v1::DIV, row.handle(), row.handle(), &q).ok());
  EXPECT_EQ(q.dtype(), v1::FLOAT32);
}

TEST_F(ServiceTest, SameDeviceRuleUsesPyTorchMessage) {
  v1::TensorInfo a = CreateInt64({1, 2, 3}, "cpu:0");
  v1::TensorInfo b = CreateInt64({5, 8, 1}, "cpu:1");
  grpc::Status s = Binary(v1::MUL, a.handle(), b.handle());
  EXPECT_EQ(s.error_code(), grpc::StatusCode::FAILED_PRECONDITION);
  EXPECT_EQ(s.error_message(),
            "Expected all tensors to be on the same device, but found at "
            "least two devices, cpu:0 and cpu:1!");
  grpc::ClientContext ctx;
  v1::MatMulRequest mm;
  mm.set_session(session_);
  mm.set_lhs(b.handle());
  mm.set_rhs(a.handle());
  v1::TensorResponse resp;
  s = stub_->MatMul(&ctx, mm, &resp);
  EXPECT_EQ(s.error_code(), grpc::StatusCode::FAILED_PRECONDITION);
  EXPECT_THAT(s.error_message(), HasSubstr("cpu:1 and cpu:0!"));
}

TEST_F(ServiceTest, ToReturnsSameHandleOnSameDevice) {
  v1::TensorInfo x = CreateInt64({1, 2, 3}, "cpu:0");
  v1::TensorInfo same, copy, moved;
  ASSERT_TRUE(To(x.handle(), "cpu", false, &same).ok());
  EXPECT_EQ(same.handle(), x.handle());
  ASSERT_TRUE(To(x.handle(), "cpu:0", true, &copy).ok());
  EXPECT_NE(copy.handle(), x.handle());
  ASSERT_TRUE(To(x.handle(), "cpu:1", false, &moved).ok());
  EXPECT_NE(moved.handle(), x.handle());
  EXPECT_EQ(moved.device(), "cpu:1");
  EXPECT_EQ(FetchInt64(moved.handle()), (std::vector<int64_t>{1, 2, 3}));
  v1::TensorInfo back;
  ASSERT_TRUE(To(moved.handle(), "cpu:1", false, &back).ok());
  EXPECT_EQ(back.handle(), moved.handle());
}

TEST_F(ServiceTest, CreateRejectsBadInput) {
  struct Case {
    const char* what;
    std::function<void(v1::CreateRequest&)> edit;
    grpc::StatusCode code;
    const char* message_part;
  };
  const std::vector<Case> cases = {
      {"size != shape x dtype",
       [](v1::CreateRequest& r) { r.set_data(std::string(23, '\0')); },
       grpc::StatusCode::INVALID_ARGUMENT, "24 bytes"},
      {"negative dim", [](v1::CreateRequest& r) { r.set_shape(0, -3); },
       grpc::StatusCode::INVALID_ARGUMENT, "-3"},
      {"rank 9",
       [](v1::CreateRequest& r) {
         r.clear_shape();
         for (int i = 0; i < 9; ++i) r.add_shape(1);
         r.set_data(std::string(8, '\0'));
       },
       grpc::StatusCode::INVALID_ARGUMENT, "rank"},
      {"element count overflows",
       [](v1::CreateRequest& r) {
         r.clear_shape();
         r.add_shape(int64_t{1} << 40);
         r.add_shape(int64_t{1} << 40);
       },
       grpc::StatusCode::INVALID_ARGUMENT, "too many elements"},
      {"byte size overflows",
       [](v1::CreateRequest& r) {
         r.clear_shape();
         r.add_shape(int64_t{1} << 31);
         r.add_shape(int64_t{1} << 31);
       },
       grpc::StatusCode::INVALID_ARGUMENT, "[2147483648, 2147483648]"},
      {"unknown dtype",
       [](v1::CreateRequest& r) { r.set_dtype(static_cast<v1::DType>(42)); },
       grpc::StatusCode::INVALID_ARGUMENT, "unknown dtype 42"},
      {"unset dtype",
       [](v1::CreateRequest& r) { r.set_dtype(v1::DTYPE_UNSPECIFIED); },
       grpc::StatusCode::INVALID_ARGUMENT, "dtype is not set"},
      {"malformed device", [](v1::CreateRequest& r) { r.set_device("gpu:0"); },
       grpc::StatusCode::INVALID_ARGUMENT, "gpu:0"},
      {"absent device", [](v1::CreateRequest& r) { r.set_device("cuda:3"); },
       grpc::StatusCode::NOT_FOUND, "available devices"},
      {"unknown session",
       [](v1::CreateRequest& r) { r.set_session("no-such-session"); },
       grpc::StatusCode::NOT_FOUND, "session"},
      {"no source", [](v1::CreateRequest& r) { r.clear_data(); },
       grpc::StatusCode::INVALID_ARGUMENT, "source"},
      {"rand of int64",
       [](v1::CreateRequest& r) { r.mutable_fill()->set_kind(v1::Fill::RAND); },
       grpc::StatusCode::FAILED_PRECONDITION, "Long"},
      {"unset fill kind", [](v1::CreateRequest& r) { r.mutable_fill(); },
       grpc::StatusCode::INVALID_ARGUMENT, "fill kind"},
  };
  for (const Case& c : cases) {
    v1::CreateRequest req;
    req.set_session(session_);
    req.set_device("cpu");
    req.set_dtype(v1::INT64);
    req.add_shape(3);
    req.set_data(Bytes(std::vector<int64_t>{1, 2, 3}));
    c.edit(req);
    grpc::Status s = Create(req);
    EXPECT_EQ(s.error_code(), c.code) << c.what << ": " << s.error_message();
    EXPECT_THAT(s.error_message(), HasSubstr(c.message_part)) << c.what;
  }
  // Nothing leaked from all those failures, and the server still serves.
  EXPECT_EQ(HeldBytes("cpu:0"), 0u);
  EXPECT_EQ(FetchInt64(CreateInt64({7}).handle()), (std::vector<int64_t>{7}));
}

TEST_F(ServiceTest, EmptyAndScalarTensors) {
  v1::CreateRequest req;
  req.set_dtype(v1::FLOAT32);
  req.add_shape(0);
  req.add_shape(3);
  req.set_data("");  // zero bytes, present
  v1::TensorInfo empty;
  ASSERT_TRUE(Create(req, &empty).ok());
  EXPECT_EQ(empty.nbytes(), 0u);
  std::string data;
  int chunks = 0;
  ASSERT_TRUE(Fetch(empty.handle(), &data, 0, 0, &chunks).ok());
  EXPECT_EQ(chunks, 1);  // metadata still arrives
  EXPECT_TRUE(data.empty());

  v1::CreateRequest scalar;
  scalar.set_dtype(v1::FLOAT64);
  scalar.set_data(Bytes(std::vector<double>{2.5}));
  v1::TensorInfo s;
  ASSERT_TRUE(Create(scalar, &s).ok());
  EXPECT_EQ(s.shape_size(), 0);
  v1::TensorInfo sq;
  ASSERT_TRUE(Binary(v1::MUL, s.handle(), s.handle(), &sq).ok());
  ASSERT_TRUE(Fetch(sq.handle(), &data).ok());
  double v = 0;
  ASSERT_EQ(data.size(), sizeof v);
  std::memcpy(&v, data.data(), sizeof v);
  EXPECT_EQ(v, 6.25);
}

TEST_F(ServiceTest, FillsAndArange) {
  v1::CreateRequest req;
  req.set_dtype(v1::INT64);
  req.mutable_fill()->set_kind(v1::Fill::ARANGE);
  req.mutable_fill()->set_start(2);
  req.mutable_fill()->set_end(11);
  req.mutable_fill()->set_step(3);
  v1::TensorInfo r;
  ASSERT_TRUE(Create(req, &r).ok());
  EXPECT_EQ(FetchInt64(r.handle()), (std::vector<int64_t>{2, 5, 8}));

  v1::CreateRequest rand;
  rand.set_dtype(v1::FLOAT32);
  rand.add_shape(64);
  rand.mutable_fill()->set_kind(v1::Fill::RAND);
  rand.mutable_fill()->set_seed(1234);
  v1::TensorInfo r1, r2;
  ASSERT_TRUE(Create(rand, &r1).ok());
  ASSERT_TRUE(Create(rand, &r2).ok());
  std::string d1, d2;
  ASSERT_TRUE(Fetch(r1.handle(), &d1).ok());
  ASSERT_TRUE(Fetch(r2.handle(), &d2).ok());
  EXPECT_EQ(d1, d2);  // seeded: reproducible
  std::vector<float> v(64);
  std::memcpy(v.data(), d1.data(), d1.size());
  for (float x : v) {
    EXPECT_GE(x, 0.0f);
    EXPECT_LT(x, 1.0f);
  }
}

TEST_F(ServiceTest, MatMulChecksShapes) {
  v1::CreateRequest a;
  a.set_dtype(v1::FLOAT32);
  a.add_shape(2);
  a.add_shape(3);
  a.mutable_fill()->set_kind(v1::Fill::ONES);
  v1::TensorInfo ta;
  ASSERT_TRUE(Create(a, &ta).ok());
  grpc::ClientContext ctx;
  v1::MatMulRequest mm;
  mm.set_session(session_);
  mm.set_lhs(ta.handle());
  mm.set_rhs(ta.handle());
  v1::TensorResponse resp;
  grpc::Status s = stub_->MatMul(&ctx, mm, &resp);
  EXPECT_EQ(s.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_EQ(s.error_message(),
            "mat1 and mat2 shapes cannot be multiplied (2x3 and 2x3)");

  // (2x3) @ (3x2) of ones = 3s.
  v1::CreateRequest b = a;
  b.set_shape(0, 3);
  b.set_shape(1, 2);
  v1::TensorInfo tb;
  ASSERT_TRUE(Create(b, &tb).ok());
  grpc::ClientContext ctx2;
  mm.set_rhs(tb.handle());
  ASSERT_TRUE(stub_->MatMul(&ctx2, mm, &resp).ok());
  std::string data;
  ASSERT_TRUE(Fetch(resp.tensor().handle(), &data).ok());
  std::vector<float> v(4);
  std::memcpy(v.data(), data.data(), 16);
  EXPECT_EQ(v, (std::vector<float>{3, 3, 3, 3}));
}

TEST_F(ServiceTest, FetchResumesAndChunks) {
  std::vector<int64_t> values(1000);
  for (size_t i = 0; i < values.size(); ++i) values[i] = static_cast<int64_t>(i * i);
  v1::TensorInfo t = CreateInt64(values);
  std::string all, tail;
  int chunks = 0;
  ASSERT_TRUE(Fetch(t.handle(), &all, 0, 1000, &chunks).ok());
  EXPECT_EQ(all, Bytes(values));
  EXPECT_EQ(chunks, 8);  // 8000 bytes in 1000-byte chunks
  ASSERT_TRUE(Fetch(t.handle(), &tail, 4000).ok());
  EXPECT_EQ(tail, Bytes(values).substr(4000));
  grpc::Status s = Fetch(t.handle(), &tail, 8001);
  EXPECT_EQ(s.error_code(), grpc::StatusCode::OUT_OF_RANGE);
  s = Fetch(987654321, &tail);
  EXPECT_EQ(s.error_code(), grpc::StatusCode::NOT_FOUND);
}

// Regression: the last chunk used to be held back until unrelated traffic
// flushed it, so a lone fetch on a quiet connection could stall for good.
TEST_F(ServiceTest, LoneFetchesCompleteOnAQuietConnection) {
  // One generous deadline for all 20 (they take ~10 ms in all; with the bug
  // they took ~6 s or never finished).
  const auto deadline = std::chrono::system_clock::now() + std::chrono::seconds(3);
  v1::TensorInfo t = CreateInt64({5, 16, 3});
  for (int i = 0; i < 20; ++i) {
    grpc::ClientContext ctx;
    ctx.set_deadline(deadline);
    v1::FetchRequest req;
    req.set_session(session_);
    req.set_handle(t.handle());
    auto reader = stub_->Fetch(&ctx, req);
    v1::FetchChunk chunk;
    int chunks = 0;
    while (reader->Read(&chunk)) ++chunks;
    grpc::Status s = reader->Finish();
    ASSERT_TRUE(s.ok()) << "fetch " << i << ": " << s.error_message();
    EXPECT_EQ(chunks, 1);
  }
}

TEST_F(ServiceTest, UploadStreamsAndValidates) {
  std::vector<float> values(300000);  // 1.2 MB, several messages
  for (size_t i = 0; i < values.size(); ++i) values[i] = static_cast<float>(i) * 0.5f;
  const std::string bytes = Bytes(values);
  auto upload = [&](const std::vector<v1::UploadRequest>& messages,
                    v1::TensorInfo* out) {
    grpc::ClientContext ctx;
    v1::TensorResponse resp;
    auto writer = stub_->Upload(&ctx, &resp);
    for (const auto& m : messages) {
      if (!writer->Write(m)) break;
    }
    writer->WritesDone();
    grpc::Status s = writer->Finish();
    if (out != nullptr) *out = resp.tensor();
    return s;
  };
  v1::UploadRequest head;
  head.mutable_header()->set_session(session_);
  head.mutable_header()->set_device("cpu:1");
  head.mutable_header()->set_dtype(v1::FLOAT32);
  head.mutable_header()->add_shape(static_cast<int64_t>(values.size()));
  std::vector<v1::UploadRequest> messages{head};
  for (size_t off = 0; off < bytes.size(); off += 256 << 10) {
    v1::UploadRequest m;
    m.set_data(bytes.substr(off, 256 << 10));
    messages.push_back(m);
  }
  v1::TensorInfo t;
  grpc::Status s = upload(messages, &t);
  ASSERT_TRUE(s.ok()) << s.error_message();
  EXPECT_EQ(t.device(), "cpu:1");
  std::string back;
  ASSERT_TRUE(Fetch(t.handle(), &back).ok());
  ASSERT_EQ(back.size(), bytes.size());
  EXPECT_TRUE(back == bytes) << "first difference at byte "
                             << std::mismatch(back.begin(), back.end(), bytes.begin()).first - back.begin();

  // Short stream, long stream, no header, two headers.
  std::vector<v1::UploadRequest> short_stream(messages.begin(), messages.end() - 1);
  s = upload(short_stream, nullptr);
  EXPECT_EQ(s.error_code(), grpc::StatusCode::INVALID_ARGUMENT) << s.error_message();
  std::vector<v1::UploadRequest> long_stream = messages;
  long_stream.push_back(messages.back());
  s = upload(long_stream, nullptr);
  EXPECT_EQ(s.error_code(), grpc::StatusCode::INVALID_ARGUMENT) << s.error_message();
  s = upload({messages[1]}, nullptr);
  EXPECT_EQ(s.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_THAT(s.error_message(), HasSubstr("header"));
  s = upload({head, head}, nullptr);
  EXPECT_EQ(s.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  s = upload({}, nullptr);
  EXPECT_EQ(s.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  // Only the one good upload holds memory.
  EXPECT_EQ(HeldBytes("cpu:1"), bytes.size());
}

// Upload is read raw (proto/wire/bulk): any message protobuf accepts works,
// whatever the field order, and what it cannot mean is refused by name.
TEST_F(ServiceTest, RawUploadTakesAnyFieldOrderAndRefusesRepeatedData) {
  auto channel = grpc::CreateChannel(server_->address(),
                                     grpc::InsecureChannelCredentials());
  const grpc::internal::RpcMethod method(
      "/tensord.v1.TensorService/Upload",
      grpc::internal::RpcMethod::CLIENT_STREAMING, channel);
  auto upload = [&](const std::string& message, v1::TensorInfo* out) {
    grpc::ClientContext ctx;
    v1::TensorResponse resp;
    std::unique_ptr<grpc::ClientWriter<grpc::ByteBuffer>> writer(
        grpc::internal::ClientWriterFactory<grpc::ByteBuffer>::Create(
            channel.get(), method, &ctx, &resp));
    grpc::Slice slice(message);
    writer->Write(grpc::ByteBuffer(&slice, 1));
    writer->WritesDone();
    grpc::Status s = writer->Finish();
    if (out != nullptr) *out = resp.tensor();
    return s;
  };
  v1::UploadRequest header;
  header.mutable_header()->set_session(session_);
  header.mutable_header()->set_device("cpu:0");
  header.mutable_header()->set_dtype(v1::INT64);
  header.mutable_header()->add_shape(3);
  v1::UploadRequest data;
  data.set_data(Bytes(std::vector<int64_t>{5, 16, 3}));
  // `data` before `header` in the one message.
  v1::TensorInfo t;
  grpc::Status s =
      upload(data.SerializeAsString() + header.SerializeAsString(), &t);
  ASSERT_TRUE(s.ok()) << s.error_message();
  std::string back;
  ASSERT_TRUE(Fetch(t.handle(), &back).ok());
  EXPECT_EQ(back, data.data());
  // `data` twice: protobuf would keep the second; we refuse the ambiguity.
  s = upload(header.SerializeAsString() + data.SerializeAsString() +
                 data.SerializeAsString(),
             nullptr);
  EXPECT_EQ(s.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_THAT(s.error_message(), HasSubstr("carries `data` 2 times"));
  // Not an UploadRequest at all.
  s = upload(std::string("\x0a\x05\xff", 3), nullptr);
  EXPECT_EQ(s.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_THAT(s.error_message(),
              HasSubstr("is not a tensord.v1.UploadRequest"));
  // Only the good upload holds memory.
  EXPECT_EQ(HeldBytes("cpu:0"), 24u);
}

TEST_F(ServiceTest, HandlesAreSessionScoped) {
  v1::TensorInfo mine = CreateInt64({1, 2, 3});
  const std::string other = OpenSession();
  v1::TensorInfo out;
  grpc::Status s = To(mine.handle(), "cpu:1", false, &out, other);
  EXPECT_EQ(s.error_code(), grpc::StatusCode::NOT_FOUND);
  grpc::ClientContext ctx;
  v1::GetTensorRequest get;
  get.set_session(other);
  get.set_handle(mine.handle());
  v1::TensorResponse resp;
  EXPECT_EQ(stub_->GetTensor(&ctx, get, &resp).error_code(),
            grpc::StatusCode::NOT_FOUND);
}

TEST_F(ServiceTest, ReleaseListAndClose) {
  v1::TensorInfo a = CreateInt64({1, 2, 3});
  v1::TensorInfo b = CreateInt64({4, 5});
  b.set_tag("");
  {
    grpc::ClientContext ctx;
    v1::ListTensorsRequest req;
    req.set_session(session_);
    v1::ListTensorsResponse resp;
    ASSERT_TRUE(stub_->ListTensors(&ctx, req, &resp).ok());
    EXPECT_EQ(resp.tensors_size(), 2);
    EXPECT_EQ(resp.total_bytes(), 40u);
  }
  auto release = [&](uint64_t h) {
    grpc::ClientContext ctx;
    v1::ReleaseRequest req;
    req.set_session(session_);
    req.set_handle(h);
    v1::ReleaseResponse resp;
    return stub_->Release(&ctx, req, &resp);
  };
  EXPECT_TRUE(release(a.handle()).ok());
  EXPECT_EQ(release(a.handle()).error_code(), grpc::StatusCode::NOT_FOUND);
  EXPECT_EQ(HeldBytes("cpu:0"), 16u);
  {
    grpc::ClientContext ctx;
    v1::CloseSessionRequest req;
    req.set_session(session_);
    v1::CloseSessionResponse resp;
    ASSERT_TRUE(stub_->CloseSession(&ctx, req, &resp).ok());
    EXPECT_EQ(resp.released_tensors(), 1u);
    EXPECT_EQ(resp.released_bytes(), 16u);
  }
  EXPECT_EQ(HeldBytes("cpu:0"), 0u);
  EXPECT_EQ(release(b.handle()).error_code(), grpc::StatusCode::NOT_FOUND);
}

TEST_F(ServiceTest, BudgetExhaustionIsAnErrorNotACrash) {
  v1::CreateRequest big;
  big.set_dtype(v1::FLOAT32);
  big.add_shape(static_cast<int64_t>(kBudget / 4 + 1));
  big.mutable_fill()->set_kind(v1::Fill::ZEROS);
  grpc::Status s = Create(big);
  EXPECT_EQ(s.error_code(), grpc::StatusCode::RESOURCE_EXHAUSTED);
  EXPECT_THAT(s.error_message(), HasSubstr("cpu:0"));
  EXPECT_THAT(s.error_message(), HasSubstr(std::to_string(kBudget + 4)));
  // Half the budget fits, twice; a third does not; releasing makes room.
  big.set_shape(0, static_cast<int64_t>(kBudget / 8));
  v1::TensorInfo h1, h2;
  ASSERT_TRUE(Create(big, &h1).ok());
  ASSERT_TRUE(Create(big, &h2).ok());
  EXPECT_EQ(Create(big).error_code(), grpc::StatusCode::RESOURCE_EXHAUSTED);
  // Another device has its own budget.
  big.set_device("cpu:1");
  EXPECT_TRUE(Create(big).ok());
  EXPECT_EQ(FetchInt64(CreateInt64({3}, "cpu:1").handle()),
            (std::vector<int64_t>{3}));
}

TEST_F(ServiceTest, UnknownBinaryOpIsInvalid) {
  v1::TensorInfo a = CreateInt64({1});
  grpc::Status s = Binary(static_cast<v1::BinaryOp>(77), a.handle(), a.handle());
  EXPECT_EQ(s.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_THAT(s.error_message(), HasSubstr("77"));
}

// A unary op's numeric arguments (UnaryArgs.args): the op table's defaults
// where absent, its count at most (more is INVALID_ARGUMENT naming the op),
// none for an op without any.
TEST_F(ServiceTest, UnaryArgumentsAreDefaultedAndBounded) {
  v1::CreateRequest c;
  c.set_dtype(v1::FLOAT64);
  c.add_shape(2);
  c.mutable_fill()->set_kind(v1::Fill::FULL);
  c.mutable_fill()->set_value(-2);
  v1::TensorInfo x;
  ASSERT_TRUE(Create(c, &x).ok());
  auto run = [&](v1::UnaryOp op, std::vector<double> args,
                 v1::TensorResponse* resp) {
    grpc::ClientContext ctx;
    v1::RunRequest req;
    req.set_session(session_);
    v1::UnaryArgs* u = req.mutable_op()->mutable_unary();
    u->set_op(op);
    u->mutable_x()->set_handle(x.handle());
    u->mutable_args()->Add(args.begin(), args.end());
    return stub_->Run(&ctx, req, resp);
  };
  v1::TensorResponse resp;
  ASSERT_TRUE(run(v1::HARDTANH, {}, &resp).ok());  // min_val -1
  EXPECT_EQ(FetchAs<double>(resp.tensor().handle()),
            (std::vector<double>{-1, -1}));
  ASSERT_TRUE(run(v1::HARDTANH, {-1.5}, &resp).ok());  // max_val 1
  EXPECT_EQ(FetchAs<double>(resp.tensor().handle()),
            (std::vector<double>{-1.5, -1.5}));
  ASSERT_TRUE(run(v1::LEAKY_RELU, {0.25}, &resp).ok());
  EXPECT_EQ(FetchAs<double>(resp.tensor().handle()),
            (std::vector<double>{-0.5, -0.5}));
  grpc::Status s = run(v1::HARDTANH, {-1, 1, 2}, &resp);
  EXPECT_EQ(s.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_EQ(s.error_message(),
            "hardtanh takes 2 numeric argument(s) in UnaryArgs.args, not 3");
  s = run(v1::RELU, {0.5}, &resp);
  EXPECT_EQ(s.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_THAT(s.error_message(), HasSubstr("relu takes 0 numeric"));
}

// where's input and other must each be a tensor or a number; clamp's
// bounds may be omitted, not both. Over the wire, as a client written from
// the proto sends them.
TEST_F(ServiceTest, WhereAndClampOperandsAreChecked) {
  v1::TensorInfo a = CreateInt64({1, -2, 3});
  auto run = [&](const v1::Op& op, v1::TensorResponse* resp) {
    grpc::ClientContext ctx;
    v1::RunRequest req;
    req.set_session(session_);
    *req.mutable_op() = op;
    return stub_->Run(&ctx, req, resp);
  };
  v1::TensorResponse resp;
  v1::Op where;
  where.mutable_where()->mutable_condition()->set_handle(a.handle());
  where.mutable_where()->mutable_input()->set_handle(a.handle());
  grpc::Status s = run(where, &resp);
  EXPECT_EQ(s.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_EQ(s.error_message(),
            "where: `other` is not set: give a tensor or a number");
  where.mutable_where()->mutable_other_scalar()->set_int_value(0);
  s = run(where, &resp);  // an int64 condition
  EXPECT_EQ(s.error_code(), grpc::StatusCode::FAILED_PRECONDITION);
  EXPECT_THAT(s.error_message(), HasSubstr("boolean tensor"));
  v1::Op clamp;
  clamp.mutable_clamp()->mutable_x()->set_handle(a.handle());
  s = run(clamp, &resp);
  EXPECT_EQ(s.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_THAT(s.error_message(), HasSubstr("At least one of 'min' or 'max'"));
  clamp.mutable_clamp()->mutable_max_scalar()->set_int_value(0);
  clamp.mutable_clamp()->mutable_min()->set_handle(a.handle());
  s = run(clamp, &resp);  // min = x itself, max 0
  ASSERT_TRUE(s.ok()) << s.error_message();
  EXPECT_THAT(FetchInt64(resp.tensor().handle()), ElementsAre(0, -2, 0));
}

TEST_F(ServiceTest, OperatorViewsCountEverySession) {
  CreateInt64({1, 2, 3});
  const std::string other = OpenSession();
  {
    grpc::ClientContext ctx;
    v1::ListSessionsResponse resp;
    ASSERT_TRUE(stub_->ListSessions(&ctx, {}, &resp).ok());
    ASSERT_EQ(resp.sessions_size(), 2);
    EXPECT_EQ(resp.sessions(0).id_prefix(), session_.substr(0, 8));
    EXPECT_EQ(resp.sessions(0).tensors(), 1u);
    EXPECT_EQ(resp.sessions(0).bytes(), 24u);
    EXPECT_EQ(resp.sessions(1).tensors(), 0u);
    // The full id is a credential and never listed.
    EXPECT_EQ(resp.DebugString().find(session_), std::string::npos);
  }
  grpc::ClientContext ctx;
  v1::GetStatsResponse stats;
  ASSERT_TRUE(stub_->GetStats(&ctx, {}, &stats).ok());
  EXPECT_EQ(stats.sessions(), 2u);
  EXPECT_EQ(stats.tensors(), 1u);
  EXPECT_EQ(stats.held_bytes(), 24u);
  EXPECT_EQ(stats.devices_size(), 2);
  EXPECT_GE(stats.uptime_ms(), 0);
}

TEST_F(ServiceTest, InProcessChannelServesToo) {
  auto stub = v1::TensorService::NewStub(server_->InProcessChannel());
  grpc::ClientContext ctx;
  v1::ListDevicesResponse resp;
  ASSERT_TRUE(stub->ListDevices(&ctx, {}, &resp).ok());
  EXPECT_GE(resp.devices_size(), 2);
}

}  // namespace
}  // namespace tensord::server

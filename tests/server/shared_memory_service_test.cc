// The same-host shared-memory RPCs through raw generated stubs against a
// real server on a loopback socket: ownership proof, bounds, round trips
// both ways, and regions dying with their session (close, lease, shutdown).
#include <fcntl.h>
#include <sys/mman.h>
#include <unistd.h>

#include <chrono>
#include <cstdint>
#include <cstring>
#include <limits>
#include <memory>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include <grpcpp/grpcpp.h>
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "server/server.h"
#include "tensord/v1/tensord.grpc.pb.h"

namespace tensord::server {
namespace {

using ::testing::HasSubstr;

constexpr uint64_t kBudget = 8 << 20;  // per host device
constexpr size_t kDataOffset = 4096;   // the wire's header page

// A POSIX shared-memory object made the way a client makes one.
class ShmObject {
 public:
  explicit ShmObject(size_t data_bytes) : size_(kDataOffset + data_bytes) {
    std::random_device rd;
    name_ = "/tensord-test" + std::to_string(rd()) + std::to_string(rd());
    const int fd = ::shm_open(name_.c_str(), O_CREAT | O_EXCL | O_RDWR, 0600);
    EXPECT_GE(fd, 0);
    EXPECT_EQ(::ftruncate(fd, static_cast<off_t>(size_)), 0);
    base_ = static_cast<uint8_t*>(::mmap(nullptr, size_, PROT_READ | PROT_WRITE,
                                         MAP_SHARED, fd, 0));
    EXPECT_NE(base_, MAP_FAILED);
    ::close(fd);
    cookie_.resize(16);
    for (char& c : cookie_) c = static_cast<char>(rd());
    std::memcpy(base_, cookie_.data(), cookie_.size());
  }
  ~ShmObject() {
    ::munmap(base_, size_);
    ::shm_unlink(name_.c_str());
  }
  const std::string& name() const { return name_; }
  const std::string& cookie() const { return cookie_; }
  uint64_t size() const { return size_; }
  uint8_t* data() const { return base_ + kDataOffset; }

 private:
  std::string name_;
  std::string cookie_;
  size_t size_;
  uint8_t* base_ = nullptr;
};

class SharedMemoryServiceTest : public ::testing::Test {
 protected:
  void SetUp() override {
    ServerOptions options;
    options.listen = "127.0.0.1:0";
    options.runtime.host_devices = 2;
    options.runtime.host_memory_budget = kBudget;
    auto server = Server::Start(std::move(options));
    ASSERT_TRUE(server.ok()) << server.status();
    server_ = std::move(*server);
    stub_ = v1::TensorService::NewStub(grpc::CreateChannel(
        server_->address(), grpc::InsecureChannelCredentials()));
    session_ = OpenSession();
  }

  std::string OpenSession(int64_t ttl_ms = 0) {
    grpc::ClientContext ctx;
    v1::OpenSessionRequest req;
    req.set_ttl_ms(ttl_ms);
    v1::OpenSessionResponse resp;
    EXPECT_TRUE(stub_->OpenSession(&ctx, req, &resp).ok());
    return resp.session();
  }

  grpc::Status Register(const std::string& name, uint64_t size,
                        const std::string& cookie, uint64_t* region = nullptr,
                        const std::string& session = "") {
    grpc::ClientContext ctx;
    v1::RegisterSharedMemoryRequest req;
    req.set_session(session.empty() ? session_ : session);
    req.set_name(name);
    req.set_size(size);
    req.set_cookie(cookie);
    v1::RegisterSharedMemoryResponse resp;
    grpc::Status s = stub_->RegisterSharedMemory(&ctx, req, &resp);
    if (s.ok()) {
      EXPECT_EQ(resp.data_bytes(), size - kDataOffset);
    }
    if (region != nullptr) *region = resp.region();
    return s;
  }
  uint64_t Register(const ShmObject& shm, const std::string& session = "") {
    uint64_t region = 0;
    grpc::Status s =
        Register(shm.name(), shm.size(), shm.cookie(), &region, session);
    EXPECT_TRUE(s.ok()) << s.error_message();
    return region;
  }

  grpc::Status Upload(uint64_t region, uint64_t offset, v1::DType dtype,
                      std::vector<int64_t> shape, v1::TensorInfo* out = nullptr,
                      const std::string& request_id = "",
                      const std::string& device = "cpu:0") {
    grpc::ClientContext ctx;
    if (!request_id.empty()) ctx.AddMetadata("tensord-request-id", request_id);
    v1::UploadFromSharedMemoryRequest req;
    req.set_session(session_);
    req.set_region(region);
    req.set_offset(offset);
    req.set_device(device);
    req.set_dtype(dtype);
    for (int64_t d : shape) req.add_shape(d);
    v1::TensorResponse resp;
    grpc::Status s = stub_->UploadFromSharedMemory(&ctx, req, &resp);
    if (out != nullptr) *out = resp.tensor();
    return s;
  }

  grpc::Status FetchTo(uint64_t handle, uint64_t region, uint64_t offset,
                       v1::TensorInfo* out = nullptr) {
    grpc::ClientContext ctx;
    v1::FetchToSharedMemoryRequest req;
    req.set_session(session_);
    req.set_handle(handle);
    req.set_region(region);
    req.set_offset(offset);
    v1::TensorResponse resp;
    grpc::Status s = stub_->FetchToSharedMemory(&ctx, req, &resp);
    if (out != nullptr) *out = resp.tensor();
    return s;
  }

  grpc::Status Unregister(uint64_t region) {
    grpc::ClientContext ctx;
    v1::UnregisterSharedMemoryRequest req;
    req.set_session(session_);
    req.set_region(region);
    v1::UnregisterSharedMemoryResponse resp;
    return stub_->UnregisterSharedMemory(&ctx, req, &resp);
  }

  v1::GetStatsResponse Stats() {
    grpc::ClientContext ctx;
    v1::GetStatsResponse resp;
    EXPECT_TRUE(stub_->GetStats(&ctx, {}, &resp).ok());
    return resp;
  }

  std::string ReadBytes(uint64_t handle) {
    grpc::ClientContext ctx;
    v1::ReadRequest req;
    req.set_session(session_);
    req.set_handle(handle);
    v1::FetchChunk resp;
    grpc::Status s = stub_->Read(&ctx, req, &resp);
    EXPECT_TRUE(s.ok()) << s.error_message();
    return resp.data();
  }

  std::unique_ptr<Server> server_;
  std::unique_ptr<v1::TensorService::Stub> stub_;
  std::string session_;
};

TEST_F(SharedMemoryServiceTest, WrongCookieIsPermissionDenied) {
  ShmObject shm(4096);
  std::string wrong = shm.cookie();
  wrong[15] ^= 1;
  grpc::Status s = Register(shm.name(), shm.size(), wrong);
  EXPECT_EQ(s.error_code(), grpc::StatusCode::PERMISSION_DENIED);
  EXPECT_THAT(s.error_message(), HasSubstr("cookie does not match"));
  EXPECT_EQ(Stats().shared_memory_regions(), 0u);
}

TEST_F(SharedMemoryServiceTest, UnknownNameIsNotFoundNamingTheHost) {
  grpc::Status s =
      Register("/tensord-doesnotexist0123", 8192, std::string(16, 'x'));
  EXPECT_EQ(s.error_code(), grpc::StatusCode::NOT_FOUND);
  EXPECT_THAT(s.error_message(),
              HasSubstr("no shared memory region '/tensord-doesnotexist0123' "
                        "on the server's host: shared memory works only when "
                        "client and server share a host"));
}

TEST_F(SharedMemoryServiceTest, MalformedRequestsAreInvalid) {
  ShmObject shm(4096);
  // Only /tensord-* names: the server opens nothing else.
  EXPECT_EQ(Register("/etc-passwd", shm.size(), shm.cookie()).error_code(),
            grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_EQ(Register("/tensord-../x", shm.size(), shm.cookie()).error_code(),
            grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_EQ(Register(shm.name(), shm.size(), "short").error_code(),
            grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_EQ(Register(shm.name(), 100, shm.cookie()).error_code(),
            grpc::StatusCode::INVALID_ARGUMENT);
  // Claiming more than the object has.
  grpc::Status s = Register(shm.name(), shm.size() + 1, shm.cookie());
  EXPECT_EQ(s.error_code(), grpc::StatusCode::OUT_OF_RANGE);
  EXPECT_THAT(s.error_message(), HasSubstr("smaller than the registered size"));
}

TEST_F(SharedMemoryServiceTest, RoundTripsBytesExactlyBothWays) {
  ShmObject shm(1 << 20);
  const uint64_t region = Register(shm);
  // Upload 1000 int64 from offset 512 of the data area.
  std::vector<int64_t> values(1000);
  for (size_t i = 0; i < values.size(); ++i) {
    values[i] = static_cast<int64_t>(i * 7919) - 5000;
  }
  std::memcpy(shm.data() + 512, values.data(), values.size() * 8);
  v1::TensorInfo t;
  grpc::Status s = Upload(region, 512, v1::INT64, {10, 100}, &t);
  ASSERT_TRUE(s.ok()) << s.error_message();
  EXPECT_EQ(t.nbytes(), 8000u);
  EXPECT_EQ(t.device(), "cpu:0");
  const std::string socket_bytes = ReadBytes(t.handle());
  ASSERT_EQ(socket_bytes.size(), 8000u);
  EXPECT_EQ(std::memcmp(socket_bytes.data(), values.data(), 8000), 0);

  // Fetch into another offset; the bytes around it stay untouched.
  std::memset(shm.data() + 20000, 0xAB, 8100);
  v1::TensorInfo meta;
  s = FetchTo(t.handle(), region, 20050, &meta);
  ASSERT_TRUE(s.ok()) << s.error_message();
  EXPECT_EQ(meta.handle(), t.handle());
  EXPECT_EQ(meta.nbytes(), 8000u);
  EXPECT_EQ(std::memcmp(shm.data() + 20050, values.data(), 8000), 0);
  EXPECT_EQ(shm.data()[20049], 0xAB);
  EXPECT_EQ(shm.data()[28050], 0xAB);

  const v1::GetStatsResponse stats = Stats();
  EXPECT_EQ(stats.shared_memory_regions(), 1u);
  EXPECT_EQ(stats.shared_memory_uploads(), 1u);
  EXPECT_EQ(stats.shared_memory_fetches(), 1u);
}

TEST_F(SharedMemoryServiceTest, OffsetsPastTheRegionAreOutOfRange) {
  ShmObject shm(4096);
  const uint64_t region = Register(shm);
  grpc::Status s = Upload(region, 4000, v1::INT64, {100});
  EXPECT_EQ(s.error_code(), grpc::StatusCode::OUT_OF_RANGE);
  EXPECT_THAT(s.error_message(),
              HasSubstr("offset 4000 + size 800 bytes is past the end"));
  EXPECT_THAT(s.error_message(), HasSubstr("its data area is 4096 bytes"));
  // offset + size overflows 64 bits: still OUT_OF_RANGE, never a wrap.
  s = Upload(region, std::numeric_limits<uint64_t>::max() - 7, v1::INT64, {2});
  EXPECT_EQ(s.error_code(), grpc::StatusCode::OUT_OF_RANGE);
  // A tensor larger than the region does not fit a fetch.
  v1::TensorInfo big;
  ASSERT_TRUE(Upload(region, 0, v1::INT64, {512}, &big).ok());
  s = FetchTo(big.handle(), region, 1);
  EXPECT_EQ(s.error_code(), grpc::StatusCode::OUT_OF_RANGE);
  EXPECT_THAT(s.error_message(), HasSubstr("offset 1 + size 4096 bytes"));
  // Nothing was allocated by the failed uploads.
  EXPECT_EQ(Stats().tensors(), 1u);
  // Bad shapes are INVALID_ARGUMENT as in Create.
  EXPECT_EQ(Upload(region, 0, v1::INT64, {-1}).error_code(),
            grpc::StatusCode::INVALID_ARGUMENT);
}

TEST_F(SharedMemoryServiceTest, UploadsAreAdmittedLikeEveryCreate) {
  ShmObject shm(kBudget + 4096);
  const uint64_t region = Register(shm);
  grpc::Status s = Upload(region, 0, v1::FLOAT32,
                          {static_cast<int64_t>(kBudget / 4 + 1)});
  EXPECT_EQ(s.error_code(), grpc::StatusCode::RESOURCE_EXHAUSTED);
  EXPECT_THAT(s.error_message(), HasSubstr("out of memory"));
}

// Issue 30: a tensor made from shared memory is admitted against the
// session's quota before it is allocated: one that fills the quota exactly
// is made, one element more is refused naming the quota, and the session
// holds what it held.
TEST_F(SharedMemoryServiceTest, UploadsAreAdmittedAtTheQuotaEdge) {
  ServerOptions options;
  options.listen = "127.0.0.1:0";
  options.runtime.host_memory_budget = kBudget;
  options.runtime.session_max_bytes = 4096;
  server_.reset();
  auto server = Server::Start(std::move(options));
  ASSERT_TRUE(server.ok()) << server.status();
  server_ = std::move(*server);
  stub_ = v1::TensorService::NewStub(grpc::CreateChannel(
      server_->address(), grpc::InsecureChannelCredentials()));
  session_ = OpenSession();
  ShmObject shm(4096 + 4);
  const uint64_t region = Register(shm);
  v1::TensorInfo made;
  ASSERT_TRUE(Upload(region, 0, v1::FLOAT32, {1024}, &made, "", "cpu").ok());
  EXPECT_EQ(Stats().held_bytes(), 4096u);
  grpc::Status s = Upload(region, 0, v1::FLOAT32, {1}, nullptr, "", "cpu");
  EXPECT_EQ(s.error_code(), grpc::StatusCode::RESOURCE_EXHAUSTED);
  EXPECT_THAT(s.error_message(),
              HasSubstr("session memory quota exceeded (--session-max-bytes): "
                        "requested 4 bytes; the session holds 4096 of its "
                        "limit of 4096 bytes"));
  EXPECT_EQ(Stats().held_bytes(), 4096u);
}

TEST_F(SharedMemoryServiceTest, RetriedUploadWithSameRequestIdIsDoneOnce) {
  ShmObject shm(4096);
  const uint64_t region = Register(shm);
  v1::TensorInfo first, second;
  ASSERT_TRUE(Upload(region, 0, v1::INT32, {4}, &first, "req-1").ok());
  ASSERT_TRUE(Upload(region, 0, v1::INT32, {4}, &second, "req-1").ok());
  EXPECT_EQ(first.handle(), second.handle());
  EXPECT_EQ(Stats().tensors(), 1u);
}

TEST_F(SharedMemoryServiceTest, UnknownAndForeignRegionsAreNotFound) {
  ShmObject shm(4096);
  const uint64_t region = Register(shm);
  grpc::Status s = Upload(region + 1000, 0, v1::INT32, {1});
  EXPECT_EQ(s.error_code(), grpc::StatusCode::NOT_FOUND);
  EXPECT_THAT(s.error_message(), HasSubstr("unknown shared memory region"));
  // Registered by another session: not this one's.
  ShmObject other(4096);
  const uint64_t foreign = Register(other, OpenSession());
  EXPECT_EQ(Upload(foreign, 0, v1::INT32, {1}).error_code(),
            grpc::StatusCode::NOT_FOUND);
  EXPECT_EQ(Unregister(foreign).error_code(), grpc::StatusCode::NOT_FOUND);
  EXPECT_EQ(Stats().shared_memory_regions(), 2u);
}

TEST_F(SharedMemoryServiceTest, UnregisterUnmaps) {
  ShmObject shm(4096);
  const uint64_t region = Register(shm);
  EXPECT_EQ(Stats().shared_memory_regions(), 1u);
  ASSERT_TRUE(Unregister(region).ok());
  EXPECT_EQ(Stats().shared_memory_regions(), 0u);
  EXPECT_EQ(Unregister(region).error_code(), grpc::StatusCode::NOT_FOUND);
  EXPECT_EQ(Upload(region, 0, v1::INT32, {1}).error_code(),
            grpc::StatusCode::NOT_FOUND);
}

TEST_F(SharedMemoryServiceTest, CloseSessionUnmapsItsRegions) {
  ShmObject a(4096), b(4096);
  const std::string session = OpenSession();
  const uint64_t region = Register(a, session);
  Register(b, session);
  EXPECT_EQ(Stats().shared_memory_regions(), 2u);
  grpc::ClientContext ctx;
  v1::CloseSessionRequest req;
  req.set_session(session);
  v1::CloseSessionResponse resp;
  ASSERT_TRUE(stub_->CloseSession(&ctx, req, &resp).ok());
  EXPECT_EQ(Stats().shared_memory_regions(), 0u);
  // The id means nothing in a live session either.
  EXPECT_EQ(Upload(region, 0, v1::INT32, {1}).error_code(),
            grpc::StatusCode::NOT_FOUND);
}

TEST_F(SharedMemoryServiceTest, ExpiredLeaseUnmapsItsRegions) {
  ShmObject shm(4096);
  Register(shm, OpenSession(/*ttl_ms=*/200));
  EXPECT_EQ(Stats().shared_memory_regions(), 1u);
  for (int i = 0; i < 100 && Stats().shared_memory_regions() != 0; ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  EXPECT_EQ(Stats().shared_memory_regions(), 0u);
}

TEST_F(SharedMemoryServiceTest, TooManyRegionsIsResourceExhausted) {
  ShmObject shm(4096);
  for (int i = 0; i < 16; ++i) Register(shm);  // one object, many regions
  grpc::Status s = Register(shm.name(), shm.size(), shm.cookie());
  EXPECT_EQ(s.error_code(), grpc::StatusCode::RESOURCE_EXHAUSTED);
}

TEST_F(SharedMemoryServiceTest, BoolBytesAreCheckedAfterTheCopy) {
  ShmObject shm(64);
  const uint64_t region = Register(shm);
  const uint8_t good[] = {0, 1, 1, 0, 1};
  std::memcpy(shm.data(), good, sizeof good);
  v1::TensorInfo t;
  ASSERT_TRUE(Upload(region, 0, v1::BOOL, {5}, &t).ok());
  shm.data()[3] = 2;  // the client's region, not the server's tensor
  grpc::Status bad = Upload(region, 0, v1::BOOL, {5});
  EXPECT_EQ(bad.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_THAT(bad.error_message(), HasSubstr("byte 3 is 2"));
  EXPECT_EQ(Stats().held_bytes(), 5u);  // only the good tensor
}

}  // namespace
}  // namespace tensord::server

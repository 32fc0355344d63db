// The client library against a real tensord server (two host devices, no
// GPU), reached both through the in-process channel and over loopback TCP.
#include <grpcpp/create_channel.h>
#include <grpcpp/security/credentials.h>
#include <gtest/gtest.h>

#include <fcntl.h>
#include <sys/mman.h>

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <memory>
#include <optional>
#include <sstream>
#include <string>
#include <vector>

#include "server/server.h"
#include "tensord/client.h"

namespace tensord {
namespace {

enum class Transport { kInProcess, kLoopback };

class ClientServerTest : public ::testing::TestWithParam<Transport> {
 protected:
  void SetUp() override {
    server::ServerOptions options;
    options.listen = "127.0.0.1:0";
    options.runtime.host_devices = 2;
    auto server = server::Server::Start(std::move(options));
    ASSERT_TRUE(server.ok()) << server.status();
    server_ = std::move(*server);
    client_.emplace(Channel());
  }

  void TearDown() override {
    client_.reset();
    server_.reset();
  }

  std::shared_ptr<grpc::Channel> Channel() {
    if (GetParam() == Transport::kInProcess) return server_->InProcessChannel();
    return grpc::CreateChannel(server_->address(),
                               grpc::InsecureChannelCredentials());
  }

  Client& client() { return *client_; }

  std::unique_ptr<server::Server> server_;
  std::optional<Client> client_;
};

// Runs `f`, which must throw tensord::Error, and returns the error.
template <typename F>
Error Catch(F f) {
  try {
    f();
  } catch (const Error& e) {
    return e;
  }
  ADD_FAILURE() << "no tensord::Error thrown";
  return Error(StatusCode::OK, "");
}

TEST_P(ClientServerTest, OpensASession) {
  EXPECT_FALSE(client().session().empty());
}

TEST_P(ClientServerTest, CreateMulFetchLoop) {
  for (int64_t i = 0; i < 20; ++i) {
    Tensor x = client().tensor<int64_t>({i, i + 1, i + 2});
    Tensor y = client().tensor<int64_t>({2, 3, 4}, "cpu:1").to("cpu:0");
    Tensor z = x * y;
    EXPECT_EQ(z.fetch<int64_t>(),
              (std::vector<int64_t>{2 * i, 3 * (i + 1), 4 * (i + 2)}));
    EXPECT_EQ(z.shape(), std::vector<int64_t>{3});
    EXPECT_EQ(z.dtype(), DType::kInt64);
  }
}

TEST_P(ClientServerTest, DesignClientExample) {
  Device dev = client().try_gpu(0);  // no GPU here: cpu
  EXPECT_EQ(dev, Device("cpu"));
  Tensor x = client().tensor<int64_t>({1, 2, 3});
  Tensor y = client().tensor<int64_t>({5, 8, 1}, dev);
  Tensor z = x.to(dev) * y;
  EXPECT_EQ(z.str(), "tensor([ 5, 16,  3])");
  std::ostringstream os;
  os << z;
  EXPECT_EQ(os.str(), "tensor([ 5, 16,  3])");
  EXPECT_EQ(z.fetch<int64_t>(), (std::vector<int64_t>{5, 16, 3}));

  // The same flow on the second device prints where the result lives.
  Tensor w = x.to("cpu:1") * y.to("cpu:1");
  EXPECT_EQ(w.device(), Device("cpu:1"));
  EXPECT_EQ(w.str(), "tensor([ 5, 16,  3], device='cpu:1')");
}

TEST_P(ClientServerTest, SameDeviceRule) {
  Tensor x = client().tensor<int64_t>({1, 2, 3});
  Tensor y = client().tensor<int64_t>({5, 8, 1}, "cpu:1");
  const std::string message =
      "Expected all tensors to be on the same device, but found at least two "
      "devices, cpu:0 and cpu:1!";
  Error e = Catch([&] { (void)(x * y); });
  EXPECT_EQ(e.code(), StatusCode::FAILED_PRECONDITION);
  EXPECT_EQ(e.message(), message);
  EXPECT_EQ(std::string(e.what()), "FAILED_PRECONDITION: " + message);
  EXPECT_EQ(Catch([&] { (void)x.matmul(y); }).code(),
            StatusCode::FAILED_PRECONDITION);
}

TEST_P(ClientServerTest, ToSameDeviceReturnsTheSameTensor) {
  Tensor x = client().tensor<float>({1, 2, 3});
  Tensor z = x.to("cpu:1");
  EXPECT_FALSE(z.is(x));
  EXPECT_TRUE(z.to("cpu:1").is(z));
  EXPECT_EQ(z.to("cpu:1").handle(), z.handle());
  EXPECT_TRUE(x.to("cpu").is(x));  // "cpu" names cpu:0
  Tensor copy = z.to("cpu:1", /*copy=*/true);
  EXPECT_FALSE(copy.is(z));
  EXPECT_EQ(copy.fetch<float>(), z.fetch<float>());
  EXPECT_TRUE(x.cpu().is(x));
}

TEST_P(ClientServerTest, LastCopyReleasesTheRemoteTensor) {
  const size_t before = client().tensors().size();
  {
    Tensor t = client().zeros({4, 4});
    EXPECT_EQ(client().tensors().size(), before + 1);
    {
      Tensor copy = t;  // shares the remote tensor
      EXPECT_EQ(client().tensors().size(), before + 1);
    }
    EXPECT_EQ(client().tensors().size(), before + 1);
    const std::vector<TensorInfo> infos = client().tensors();
    ASSERT_FALSE(infos.empty());
    EXPECT_EQ(infos.back().handle, t.handle());
    EXPECT_EQ(infos.back().shape, (std::vector<int64_t>{4, 4}));
    EXPECT_EQ(infos.back().nbytes, 64u);
  }
  EXPECT_EQ(client().tensors().size(), before);
}

TEST_P(ClientServerTest, TensorsOutliveTheirClient) {
  std::optional<Tensor> t;
  {
    Client other(Channel());
    t = other.tensor<int32_t>({7, 8});
  }
  // The session stays open while one of its tensors is alive.
  EXPECT_EQ(t->fetch<int32_t>(), (std::vector<int32_t>{7, 8}));
  EXPECT_EQ(t->str(), "tensor([7, 8], dtype=torch.int32)");
}

TEST_P(ClientServerTest, UploadAboveOneMiBRoundTripsExactly) {
  // 3 MiB + 28 bytes: four upload chunks and several fetch chunks.
  const int64_t n = (3 << 20) / 4 + 7;
  std::vector<float> values(n);
  for (int64_t i = 0; i < n; ++i) values[i] = static_cast<float>(i) * 0.5f - 7;
  Tensor t = client().tensor(values, "cpu:1");
  EXPECT_EQ(t.nbytes(), static_cast<uint64_t>(n) * 4);
  EXPECT_EQ(t.fetch<float>(), values);

  std::vector<int64_t> ints(300000);
  for (size_t i = 0; i < ints.size(); ++i) ints[i] = int64_t{1} << (i % 63);
  Tensor u = client().tensor(ints, {600, 500});
  EXPECT_EQ(u.shape(), (std::vector<int64_t>{600, 500}));
  EXPECT_EQ(u.fetch<int64_t>(), ints);
}

TEST_P(ClientServerTest, FetchVerifiesChunksOfLargeResults) {
  Tensor a = client().full({1024, 1024, 3}, 2.5, DType::kFloat64);
  const std::vector<double> host = a.fetch<double>();
  ASSERT_EQ(host.size(), 1024u * 1024 * 3);
  for (double v : host) ASSERT_EQ(v, 2.5);
  EXPECT_EQ(a.fetch_bytes().size(), a.nbytes());
}

TEST_P(ClientServerTest, Fills) {
  EXPECT_EQ(client().ones({2, 3}).str(),
            "tensor([[1., 1., 1.],\n        [1., 1., 1.]])");
  EXPECT_EQ(client().zeros({2}, DType::kInt32).fetch<int32_t>(),
            (std::vector<int32_t>{0, 0}));
  EXPECT_EQ(client().full({3}, 7, DType::kInt64, "cpu:1").str(),
            "tensor([7, 7, 7], device='cpu:1')");
  EXPECT_EQ(client().arange(0, 5).fetch<int64_t>(),
            (std::vector<int64_t>{0, 1, 2, 3, 4}));
  EXPECT_EQ(client().arange(1, 2, 0.25, DType::kFloat32).str(),
            "tensor([1.0000, 1.2500, 1.5000, 1.7500])");
  Tensor r1 = client().rand({2, 3}, "cpu", 42);
  Tensor r2 = client().rand({2, 3}, "cpu", 42);
  EXPECT_EQ(r1.fetch<float>(), r2.fetch<float>());
  for (float v : r1.fetch<float>()) {
    EXPECT_GE(v, 0.0f);
    EXPECT_LT(v, 1.0f);
  }
  Tensor n = client().randn({1000}, "cpu:1", 7);
  EXPECT_EQ(n.dtype(), DType::kFloat32);
  EXPECT_EQ(n.numel(), 1000);
}

TEST_P(ClientServerTest, ArithmeticAndMatmul) {
  Tensor a = client().tensor<float>({{1, 2}, {3, 4}});
  Tensor b = client().tensor<float>({{5, 6}, {7, 8}});
  EXPECT_EQ(a.matmul(b).fetch<float>(), (std::vector<float>{19, 22, 43, 50}));
  EXPECT_EQ((a + b).fetch<float>(), (std::vector<float>{6, 8, 10, 12}));
  EXPECT_EQ((b - a).fetch<float>(), (std::vector<float>{4, 4, 4, 4}));
  Tensor i = client().tensor<int64_t>({1, 2});
  Tensor j = client().tensor<int64_t>({2, 4});
  Tensor q = i / j;  // true division
  EXPECT_EQ(q.dtype(), DType::kFloat32);
  EXPECT_EQ(q.str(), "tensor([0.5000, 0.5000])");
}

TEST_P(ClientServerTest, ScalarsAndItem) {
  Tensor s = client().tensor<int64_t>({42}, std::vector<int64_t>{});
  EXPECT_EQ(s.dim(), 0);
  EXPECT_EQ(s.item<int64_t>(), 42);
  EXPECT_EQ(s.str(), "tensor(42)");
  EXPECT_EQ(client().tensor<bool>({true}).item<bool>(), true);
  EXPECT_EQ(client().tensor<bool>({true, false}).str(),
            "tensor([ True, False])");
  Error e = Catch([&] {
    (void)client().tensor<int64_t>({1, 2}).item<int64_t>();
  });
  EXPECT_EQ(e.code(), StatusCode::INVALID_ARGUMENT);
}

TEST_P(ClientServerTest, ErrorsCarryTheServersCodeAndMessage) {
  Error bad_name = Catch([&] { (void)client().tensor<float>({1}, "tpu:0"); });
  EXPECT_EQ(bad_name.code(), StatusCode::INVALID_ARGUMENT);
  EXPECT_NE(bad_name.message().find("tpu:0"), std::string::npos);

  Error absent = Catch([&] { (void)client().tensor<float>({1}, "cuda:3"); });
  EXPECT_EQ(absent.code(), StatusCode::NOT_FOUND);
  EXPECT_NE(absent.message().find("cpu:1"), std::string::npos)
      << "the message lists the available devices: " << absent.message();

  Error size = Catch([&] {
    (void)client().tensor<float>({1, 2, 3}, std::vector<int64_t>{2, 2});
  });
  EXPECT_EQ(size.code(), StatusCode::INVALID_ARGUMENT);

  Tensor a = client().ones({2, 3});
  Error shapes = Catch([&] { (void)a.matmul(a); });
  EXPECT_EQ(shapes.code(), StatusCode::INVALID_ARGUMENT);

  // Client-side: the element type must match the dtype.
  Error type = Catch([&] { (void)a.fetch<int64_t>(); });
  EXPECT_EQ(type.code(), StatusCode::INVALID_ARGUMENT);
  EXPECT_NE(type.message().find("float32"), std::string::npos);
}

TEST_P(ClientServerTest, DevicesAndGpuHelpers) {
  const std::vector<DeviceInfo> devices = client().devices();
  ASSERT_EQ(devices.size(), 2u);
  EXPECT_EQ(devices[0].name, "cpu:0");
  EXPECT_EQ(devices[1].name, "cpu:1");
  EXPECT_EQ(devices[0].kind, "cpu");
  EXPECT_GT(devices[0].memory_budget, 0u);
  EXPECT_EQ(client().device_count(), 0);
  EXPECT_FALSE(client().cuda_available());
  EXPECT_EQ(client().try_gpu(), Device("cpu"));
  EXPECT_EQ(client().try_gpu(10), Device("cpu"));
  EXPECT_EQ(client().try_all_gpus(), std::vector<Device>{"cpu"});
  EXPECT_FALSE(client().server_version().empty());

  Tensor t = client().zeros({256}, DType::kFloat32, "cpu:1");
  const std::vector<DeviceInfo> after = client().devices();
  EXPECT_EQ(after[1].live_tensors, devices[1].live_tensors + 1);
  EXPECT_GE(after[1].held_memory, devices[1].held_memory + 1024);
}

// Shared memory (same host: both transports here are).
std::string Pattern(size_t n, uint32_t seed) {
  std::string out(n, '\0');
  uint32_t x = seed;
  for (size_t i = 0; i < n; i += 4) {
    x = x * 1664525u + 1013904223u;
    std::memcpy(out.data() + i, &x, std::min<size_t>(4, n - i));
  }
  return out;
}

TEST_P(ClientServerTest, SharedMemoryCarriesLargeTensorsAutomatically) {
  std::string reason;
  ASSERT_TRUE(client().enable_shared_memory(80 << 20, &reason)) << reason;
  EXPECT_TRUE(client().shared_memory_enabled());
  const auto before = server_->runtime().shared_memory_stats();
  EXPECT_EQ(before.regions, 1u);
  const std::string bytes = Pattern(64 << 20, 7);
  Tensor t = client().FromBytes(DType::kFloat32, {16 << 20}, bytes);
  auto after = server_->runtime().shared_memory_stats();
  EXPECT_EQ(after.uploads, before.uploads + 1);
  EXPECT_EQ(t.nbytes(), bytes.size());
  EXPECT_TRUE(t.fetch_bytes() == bytes);
  std::vector<std::byte> reused(bytes.size());
  t.fetch_into(reused);
  EXPECT_EQ(std::memcmp(reused.data(), bytes.data(), bytes.size()), 0);
  after = server_->runtime().shared_memory_stats();
  EXPECT_EQ(after.fetches, before.fetches + 2);
  // Small tensors and tensors larger than the region use the socket.
  Tensor small = client().tensor<int64_t>({1, 2, 3});
  EXPECT_EQ(small.fetch<int64_t>(), (std::vector<int64_t>{1, 2, 3}));
  const std::string big = Pattern(96 << 20, 9);
  Tensor large = client().FromBytes(DType::kInt32, {24 << 20}, big);
  EXPECT_TRUE(large.fetch_bytes() == big);
  after = server_->runtime().shared_memory_stats();
  EXPECT_EQ(after.uploads, before.uploads + 1);
  EXPECT_EQ(after.fetches, before.fetches + 2);

  client().disable_shared_memory();
  EXPECT_FALSE(client().shared_memory_enabled());
  EXPECT_EQ(server_->runtime().shared_memory_stats().regions, 0u);
}

// fetch<T>() writes straight into its vector (prefaulted, copies split
// across threads past 8 MiB): exact through the socket and through shared
// memory, for a size that is no multiple of a page or a slice.
TEST_P(ClientServerTest, TypedFetchOfLargeTensorsIsExactOnEveryPath) {
  const int64_t n = (12 << 20) / 4 + 3;
  std::vector<float> values(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) values[i] = static_cast<float>(i % 100003) * 0.25f;
  Tensor t = client().tensor(values);
  EXPECT_EQ(t.fetch<float>(), values);
  ASSERT_TRUE(client().enable_shared_memory(16 << 20));
  const auto before = server_->runtime().shared_memory_stats();
  EXPECT_EQ(t.fetch<float>(), values);
  EXPECT_EQ(server_->runtime().shared_memory_stats().fetches, before.fetches + 1);
  EXPECT_EQ(Catch([&] { (void)t.fetch<double>(); }).code(),
            StatusCode::INVALID_ARGUMENT);
  Tensor empty = client().zeros({0, 3});
  EXPECT_TRUE(empty.fetch<float>().empty());
  EXPECT_EQ(client().tensor<int64_t>({42}).fetch<int64_t>(),
            (std::vector<int64_t>{42}));
}

TEST_P(ClientServerTest, SharedMemoryOffByDefaultUsesTheSocket) {
  EXPECT_FALSE(client().shared_memory_enabled());
  const std::string bytes = Pattern(4 << 20, 3);
  Tensor t = client().FromBytes(DType::kFloat32, {1 << 20}, bytes);
  EXPECT_TRUE(t.fetch_bytes() == bytes);
  std::vector<std::byte> out(bytes.size());
  t.fetch_into(out);
  EXPECT_EQ(std::memcmp(out.data(), bytes.data(), bytes.size()), 0);
  const auto stats = server_->runtime().shared_memory_stats();
  EXPECT_EQ(stats.uploads, 0u);
  EXPECT_EQ(stats.fetches, 0u);
  EXPECT_EQ(stats.regions, 0u);
  EXPECT_EQ(Catch([&] { t.fetch_into(std::span<std::byte>(out).first(8)); })
                .code(),
            StatusCode::INVALID_ARGUMENT);
}

TEST_P(ClientServerTest, SharedMemoryZeroCopyRegion) {
  std::shared_ptr<SharedMemoryRegion> region =
      client().create_shared_memory(1 << 20);
  ASSERT_NE(region, nullptr);
  EXPECT_EQ(region->size(), size_t{1} << 20);
  EXPECT_EQ(reinterpret_cast<uintptr_t>(region->data()) % 4096, 0u);
  EXPECT_EQ(region->name().rfind("/tensord-", 0), 0u);
  auto* values = reinterpret_cast<float*>(region->data() + 4096);
  for (int i = 0; i < 1000; ++i) values[i] = static_cast<float>(i) * 0.5f;
  Tensor t = client().upload_shared(*region, 4096, DType::kFloat32, {10, 100},
                                    "cpu:1");
  EXPECT_EQ(t.device(), Device("cpu:1"));
  Tensor doubled = t * 2;
  doubled.fetch_shared(*region, 0);
  const auto* out = reinterpret_cast<const float*>(region->data());
  for (int i = 0; i < 1000; ++i) ASSERT_EQ(out[i], static_cast<float>(i));
  // Past the end: the server's OUT_OF_RANGE.
  EXPECT_EQ(Catch([&] { doubled.fetch_shared(*region, (1 << 20) - 100); })
                .code(),
            StatusCode::OUT_OF_RANGE);
  // A region of another session is refused by the client.
  Client other(Channel());
  EXPECT_EQ(Catch([&] {
              (void)other.upload_shared(*region, 0, DType::kFloat32, {1});
            }).code(),
            StatusCode::INVALID_ARGUMENT);
  const std::string name = region->name();
  region.reset();  // unregistered, unmapped and unlinked
  EXPECT_EQ(server_->runtime().shared_memory_stats().regions, 0u);
  EXPECT_EQ(::shm_open(name.c_str(), O_RDONLY, 0), -1);
}

TEST_P(ClientServerTest, SharedMemoryRegionsGoWithTheClient) {
  {
    Client c(Channel());
    ASSERT_TRUE(c.enable_shared_memory(1 << 20));
    auto region = c.create_shared_memory(4096);
    EXPECT_EQ(server_->runtime().shared_memory_stats().regions, 2u);
  }
  EXPECT_EQ(server_->runtime().shared_memory_stats().regions, 0u);
}

TEST_P(ClientServerTest, UnreachableServerIsUnavailable) {
  Error e = Catch([] { Client c("127.0.0.1:1"); });
  EXPECT_EQ(e.code(), StatusCode::UNAVAILABLE);
  EXPECT_TRUE(e.unanswered()) << e.what();  // no server said it
}

TEST_P(ClientServerTest, AServersAnswerIsNotUnanswered) {
  // The server's own refusal (NOT_FOUND for a session it does not know):
  // answered, whatever its code.
  Error e = Catch([&] { (void)Client::Attach(Channel(), "no-such-session"); });
  EXPECT_EQ(e.code(), StatusCode::NOT_FOUND) << e.what();
  EXPECT_FALSE(e.unanswered()) << e.what();
  {
    // The client's own checks are not transport failures either.
    Tensor x = client().tensor<int64_t>({1, 2});
    Error local = Catch([&] { (void)x.fetch<float>(); });
    EXPECT_EQ(local.code(), StatusCode::INVALID_ARGUMENT) << local.what();
    EXPECT_FALSE(local.unanswered()) << local.what();
  }
  // The server gone: the same call is unanswered.
  const std::string session = client().session();
  client_.reset();  // before its server (an in-process channel needs it)
  server_.reset();
  Error gone = Catch([&] {
    (void)Client::Attach(
        grpc::CreateChannel("127.0.0.1:1", grpc::InsecureChannelCredentials()),
        session);
  });
  EXPECT_TRUE(gone.unanswered()) << gone.what();
}

INSTANTIATE_TEST_SUITE_P(Transports, ClientServerTest,
                         ::testing::Values(Transport::kInProcess,
                                           Transport::kLoopback),
                         [](const auto& info) {
                           return info.param == Transport::kInProcess
                                      ? "InProcess"
                                      : "Loopback";
                         });

}  // namespace
}  // namespace tensord

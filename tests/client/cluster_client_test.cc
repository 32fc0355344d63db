// tensord::Cluster (issue 13) against three real daemons, each named by
// node, with two host devices, on its own unix socket (their peers' address
// pattern) and with node tokens: devices named by node, tensors and ops on
// the node that owns them, PyTorch's same-device error across nodes with
// the qualified names, moves between nodes server to server (grants bound
// to one tensor and one node, once, before their deadline), sessions
// re-attached by the cluster's id, discovery through DNS (over TCP), and a
// node that dies vanishing without hanging the others; a destination
// daemon killed mid-transfer (a real process, SIGKILL) leaving the source
// whole and nothing half-made, and the move completing once it restarts.
#include "tensord/cluster.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <signal.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <filesystem>
#include <fstream>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include <grpcpp/create_channel.h>
#include <grpcpp/security/credentials.h>

#include "server/server.h"
#include "tests/client/cuttable_proxy.h"
#include "tensord/v1/tensord.grpc.pb.h"

namespace tensord {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;

constexpr char kTokens[] =
    "# node tokens\n"
    "tensord-0 node-zero-token-0123456789\n"
    "tensord-1 node-one-token-0123456789\n"
    "tensord-2 node-two-token-0123456789\n";

class ClusterTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = std::filesystem::temp_directory_path() /
           ("tensord-cluster-" + std::to_string(::getpid()) + "-" +
            ::testing::UnitTest::GetInstance()->current_test_info()->name());
    std::filesystem::create_directories(dir_);
    std::ofstream(dir_ / "node-tokens") << kTokens;
    for (int i = 0; i < 3; ++i) servers_.push_back(Start(i));
  }
  void TearDown() override {
    servers_.clear();
    std::filesystem::remove_all(dir_);
  }
  std::unique_ptr<server::Server> Start(int i,
                                        uint64_t session_max_bytes = 0) const {
    server::ServerOptions options;
    options.runtime.session_max_bytes = session_max_bytes;
    options.listen =
        "unix:" + (dir_ / ("tensord-" + std::to_string(i) + ".sock")).string();
    options.runtime.host_devices = 2;
    options.runtime.node_name = "tensord-" + std::to_string(i);
    options.node_token_file = (dir_ / "node-tokens").string();
    options.peer_address_pattern = "unix:" + (dir_ / "{node}.sock").string();
    return std::move(server::Server::Start(std::move(options))).value();
  }
  std::vector<std::string> Addresses() const {
    std::vector<std::string> out;
    for (const auto& s : servers_) out.push_back(s->address());
    return out;
  }
  // Generous: a loaded 2-core CI machine (ASan, two tests at once) may
  // take a second to answer. A dead node is refused at once regardless.
  static ClusterOptions Quick(int ms = 5000) {
    ClusterOptions options;
    options.node_timeout = std::chrono::milliseconds(ms);
    return options;
  }
  template <typename F>
  static Error ErrorOf(F f) {
    try {
      f();
    } catch (const Error& e) {
      return e;
    }
    return Error(StatusCode::OK, "no error");
  }

  std::filesystem::path dir_;
  std::vector<std::unique_ptr<server::Server>> servers_;
};

TEST_F(ClusterTest, DevicesAreNamedByNode) {
  Cluster cluster(Addresses(), Quick());
  EXPECT_THAT(cluster.nodes(), ElementsAre("tensord-0", "tensord-1",
                                           "tensord-2"));
  std::vector<std::string> names;
  for (const DeviceInfo& d : cluster.devices()) {
    names.push_back(d.name);
    EXPECT_EQ(d.name.substr(0, d.node.size() + 1), d.node + "/");
  }
  EXPECT_THAT(names, ElementsAre("tensord-0/cpu:0", "tensord-0/cpu:1",
                                 "tensord-1/cpu:0", "tensord-1/cpu:1",
                                 "tensord-2/cpu:0", "tensord-2/cpu:1"));
  // A plain Client of one node names devices as ever, and learns the node.
  Client plain(servers_[1]->address());
  EXPECT_EQ(plain.devices()[0].name, "cpu:0");
  EXPECT_EQ(plain.devices()[0].node, "tensord-1");
}

TEST_F(ClusterTest, TensorsAndOpsLiveOnTheirNode) {
  Cluster cluster(Addresses(), Quick());
  auto x = cluster.tensor<float>({1, 2, 3}, "tensord-1/cpu:1");
  EXPECT_EQ(x.device().str(), "tensord-1/cpu:1");
  auto y = x * 2.0 + x;
  EXPECT_EQ(y.device().str(), "tensord-1/cpu:1");
  EXPECT_THAT(y.fetch<float>(), ElementsAre(3, 6, 9));
  // Moves within the node, by either name; the identity move is x itself.
  EXPECT_EQ(x.to("tensord-1/cpu:0").device().str(), "tensord-1/cpu:0");
  EXPECT_EQ(x.to("cpu:0").device().str(), "tensord-1/cpu:0");
  EXPECT_EQ(x.to("tensord-1/cpu:1").handle(), x.handle());
  auto z = cluster.zeros({2, 2}, DType::kFloat64, "tensord-2/cpu:0");
  EXPECT_EQ(z.device().str(), "tensord-2/cpu:0");
  // The unary path (no command stream) qualifies the same way.
  EXPECT_EQ(cluster.node("tensord-1").try_gpu().str(), "tensord-1/cpu");
  // Only the owning node holds anything.
  EXPECT_TRUE(cluster.node("tensord-0").tensors().empty());
  EXPECT_EQ(cluster.node("tensord-1").tensors().size(), 2u);  // x and y
  EXPECT_EQ(cluster.node("tensord-2").tensors().size(), 1u);
  EXPECT_EQ(servers_[0]->runtime().ListSessions()[0].tensors, 0u);
}

TEST_F(ClusterTest, OpsAcrossNodesAreRefusedAsPyTorchRefusesTwoDevices) {
  Cluster cluster(Addresses(), Quick());
  auto a = cluster.ones({2}, DType::kFloat32, "tensord-0/cpu:0");
  auto b = cluster.ones({2}, DType::kFloat32, "tensord-1/cpu:0");
  Error e = ErrorOf([&] { (void)(a + b); });
  EXPECT_EQ(e.code(), StatusCode::FAILED_PRECONDITION);
  EXPECT_EQ(e.message(),
            "Expected all tensors to be on the same device, but found at "
            "least two devices, tensord-0/cpu:0 and tensord-1/cpu:0!");
  e = ErrorOf([&] { (void)b.matmul(a); });
  EXPECT_EQ(e.message(),
            "Expected all tensors to be on the same device, but found at "
            "least two devices, tensord-1/cpu:0 and tensord-0/cpu:0!");
  // Two devices of one node: the planner's message, qualified as well.
  auto c = cluster.ones({2}, DType::kFloat32, "tensord-0/cpu:1");
  e = ErrorOf([&] { (void)(a + c); });
  EXPECT_EQ(e.code(), StatusCode::FAILED_PRECONDITION);
  EXPECT_THAT(e.message(), HasSubstr("tensord-0/cpu:0 and tensord-0/cpu:1"));
  // Device names the cluster cannot place.
  e = ErrorOf([&] { (void)cluster.ones({2}, DType::kFloat32, "cpu:0"); });
  EXPECT_EQ(e.code(), StatusCode::INVALID_ARGUMENT);
  EXPECT_THAT(e.message(), HasSubstr("names no node, and the cluster has 3"));
  e = ErrorOf([&] { (void)cluster.ones({2}, DType::kFloat32, "tensord-9/cpu"); });
  EXPECT_EQ(e.code(), StatusCode::NOT_FOUND);
  EXPECT_EQ(e.message(), "no node 'tensord-9' in the cluster; its nodes: "
                         "tensord-0, tensord-1, tensord-2");
  // A node asked for another node's device says whose it is.
  e = ErrorOf([&] {
    (void)cluster.node("tensord-0").ones({2}, DType::kFloat32,
                                          "tensord-1/cpu:0");
  });
  EXPECT_EQ(e.code(), StatusCode::NOT_FOUND);
  EXPECT_THAT(e.message(), HasSubstr("is on node 'tensord-1', but this server "
                                     "is node 'tensord-0'"));
  // Tensors of two unrelated Clients do not meet either.
  Client other(servers_[0]->address());
  auto d = other.ones({2}, DType::kFloat32, "cpu:0");
  e = ErrorOf([&] { (void)(a + d); });
  EXPECT_EQ(e.code(), StatusCode::INVALID_ARGUMENT);
  EXPECT_THAT(e.message(), HasSubstr("belongs to another Client's session"));
  EXPECT_THAT((a + a).fetch<float>(), ElementsAre(2, 2)) << "still serving";
}

TEST_F(ClusterTest, MovesBetweenNodesRunServerToServer) {
  Cluster cluster(Addresses(), Quick());
  std::vector<float> values(300000);  // 1.2 MB: several pulled chunks
  for (size_t i = 0; i < values.size(); ++i) values[i] = 0.5f * i;
  auto x = cluster.tensor(values, {300, 1000}, "tensord-0/cpu:1");
  for (const char* to : {"tensord-1/cpu:0", "tensord-2/cpu:1"}) {
    auto y = x.to(to);
    EXPECT_EQ(y.device().str(), to);
    EXPECT_EQ(y.shape(), x.shape());
    EXPECT_EQ(y.fetch<float>(), values) << to;
    // And back, and onward: every direction.
    auto back = y.to("tensord-0/cpu:0");
    EXPECT_EQ(back.fetch<float>(), values);
  }
  auto i64 = cluster.tensor<int64_t>({1, -2, 3}, "tensord-2/cpu:0");
  EXPECT_THAT(i64.to("tensord-1/cpu:1").fetch<int64_t>(), ElementsAre(1, -2, 3));
  auto empty = cluster.zeros({0, 3}, DType::kFloat32, "tensord-1/cpu:0");
  EXPECT_EQ(empty.to("tensord-0/cpu:0").shape(), (std::vector<int64_t>{0, 3}));
  EXPECT_THAT(x.fetch<float>()[7], 3.5f) << "the source is intact";
  // Ops on the moved tensor run on its new node.
  auto z = x.to("tensord-1/cpu:0");
  EXPECT_EQ((z * 2.0).device().str(), "tensord-1/cpu:0");
  Error e = ErrorOf([&] { (void)x.to("tensord-7/cpu:0"); });
  EXPECT_EQ(e.code(), StatusCode::NOT_FOUND);
  EXPECT_THAT(e.message(), HasSubstr("no node 'tensord-7'"));
}

TEST_F(ClusterTest, GrantsCannotBeMisused) {
  Cluster cluster(Addresses(), Quick());
  auto x = cluster.tensor<float>({1, 2, 3}, "tensord-0/cpu:0");
  cluster.node("tensord-0").synchronize();  // x exists before raw calls
  // A raw client: a grant of x for tensord-1, presented every wrong way.
  auto stub0 = v1::TensorService::NewStub(
      grpc::CreateChannel(servers_[0]->address(),
                          grpc::InsecureChannelCredentials()));
  auto grant_for = [&](const std::string& node, int64_t ttl_ms = 0) {
    grpc::ClientContext ctx;
    v1::GrantTransferRequest req;
    req.set_session(cluster.node("tensord-0").session());
    req.set_handle(x.handle());
    req.set_destination_node(node);
    req.set_ttl_ms(ttl_ms);
    v1::GrantTransferResponse resp;
    grpc::Status s = stub0->GrantTransfer(&ctx, req, &resp);
    EXPECT_TRUE(s.ok()) << s.error_message();
    return resp;
  };
  auto pull = [&](int server, const std::string& token,
                  const std::string& grant, bool finish = false) {
    auto node = v1::NodeService::NewStub(grpc::CreateChannel(
        servers_[server]->address(), grpc::InsecureChannelCredentials()));
    grpc::ClientContext ctx;
    if (!token.empty()) ctx.AddMetadata("authorization", "Bearer " + token);
    v1::PullChunkRequest req;
    req.set_grant(grant);
    req.set_finish(finish);
    v1::PullChunkResponse resp;
    return node->PullChunk(&ctx, req, &resp);
  };
  auto import_on = [&](int server, const std::string& source,
                       const std::string& grant) {
    auto stub = v1::TensorService::NewStub(grpc::CreateChannel(
        servers_[server]->address(), grpc::InsecureChannelCredentials()));
    grpc::ClientContext ctx;
    v1::ImportRequest req;
    req.set_session(cluster.node("tensord-" + std::to_string(server)).session());
    req.set_source_node(source);
    req.set_grant(grant);
    req.set_device("cpu:0");
    v1::TensorResponse resp;
    return stub->Import(&ctx, req, &resp);
  };
  const v1::GrantTransferResponse g = grant_for("tensord-1");
  EXPECT_EQ(g.grant().size(), 32u);
  EXPECT_EQ(g.source_node(), "tensord-0");
  // No token, a client's token, another node's token: refused.
  EXPECT_EQ(pull(0, "", g.grant()).error_code(),
            grpc::StatusCode::UNAUTHENTICATED);
  EXPECT_EQ(pull(0, "a-client-token-0123456789", g.grant()).error_code(),
            grpc::StatusCode::UNAUTHENTICATED);
  grpc::Status s = pull(0, "node-two-token-0123456789", g.grant());
  EXPECT_EQ(s.error_code(), grpc::StatusCode::PERMISSION_DENIED);
  EXPECT_THAT(s.error_message(), HasSubstr("the grant is for node 'tensord-1'"));
  // tensord-2 importing tensord-1's grant fails the same way, and leaves
  // nothing on tensord-2.
  s = import_on(2, "tensord-0", g.grant());
  EXPECT_EQ(s.error_code(), grpc::StatusCode::PERMISSION_DENIED);
  EXPECT_TRUE(cluster.node("tensord-2").tensors().empty());
  // The right node redeems it once; a replay is refused.
  EXPECT_TRUE(import_on(1, "tensord-0", g.grant()).ok());
  s = import_on(1, "tensord-0", g.grant());
  EXPECT_EQ(s.error_code(), grpc::StatusCode::FAILED_PRECONDITION);
  EXPECT_EQ(pull(0, "node-one-token-0123456789", g.grant()).error_code(),
            grpc::StatusCode::NOT_FOUND)
      << "finished: the source forgot it";
  // A made-up grant, and a source this node has no address for.
  EXPECT_EQ(import_on(1, "tensord-0", std::string(32, 'a')).error_code(),
            grpc::StatusCode::NOT_FOUND);
  // An oversized grant is refused at both ends before any lookup.
  s = pull(0, "node-one-token-0123456789", std::string(65, 'a'));
  EXPECT_EQ(s.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_THAT(s.error_message(), HasSubstr("grant is 65 bytes"));
  s = import_on(1, "tensord-0", std::string(65, 'a'));
  EXPECT_EQ(s.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_THAT(s.error_message(), HasSubstr("grant is 65 bytes"));
  s = pull(0, "node-one-token-0123456789", "");
  EXPECT_EQ(s.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_THAT(s.error_message(), HasSubstr("grant is 0 bytes"));
  s = import_on(1, "evil/host", grant_for("tensord-1").grant());
  EXPECT_EQ(s.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  // A grant does not outlive its deadline.
  const v1::GrantTransferResponse brief = grant_for("tensord-1", 50);
  EXPECT_EQ(brief.expires_ms(), 50);
  std::this_thread::sleep_for(std::chrono::milliseconds(120));
  s = import_on(1, "tensord-0", brief.grant());
  EXPECT_EQ(s.error_code(), grpc::StatusCode::NOT_FOUND);
  EXPECT_THAT(s.error_message(), HasSubstr("no such transfer grant"));
  EXPECT_EQ(cluster.node("tensord-1").tensors().size(), 1u) << "the import";
  // A grant to this node itself is pointless, and refused.
  grpc::ClientContext ctx;
  v1::GrantTransferRequest self;
  self.set_session(cluster.node("tensord-0").session());
  self.set_handle(x.handle());
  self.set_destination_node("tensord-0");
  v1::GrantTransferResponse unused;
  EXPECT_EQ(stub0->GrantTransfer(&ctx, self, &unused).error_code(),
            grpc::StatusCode::INVALID_ARGUMENT);
}

// Issue 30: an import from another node is admitted against the
// destination session's quota before it takes memory: a tensor that fills
// it exactly moves, one element more is refused naming the quota, and the
// destination holds what it held.
TEST_F(ClusterTest, AnImportIsAdmittedAtTheQuotaEdge) {
  servers_[1].reset();
  servers_[1] = Start(1, /*session_max_bytes=*/4096);
  Cluster cluster(Addresses(), Quick());
  auto fits = cluster.zeros({1024}, DType::kFloat32, "tensord-0/cpu:0");
  auto over = cluster.zeros({1025}, DType::kFloat32, "tensord-0/cpu:0");
  Client node1 = cluster.node("tensord-1");
  const uint64_t held_before = node1.devices()[0].held_memory;
  {
    auto moved = fits.to("tensord-1/cpu:0");
    EXPECT_EQ(node1.tensors().size(), 1u);
  }
  node1.synchronize();
  EXPECT_TRUE(node1.tensors().empty());
  Error e = ErrorOf([&] { (void)over.to("tensord-1/cpu:0"); });
  EXPECT_EQ(e.code(), StatusCode::RESOURCE_EXHAUSTED);
  EXPECT_THAT(e.what(),
              HasSubstr("session memory quota exceeded (--session-max-bytes): "
                        "requested 4100 bytes; the session holds 0 of its "
                        "limit of 4096 bytes"));
  EXPECT_TRUE(node1.tensors().empty());
  EXPECT_EQ(node1.devices()[0].held_memory, held_before);
}

TEST_F(ClusterTest, AMoveFromADeadNodeLeavesNothingHalfMade) {
  Cluster cluster(Addresses(), Quick());
  auto x = cluster.tensor<float>({1, 2, 3}, "tensord-0/cpu:0");
  Client node1 = cluster.node("tensord-1");
  const uint64_t held_before = node1.devices()[0].held_memory;
  servers_[0].reset();  // the source dies
  Error e = ErrorOf([&] { (void)x.to("tensord-1/cpu:0"); });
  EXPECT_EQ(e.code(), StatusCode::UNAVAILABLE);
  EXPECT_THAT(e.what(), HasSubstr("node 'tensord-0'"));
  // Granting needs the source itself, so the client learns it first.
  EXPECT_TRUE(node1.tensors().empty());
  EXPECT_EQ(node1.devices()[0].held_memory, held_before);
  // A grant whose source dies before the import: UNAVAILABLE naming it.
  auto y = cluster.tensor<float>({4}, "tensord-1/cpu:0");
  node1.synchronize();  // y exists before raw calls
  grpc::ClientContext gctx;
  auto stub1 = v1::TensorService::NewStub(grpc::CreateChannel(
      servers_[1]->address(), grpc::InsecureChannelCredentials()));
  v1::GrantTransferRequest grant;
  grant.set_session(node1.session());
  grant.set_handle(y.handle());
  grant.set_destination_node("tensord-2");
  v1::GrantTransferResponse granted;
  ASSERT_TRUE(stub1->GrantTransfer(&gctx, grant, &granted).ok());
  servers_[1].reset();
  auto stub2 = v1::TensorService::NewStub(grpc::CreateChannel(
      servers_[2]->address(), grpc::InsecureChannelCredentials()));
  grpc::ClientContext ictx;
  v1::ImportRequest import;
  import.set_session(cluster.node("tensord-2").session());
  import.set_source_node("tensord-1");
  import.set_grant(granted.grant());
  import.set_device("cpu:0");
  v1::TensorResponse imported;
  grpc::Status s = stub2->Import(&ictx, import, &imported);
  EXPECT_EQ(s.error_code(), grpc::StatusCode::UNAVAILABLE);
  EXPECT_THAT(s.error_message(), HasSubstr("node 'tensord-1'"));
  EXPECT_TRUE(cluster.node("tensord-2").tensors().empty());
}

TEST_F(ClusterTest, TheClusterSessionReattachesEveryNode) {
  Cluster cluster(Addresses(), Quick());
  auto x = cluster.tensor<int64_t>({7}, "tensord-2/cpu:1");
  // Made on the node's command stream: run before another client names it
  // (Client::synchronize's rule).
  cluster.node("tensord-2").synchronize();
  const std::string id = cluster.session();
  EXPECT_THAT(id, HasSubstr("tensord-0="));
  Cluster again = Cluster::Attach(Addresses(), id, Quick());
  EXPECT_EQ(again.session(), id);
  auto found = again.node("tensord-2").attach_tensor(x.handle());
  EXPECT_EQ(found.device().str(), "tensord-2/cpu:1");
  EXPECT_THAT(found.fetch<int64_t>(), ElementsAre(7));
}

TEST_F(ClusterTest, DiscoveryByDnsAndBadClusters) {
  server::ServerOptions tcp;
  tcp.listen = "127.0.0.1:0";
  tcp.runtime.host_devices = 2;
  tcp.runtime.node_name = "tensord-0";
  auto tcp_server = std::move(server::Server::Start(std::move(tcp))).value();
  const std::string port = std::to_string(tcp_server->port());
  Cluster by_dns = Cluster::FromDns("localhost:" + port, Quick());
  EXPECT_THAT(by_dns.nodes(), ElementsAre("tensord-0"));
  // One node: names without a node mean it.
  EXPECT_EQ(by_dns.ones({1}, DType::kFloat32, "cpu:1").device().str(),
            "tensord-0/cpu:1");

  Error e = ErrorOf([&] {
    // Two spellings of one address (not a DNS name: gRPC's c-ares resolver
    // leaks a few bytes per process, which LeakSanitizer reports).
    Cluster twice({tcp_server->address(), "ipv4:127.0.0.1:" + port}, Quick());
  });
  EXPECT_EQ(e.code(), StatusCode::INVALID_ARGUMENT);
  EXPECT_THAT(e.message(), HasSubstr("are both node 'tensord-0'"));
  e = ErrorOf([&] { Cluster none({"127.0.0.1:1"}, Quick(300)); });
  EXPECT_EQ(e.code(), StatusCode::UNAVAILABLE);
  EXPECT_THAT(e.message(), HasSubstr("no tensord node answered"));
  server::ServerOptions unnamed;
  unnamed.listen = "127.0.0.1:0";
  auto server = std::move(server::Server::Start(std::move(unnamed))).value();
  e = ErrorOf([&] { Cluster anonymous({server->address()}, Quick()); });
  EXPECT_EQ(e.code(), StatusCode::FAILED_PRECONDITION);
  EXPECT_THAT(e.message(), HasSubstr("has no node name"));
}

TEST_F(ClusterTest, ANodeThatDiesVanishesWithoutHangingTheOthers) {
  Cluster cluster(Addresses(), Quick());
  auto x = cluster.tensor<float>({1}, "tensord-0/cpu:0");
  servers_[2].reset();
  const auto start = std::chrono::steady_clock::now();
  const std::vector<DeviceInfo> devices = cluster.devices();
  EXPECT_LT(std::chrono::steady_clock::now() - start, std::chrono::seconds(6));
  EXPECT_EQ(devices.size(), 4u);
  cluster.refresh();
  EXPECT_THAT(cluster.nodes(), ElementsAre("tensord-0", "tensord-1"));
  EXPECT_THAT((x + x).fetch<float>(), ElementsAre(2));
  // A node that comes back at an address of the list joins again.
  servers_[2] = Start(2);  // a new port: a cluster built on it finds it
  Cluster grown({servers_[0]->address(), servers_[2]->address()}, Quick());
  EXPECT_THAT(grown.nodes(), ElementsAre("tensord-0", "tensord-2"));
}

// Two daemons on TCP, each reached through a counting proxy, and the
// destination's peer address another proxy, cut twice mid-transfer: the
// client's bytes for a 32 MiB move stay under 8 KiB, the pull resumes from
// its last good chunk, and the bytes arrive whole.
TEST(ClusterMoveTest, TheClientSendsLittleAndACutTransferResumes) {
  const std::filesystem::path dir =
      std::filesystem::temp_directory_path() /
      ("tensord-cluster-move-" + std::to_string(::getpid()));
  std::filesystem::create_directories(dir);
  std::ofstream(dir / "node-tokens") << kTokens;
  auto start = [&](int i, std::string peers) {
    server::ServerOptions options;
    options.listen = "127.0.0.1:0";
    options.runtime.node_name = "tensord-" + std::to_string(i);
    options.node_token_file = (dir / "node-tokens").string();
    options.peers = std::move(peers);
    return std::move(server::Server::Start(std::move(options))).value();
  };
  auto source = start(0, "");
  CuttableProxy between_nodes(source->port());
  auto destination = start(1, "tensord-0=" + between_nodes.address());
  CuttableProxy to_source(source->port());
  CuttableProxy to_destination(destination->port());
  ClusterOptions options;
  options.node_timeout = std::chrono::milliseconds(2000);
  Cluster cluster({to_source.address(), to_destination.address()}, options);

  std::vector<float> values(8 << 20);  // 32 MiB
  for (size_t i = 0; i < values.size(); ++i) values[i] = static_cast<float>(i);
  auto x = cluster.tensor(values, {static_cast<int64_t>(values.size())},
                          "tensord-0/cpu");
  cluster.node("tensord-0").synchronize();
  const uint64_t client_before = to_source.bytes() + to_destination.bytes();
  std::atomic<bool> moved{false};
  std::thread cutter([&] {
    for (uint64_t at : {uint64_t{4} << 20, uint64_t{16} << 20}) {
      while (!moved && between_nodes.bytes() < at) {
        std::this_thread::sleep_for(std::chrono::microseconds(200));
      }
      if (!moved) between_nodes.Cut();
    }
  });
  auto y = x.to("tensord-1/cpu");
  moved = true;
  cutter.join();
  const uint64_t client_bytes =
      to_source.bytes() + to_destination.bytes() - client_before;
  EXPECT_LT(client_bytes, 8192u) << "the client's bytes for the move";
  EXPECT_GE(between_nodes.bytes(), uint64_t{32} << 20);
  EXPECT_GE(between_nodes.connections(), 3u) << "both cuts hit the transfer";
  EXPECT_EQ(y.device().str(), "tensord-1/cpu");
  EXPECT_TRUE(y.fetch<float>() == values) << "the bytes arrived whole";
  std::filesystem::remove_all(dir);
}

// A tensord daemon process (the build's binary), for a test that must kill
// one the way a machine dies: SIGKILL, no shutdown.
class DaemonProcess {
 public:
  DaemonProcess(const std::filesystem::path& dir, std::vector<std::string> flags)
      : port_file_(dir / "daemon.port") {
    std::filesystem::remove(port_file_);
    std::vector<std::string> args = {TENSORD_DAEMON, "--port-file",
                                     port_file_.string(), "--log-level",
                                     "warn"};
    args.insert(args.end(), flags.begin(), flags.end());
    std::vector<char*> argv;
    for (std::string& a : args) argv.push_back(a.data());
    argv.push_back(nullptr);
    EXPECT_EQ(posix_spawn(&pid_, argv[0], nullptr, nullptr, argv.data(),
                          environ),
              0)
        << "cannot spawn " << argv[0];
    for (int i = 0; i < 300 && port_.empty(); ++i) {
      std::ifstream in(port_file_);
      std::getline(in, port_);
      if (port_.empty()) std::this_thread::sleep_for(std::chrono::milliseconds(20));
    }
    EXPECT_FALSE(port_.empty()) << "the daemon did not start";
  }
  ~DaemonProcess() { Kill(); }
  std::string address() const { return "127.0.0.1:" + port_; }
  const std::string& port() const { return port_; }
  void Kill() {
    if (pid_ <= 0) return;
    ::kill(pid_, SIGKILL);
    ::waitpid(pid_, nullptr, 0);
    pid_ = -1;
  }

 private:
  std::filesystem::path port_file_;
  pid_t pid_ = -1;
  std::string port_;
};

// The destination dies (SIGKILL) while it pulls a 64 MiB tensor: the client
// gets UNAVAILABLE naming it, the source tensor is whole, the source holds
// no more than before; the daemon restarts at the same address, the
// cluster finds it again (a restarted server: a new session), and the same
// move, tried again, completes with every byte.
TEST(ClusterMoveTest, ADestinationKilledMidTransferThenRestartedTakesTheRetry) {
  const std::filesystem::path dir =
      std::filesystem::temp_directory_path() /
      ("tensord-cluster-kill-" + std::to_string(::getpid()));
  std::filesystem::create_directories(dir);
  std::ofstream(dir / "node-tokens") << kTokens;
  server::ServerOptions options;
  options.listen = "127.0.0.1:0";
  options.runtime.node_name = "tensord-0";
  options.node_token_file = (dir / "node-tokens").string();
  auto source = std::move(server::Server::Start(std::move(options))).value();
  CuttableProxy between_nodes(source->port());  // counts the pull's bytes
  const std::vector<std::string> flags = {
      "--node-name", "tensord-1", "--node-token-file",
      (dir / "node-tokens").string(), "--peers",
      "tensord-0=" + between_nodes.address()};
  auto with_listen = [&](const std::string& port) {
    std::vector<std::string> f = flags;
    f.push_back("--listen");
    f.push_back("127.0.0.1:" + port);
    return f;
  };
  auto destination = std::make_unique<DaemonProcess>(dir, with_listen("0"));
  const std::string port = destination->port();
  ClusterOptions cluster_options;
  cluster_options.node_timeout = std::chrono::milliseconds(5000);
  Cluster cluster({source->address(), destination->address()},
                  cluster_options);

  std::vector<float> values(16 << 20);  // 64 MiB
  for (size_t i = 0; i < values.size(); ++i) values[i] = static_cast<float>(i);
  auto x = cluster.tensor(values, {static_cast<int64_t>(values.size())},
                          "tensord-0/cpu");
  Client node0 = cluster.node("tensord-0");
  node0.synchronize();
  const uint64_t held_before = node0.devices()[0].held_memory;
  std::atomic<bool> done{false};
  std::thread killer([&] {
    while (!done && between_nodes.bytes() < (uint64_t{8} << 20)) {
      std::this_thread::sleep_for(std::chrono::microseconds(100));
    }
    destination->Kill();  // mid-transfer, or before the move if it lost
  });
  Error e(StatusCode::OK, "no error");
  try {
    (void)x.to("tensord-1/cpu");
  } catch (const Error& error) {
    e = error;
  }
  done = true;
  killer.join();
  EXPECT_EQ(e.code(), StatusCode::UNAVAILABLE) << e.what();
  EXPECT_THAT(e.what(), HasSubstr("node 'tensord-1'"));
  EXPECT_TRUE(x.fetch<float>() == values) << "the source tensor is whole";
  EXPECT_EQ(node0.devices()[0].held_memory, held_before)
      << "nothing half-made at the source";

  // The daemon restarts at its address; the cluster finds it again.
  destination = std::make_unique<DaemonProcess>(dir, with_listen(port));
  const std::vector<DeviceInfo> devices = cluster.devices();
  EXPECT_TRUE(std::any_of(devices.begin(), devices.end(), [](const auto& d) {
    return d.name == "tensord-1/cpu";
  })) << "the restarted node is listed again";
  auto y = x.to("tensord-1/cpu");
  EXPECT_EQ(y.device().str(), "tensord-1/cpu");
  EXPECT_TRUE(y.fetch<float>() == values) << "the retry moved every byte";
  EXPECT_EQ(cluster.node("tensord-1").tensors().size(), 1u)
      << "only the moved tensor: nothing left of the killed attempt";
  std::filesystem::remove_all(dir);
}

}  // namespace
}  // namespace tensord

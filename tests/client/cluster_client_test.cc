// tensord::Cluster (issue 13) against three real daemons on loopback TCP,
// each named by node and with two host devices: devices named by node,
// tensors and ops on the node that owns them, PyTorch's same-device error
// across nodes with the qualified names, sessions re-attached by the
// cluster's id, discovery through DNS, and a node that dies vanishing
// without hanging the others.
#include "tensord/cluster.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <chrono>
#include <memory>
#include <string>
#include <vector>

#include "server/server.h"

namespace tensord {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;

class ClusterTest : public ::testing::Test {
 protected:
  void SetUp() override {
    for (int i = 0; i < 3; ++i) servers_.push_back(Start(i));
  }
  static std::unique_ptr<server::Server> Start(int i) {
    server::ServerOptions options;
    options.listen = "127.0.0.1:0";
    options.runtime.host_devices = 2;
    options.runtime.node_name = "tensord-" + std::to_string(i);
    return std::move(server::Server::Start(std::move(options))).value();
  }
  std::vector<std::string> Addresses() const {
    std::vector<std::string> out;
    for (const auto& s : servers_) out.push_back(s->address());
    return out;
  }
  static ClusterOptions Quick() {
    ClusterOptions options;
    options.node_timeout = std::chrono::milliseconds(500);
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
  // Moving between nodes is not done through the client.
  e = ErrorOf([&] { (void)a.to("tensord-2/cpu:0"); });
  EXPECT_EQ(e.code(), StatusCode::UNIMPLEMENTED);
  EXPECT_THAT(e.message(), HasSubstr("from node tensord-0 to node tensord-2"));
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

TEST_F(ClusterTest, TheClusterSessionReattachesEveryNode) {
  Cluster cluster(Addresses(), Quick());
  auto x = cluster.tensor<int64_t>({7}, "tensord-2/cpu:1");
  const std::string id = cluster.session();
  EXPECT_THAT(id, HasSubstr("tensord-0="));
  Cluster again = Cluster::Attach(Addresses(), id, Quick());
  EXPECT_EQ(again.session(), id);
  auto found = again.node("tensord-2").attach_tensor(x.handle());
  EXPECT_EQ(found.device().str(), "tensord-2/cpu:1");
  EXPECT_THAT(found.fetch<int64_t>(), ElementsAre(7));
}

TEST_F(ClusterTest, DiscoveryByDnsAndBadClusters) {
  const std::string port = std::to_string(servers_[0]->port());
  Cluster by_dns = Cluster::FromDns("localhost:" + port, Quick());
  EXPECT_THAT(by_dns.nodes(), ElementsAre("tensord-0"));
  // One node: names without a node mean it.
  EXPECT_EQ(by_dns.ones({1}, DType::kFloat32, "cpu:1").device().str(),
            "tensord-0/cpu:1");

  Error e = ErrorOf([&] {
    Cluster twice({servers_[0]->address(), "localhost:" + port}, Quick());
  });
  EXPECT_EQ(e.code(), StatusCode::INVALID_ARGUMENT);
  EXPECT_THAT(e.message(), HasSubstr("are both node 'tensord-0'"));
  e = ErrorOf([&] { Cluster none({"127.0.0.1:1"}, Quick()); });
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
  EXPECT_LT(std::chrono::steady_clock::now() - start, std::chrono::seconds(3));
  EXPECT_EQ(devices.size(), 4u);
  cluster.refresh();
  EXPECT_THAT(cluster.nodes(), ElementsAre("tensord-0", "tensord-1"));
  EXPECT_THAT((x + x).fetch<float>(), ElementsAre(2));
  // A node that comes back at an address of the list joins again.
  servers_[2] = Start(2);  // a new port: a cluster built on it finds it
  Cluster grown({servers_[0]->address(), servers_[2]->address()}, Quick());
  EXPECT_THAT(grown.nodes(), ElementsAre("tensord-0", "tensord-2"));
}

}  // namespace
}  // namespace tensord

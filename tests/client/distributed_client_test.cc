// Issue 36 stage 1: ProcessGroup through the client library against a
// tensord on a loopback TCP socket with three host devices: every
// collective's values, the errors as the user sees them (codes and
// messages), order with pipelined ops, and a group's life on the server.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "core/collectives/host_communicator.h"
#include "server/server.h"
#include "tensord/client.h"

namespace tensord {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;

class DistributedClientTest : public ::testing::Test {
 protected:
  void SetUp() override {
    server::ServerOptions options;
    options.listen = "127.0.0.1:0";
    options.runtime.host_devices = 3;
    server_ = std::move(server::Server::Start(std::move(options))).value();
    client_.emplace("127.0.0.1:" + std::to_string(server_->port()));
  }
  void TearDown() override {
    client_.reset();
    server_.reset();
  }
  size_t Groups() { return server_->runtime().ListGroups(client_->session())->size(); }

  std::unique_ptr<server::Server> server_;
  std::optional<Client> client_;
};

template <typename F>
Error Thrown(F f) {
  try {
    f();
  } catch (const Error& e) {
    return e;
  }
  ADD_FAILURE() << "no Error thrown";
  return Error(StatusCode::OK, "");
}

#define SKIP_WITHOUT_GLOO(client)                                   \
  if (!core::HostCollectivesBuilt())                                \
  GTEST_SKIP() << "the server has no Gloo (libgloo-dev): collectives off"

TEST_F(DistributedClientTest, EveryCollectiveAsTorchDistributedGivesIt) {
  Client& c = *client_;
  SKIP_WITHOUT_GLOO(c);
  ProcessGroup group = c.new_group({"cpu:0", "cpu:1"});
  EXPECT_EQ(group.size(), 2);
  EXPECT_THAT(group.devices(), ElementsAre("cpu:0", "cpu:1"));
  EXPECT_THAT(group.engine(), HasSubstr("gloo"));
  auto a = c.tensor<float>({1, 2}, "cpu:0");
  auto b = c.tensor<float>({3, 4}, "cpu:1");
  group.all_reduce({a, b});
  EXPECT_THAT(a.fetch<float>(), ElementsAre(4, 6));
  EXPECT_THAT(b.fetch<float>(), ElementsAre(4, 6));
  auto x = c.tensor<double>({1, 8}, "cpu:1");
  auto y = c.tensor<double>({3, 2}, "cpu:0");
  group.all_reduce({x, y}, DistReduceOp::kAvg);
  EXPECT_THAT(x.fetch<double>(), ElementsAre(2, 5));
  group.all_reduce({x, y}, DistReduceOp::kMax);  // equal now: unchanged
  EXPECT_THAT(y.fetch<double>(), ElementsAre(2, 5));
  auto r0 = c.tensor<int64_t>({7, 7}, "cpu:0");
  auto r1 = c.tensor<int64_t>({1, 2}, "cpu:1");
  group.broadcast({r0, r1}, 1);
  EXPECT_THAT(r0.fetch<int64_t>(), ElementsAre(1, 2));
  std::vector<Tensor> gathered = group.all_gather({b, a});
  ASSERT_EQ(gathered.size(), 2u);
  EXPECT_EQ(gathered[0].device().str(), "cpu:1");
  EXPECT_EQ(gathered[0].shape(), (std::vector<int64_t>{4}));
  EXPECT_THAT(gathered[1].fetch<float>(), ElementsAre(4, 6, 4, 6));
  auto s0 = c.tensor<float>({1, 2, 3, 4}, "cpu:0");
  auto s1 = c.tensor<float>({10, 20, 30, 40}, "cpu:1");
  std::vector<Tensor> scattered = group.reduce_scatter({s0, s1});
  EXPECT_THAT(scattered[0].fetch<float>(), ElementsAre(11, 22));
  EXPECT_THAT(scattered[1].fetch<float>(), ElementsAre(33, 44));
  group.barrier();
}

TEST_F(DistributedClientTest, ACollectiveFollowsThePipelinedOpsBeforeIt) {
  Client& c = *client_;
  SKIP_WITHOUT_GLOO(c);
  ProcessGroup group = c.new_group({"cpu:0", "cpu:1"});
  auto a = c.ones({3}, DType::kFloat32, "cpu:0");
  auto b = c.ones({3}, DType::kFloat32, "cpu:1");
  auto a2 = a * 5;  // pipelined: the all_reduce must see it
  auto b2 = b + 1;
  group.all_reduce({a2, b2});
  auto after = a2 + 0;  // and this must see the all_reduce
  EXPECT_THAT(after.fetch<float>(), ElementsAre(7, 7, 7));
}

TEST_F(DistributedClientTest, ErrorsNameTheDevicesShapesAndRanks) {
  Client& c = *client_;
  SKIP_WITHOUT_GLOO(c);
  ProcessGroup group = c.new_group({"cpu:0", "cpu:1"});
  auto a = c.tensor<float>({1, 2}, "cpu:0");
  auto a2 = c.tensor<float>({1, 2}, "cpu:0");
  auto other = c.tensor<float>({1, 2}, "cpu:2");
  auto wide = c.tensor<float>({1, 2, 3}, "cpu:1");
  Error e = Thrown([&] { group.all_reduce({a, a2}); });
  EXPECT_EQ(e.code(), StatusCode::FAILED_PRECONDITION);
  EXPECT_THAT(e.what(), HasSubstr("all_reduce: expected one tensor on each "
                                  "of cpu:0, cpu:1, but found two on cpu:0 "
                                  "and none on cpu:1"));
  e = Thrown([&] { group.all_reduce({a, other}); });
  EXPECT_THAT(e.what(), HasSubstr("one on cpu:2, which is not in the group"));
  e = Thrown([&] { group.all_gather({a, wide}); });
  EXPECT_EQ(e.code(), StatusCode::INVALID_ARGUMENT);
  EXPECT_THAT(e.what(), HasSubstr("the tensor on cpu:1 is float32 [3] but "
                                  "the one on cpu:0 is float32 [2]"));
  auto i0 = c.tensor<int64_t>({1}, "cpu:0");
  auto i1 = c.tensor<int64_t>({1}, "cpu:1");
  e = Thrown([&] { group.all_reduce({i0, i1}, DistReduceOp::kAvg); });
  EXPECT_EQ(e.code(), StatusCode::FAILED_PRECONDITION);
  EXPECT_THAT(e.what(), HasSubstr("AVG is defined for floating dtypes only"));
  e = Thrown([&] { group.broadcast({i0, i1}, 2); });
  EXPECT_EQ(e.code(), StatusCode::INVALID_ARGUMENT);
  EXPECT_THAT(e.what(), HasSubstr("root is rank 2"));
  e = Thrown([&] { group.reduce_scatter({i0, i1}); });
  EXPECT_EQ(e.code(), StatusCode::INVALID_ARGUMENT);
  e = Thrown([&] { c.new_group({"cpu:0", "cpu:0"}); });
  EXPECT_EQ(e.code(), StatusCode::INVALID_ARGUMENT);
  EXPECT_THAT(e.what(), HasSubstr("named twice"));
  e = Thrown([&] { c.new_group({"cpu:5"}); });
  EXPECT_EQ(e.code(), StatusCode::NOT_FOUND);
  e = Thrown([&] { c.new_group({}); });
  EXPECT_EQ(e.code(), StatusCode::INVALID_ARGUMENT);
  // The group still works after every refusal.
  group.all_reduce({a, c.tensor<float>({1, 2}, "cpu:1")});
  EXPECT_THAT(a.fetch<float>(), ElementsAre(2, 4));
}

TEST_F(DistributedClientTest, TheLastCopyDestroysTheGroupOnTheServer) {
  Client& c = *client_;
  SKIP_WITHOUT_GLOO(c);
  {
    ProcessGroup g = c.new_group({"cpu:0", "cpu:1", "cpu:2"});
    ProcessGroup copy = g;
    EXPECT_EQ(Groups(), 1u);
  }
  EXPECT_EQ(Groups(), 0u);
}

}  // namespace
}  // namespace tensord

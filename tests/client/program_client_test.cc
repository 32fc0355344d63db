// tensord::Program (issue 34 item 6): a Batch compiled into a program and
// run with new inputs equals the same step run as a Batch each time (SGD
// with momentum and Adam: the optimizer's step counts per run), one program
// per input signature, a dropped program registered again, a seeded
// dropout's masks run for run, and the planning error of a signature the
// ops refuse.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <memory>
#include <vector>

#include "examples/cifar_net.h"
#include "in_process_fixture.h"
#include "tensord/client.h"

namespace tensord {
namespace {

using ::testing::HasSubstr;

class ProgramClientTest : public InProcessClientTest {
 protected:
  ProgramClientTest() : InProcessClientTest("tensord-program-") {}
};

// The step of a small classifier recorded in `b`: its loss, kept.
Batch::Value RecordStep(Batch& b, nn::Sequential& net,
                        optim::Optimizer& optimizer, const Tensor& x,
                        const Tensor& labels) {
  const std::vector<Tensor> p = net.parameters();
  optimizer.zero_grad(b);
  const Batch::Value loss = b.cross_entropy(
      b.linear(b.relu(b.linear(x, p[0], p[1])), p[2], p[3]), labels);
  b.backward(loss);
  optimizer.step(b);
  b.keep(loss);
  return loss;
}

std::unique_ptr<nn::Sequential> Net(Client& c) {
  nn::manual_seed(3);
  return std::unique_ptr<nn::Sequential>(new nn::Sequential(
      {std::make_shared<nn::Linear>(c, 4, 8), std::make_shared<nn::ReLU>(),
       std::make_shared<nn::Linear>(c, 8, 3)}));
}

template <typename Optimizer, typename Options>
void ExpectProgramRunsEqualBatches(Client& c, Options options) {
  auto eager_net = Net(c);
  auto net = Net(c);
  Optimizer eager_opt(eager_net->parameters(), options);
  Optimizer opt(net->parameters(), options);
  std::vector<Tensor> xs, ys;
  for (int i = 0; i < 6; ++i) {
    const int64_t n = i == 5 ? 5 : 16;  // the last batch is smaller
    xs.push_back(c.randn({n, 4}, "cpu", 10 + i));
    ys.push_back(xs.back().narrow(1, 0, 3).argmax(1));
  }
  Batch first = c.batch();
  const Batch::Value loss = RecordStep(first, *net, opt, xs[0], ys[0]);
  Program step = first.compile({xs[0], ys[0]});
  EXPECT_EQ(step.ops(), 7u);  // zero_grad, the net (3), loss, backward, step
  EXPECT_EQ(opt.steps(), 0);  // recorded, not run
  for (size_t i = 0; i < xs.size(); ++i) {
    SCOPED_TRACE(i);
    Batch b = c.batch();
    const Batch::Value eager_loss =
        RecordStep(b, *eager_net, eager_opt, xs[i], ys[i]);
    const float want = b.run().item<float>(eager_loss);
    const float got = step.run({xs[i], ys[i]}).item<float>(loss);
    EXPECT_EQ(got, want);
  }
  EXPECT_EQ(step.programs(), 2u);  // [16, 4] and [5, 4]
  EXPECT_EQ(opt.steps(), eager_opt.steps());
  for (size_t k = 0; k < net->parameters().size(); ++k) {
    EXPECT_EQ(net->parameters()[k].fetch<float>(),
              eager_net->parameters()[k].fetch<float>());
  }
}

TEST_F(ProgramClientTest, RunsEqualTheBatchesWithSgdMomentum) {
  ExpectProgramRunsEqualBatches<optim::SGD>(
      *client_, optim::SGDOptions{.lr = 0.1, .momentum = 0.9});
}

TEST_F(ProgramClientTest, RunsEqualTheBatchesWithAdam) {
  ExpectProgramRunsEqualBatches<optim::Adam>(*client_,
                                             optim::AdamOptions{.lr = 0.01});
}

TEST_F(ProgramClientTest, SeedOnesCompiledStepEqualsItsEagerStep) {
  // examples/cifar_net.h's Net: forward(Batch&) records the ops forward()
  // runs, so its compiled step (train_bench's compiled row) is the eager
  // step planned once.
  Client& c = *client_;
  nn::manual_seed(1);
  examples::Net eager_net(c);
  nn::manual_seed(1);
  examples::Net net(c);
  optim::SGD eager_opt(eager_net.parameters(), {.lr = 0.01, .momentum = 0.9});
  optim::SGD opt(net.parameters(), {.lr = 0.01, .momentum = 0.9});
  auto x = c.randn({2, 3, 32, 32}, "cpu", 2);
  auto y = c.tensor<int64_t>({3, 7});
  Batch b = c.batch();
  opt.zero_grad(b);
  const Batch::Value loss = b.cross_entropy(net.forward(b, x), y);
  b.backward(loss);
  opt.step(b);
  b.keep(loss);
  Program step = b.compile({x, y});
  for (int i = 0; i < 3; ++i) {
    eager_opt.zero_grad();
    auto eager_loss = cross_entropy(eager_net(x), y);
    eager_loss.backward();
    eager_opt.step();
    EXPECT_EQ(step.run({x, y}).item<float>(loss), eager_loss.item<float>());
  }
  for (size_t k = 0; k < net.parameters().size(); ++k) {
    EXPECT_EQ(net.parameters()[k].fetch<float>(),
              eager_net.parameters()[k].fetch<float>());
  }
}

// A seeded dropout draws a new mask at each run: the masks nn::Dropout
// draws eagerly after the same nn::manual_seed, run for run.
TEST_F(ProgramClientTest, EachRunDrawsTheMaskTheEagerStepWould) {
  Client& c = *client_;
  const Tensor x = c.ones({256});
  nn::Dropout drop(0.5);
  nn::manual_seed(40);
  std::vector<std::vector<float>> eager;
  for (int i = 0; i < 3; ++i) eager.push_back(drop.forward(x).fetch<float>());
  EXPECT_NE(eager[0], eager[1]);
  nn::manual_seed(40);
  Batch b = c.batch();
  const Batch::Value dropped =
      b.dropout(x, 0.5, true, client::internal::TakeSeeds(1));
  b.keep(dropped);
  Program step = b.compile({x});
  for (int i = 0; i < 3; ++i) {
    EXPECT_EQ(step.run({x})[dropped].fetch<float>(), eager[i]) << "run " << i;
  }
}

TEST_F(ProgramClientTest, PlanningErrorsAndInputCounts) {
  Client& c = *client_;
  auto w = c.tensor<float>(std::vector<float>{1, 2, 3, 4}, {2, 2});
  auto x = c.ones({2, 2});
  Batch b = c.batch();
  const Batch::Value y = b.matmul(x, w);
  b.keep(y);
  Program p = b.compile({x});
  EXPECT_EQ(p.run({c.ones({2, 2})})[y].fetch<float>(),
            (std::vector<float>{4, 6, 4, 6}));
  try {
    (void)p.run({c.ones({3, 3})});
    FAIL() << "a [3, 3] input planned";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), StatusCode::INVALID_ARGUMENT);
    EXPECT_THAT(e.message(), HasSubstr("op #0 (matmul; operands: input #0"));
  }
  try {
    (void)p.run({});
    FAIL() << "no inputs ran";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), StatusCode::INVALID_ARGUMENT);
    EXPECT_THAT(e.message(), HasSubstr("takes 1 inputs, got 0"));
  }
  EXPECT_THROW((void)b.compile({x}), Error);  // once
}

}  // namespace
}  // namespace tensord

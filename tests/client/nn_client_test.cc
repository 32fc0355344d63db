// tensord::nn, tensord::optim and tensord::data through the client library
// against an in-process tensord (two host devices): parameter names as
// PyTorch's, module.to, train/eval, optimizers whose state stays on the
// server, the 1,000-step leak check, and the CIFAR-10 and MNIST loaders on
// small files written here in those formats.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cstdint>
#include <filesystem>
#include <fstream>
#include <optional>
#include <string>
#include <vector>

#include "server/server.h"
#include "tests/client/in_process_fixture.h"
#include "tensord/client.h"

namespace tensord {
namespace {

using ::testing::ElementsAre;
using ::testing::FloatEq;
using ::testing::HasSubstr;

class NnClientTest : public InProcessClientTest {
 protected:
  NnClientTest() : InProcessClientTest("tensord-nn-") {}
};

// d2l's `net = nn.Sequential(nn.Linear(3, 1))` on a device, and a module
// with named children.
class Small : public nn::Module {
 public:
  explicit Small(const Client& c) {
    conv = register_module("conv", std::make_shared<nn::Conv2d>(c, 2, 3, 3));
    head = register_module(
        "head", std::make_shared<nn::Sequential>(std::initializer_list<
                                                 std::shared_ptr<nn::Module>>{
                    std::make_shared<nn::Flatten>(),
                    std::make_shared<nn::Dropout>(0.5),
                    std::make_shared<nn::Linear>(c, 12, 4)}));
  }
  Tensor forward(const Tensor& x) override {
    return (*head)((*conv)(x).relu());
  }
  std::shared_ptr<nn::Conv2d> conv;
  std::shared_ptr<nn::Sequential> head;
};

TEST_F(NnClientTest, ParametersAreNamedAsPyTorchNamesThem) {
  Client& c = *client_;
  nn::Sequential net({std::make_shared<nn::Linear>(c, 3, 1)});
  std::vector<std::string> names;
  for (const auto& [name, p] : net.named_parameters()) names.push_back(name);
  EXPECT_THAT(names, ElementsAre("0.weight", "0.bias"));
  auto& first = dynamic_cast<nn::Linear&>(net[0]);
  EXPECT_THAT(first.weight.shape(), ElementsAre(1, 3));
  EXPECT_TRUE(first.weight.requires_grad());
  // PyTorch's init: uniform in +-1/sqrt(fan_in).
  for (float w : first.weight.fetch<float>()) {
    EXPECT_LE(std::abs(w), 1 / std::sqrt(3.0f));
  }
  // net.to(device): where net[0].weight.data lives; still a leaf.
  net.to("cpu:1");
  EXPECT_EQ(first.weight.device(), Device("cpu:1"));
  EXPECT_TRUE(first.weight.requires_grad());
  EXPECT_EQ(first.weight.grad_fn(), "");
  // d2l: net(X) prints with its device and grad_fn, as PyTorch's repr.
  auto y = net(c.ones({2, 3}, DType::kFloat32, "cpu:1"));
  EXPECT_THAT(y.shape(), ElementsAre(2, 1));
  EXPECT_THAT(y.str(), ::testing::EndsWith(
                           "device='cpu:1', grad_fn=<AddmmBackward0>)"));
  auto leaf = c.tensor<float>({1, 2}).requires_grad_();
  EXPECT_EQ(leaf.str(), "tensor([1., 2.], requires_grad=True)");

  Small small(c);
  names.clear();
  for (const auto& [name, p] : small.named_parameters()) names.push_back(name);
  EXPECT_THAT(names, ElementsAre("conv.weight", "conv.bias", "head.2.weight",
                                 "head.2.bias"));
  // Dropout drops in training only; manual_seed makes networks repeatable.
  auto x = c.randn({2, 2, 4, 4}, "cpu", 3);
  small.eval();
  EXPECT_EQ(small(x).fetch<float>(), small(x).fetch<float>());
  small.train();
  EXPECT_NE(small(x).fetch<float>(), small(x).fetch<float>());
  nn::manual_seed(9);
  nn::Linear a(c, 4, 4);
  nn::manual_seed(9);
  nn::Linear b(c, 4, 4);
  EXPECT_EQ(a.weight.fetch<float>(), b.weight.fetch<float>());
}

TEST_F(NnClientTest, ActivationsWithArgumentsUseThem) {
  Client& c = *client_;
  const Tensor x = c.tensor<float>({-4, -0.5, 0.5, 4});
  EXPECT_THAT(nn::LeakyReLU(0.25)(x).fetch<float>(),
              ElementsAre(-1, -0.125, 0.5, 4));
  EXPECT_THAT(nn::LeakyReLU()(x).fetch<float>(),
              ElementsAre(-0.04f, -0.005f, 0.5, 4));
  EXPECT_THAT(nn::Hardtanh(-0.75, 2)(x).fetch<float>(),
              ElementsAre(-0.75, -0.5, 0.5, 2));
  EXPECT_THAT(nn::Hardtanh()(x).fetch<float>(), ElementsAre(-1, -0.5, 0.5, 1));
  const std::vector<float> elu = nn::ELU(2)(x).fetch<float>();
  EXPECT_FLOAT_EQ(elu[0], 2 * std::expm1(-4.0f));
  EXPECT_FLOAT_EQ(elu[3], 4);
  // In a Batch, one Execute.
  Batch batch = c.batch();
  const Batch::Value y = batch.hardtanh(batch.elu(x, 0.5), -0.25, 1);
  batch.keep(y);
  // elu(-4, 0.5) = -0.49 is clamped; elu(-0.5, 0.5) = -0.197 is not.
  EXPECT_THAT(batch.run()[y].fetch<float>(),
              ElementsAre(-0.25, FloatEq(0.5f * std::expm1(-0.5f)), 0.5, 1));
}

// BatchNorm2d over x [2, 1, 1, 2] = {1, 3, 5, 7} (one channel): the batch's
// mean 4 and biased variance 5 in training, the running statistics moved
// by momentum 0.5 toward 4 and the unbiased variance 20/3; eval uses them.
TEST_F(NnClientTest, BatchNorm2dKeepsRunningStatisticsAsBuffers) {
  Client& c = *client_;
  nn::BatchNorm2d bn(c, 1, /*eps=*/0, /*momentum=*/0.5);
  const Tensor x = c.tensor<float>({1, 3, 5, 7}, {2, 1, 1, 2});
  const float s = std::sqrt(5.0f);
  EXPECT_THAT(bn(x).fetch<float>(),
              ElementsAre(FloatEq(-3 / s), FloatEq(-1 / s), FloatEq(1 / s),
                          FloatEq(3 / s)));
  EXPECT_THAT(bn.running_mean->fetch<float>(), ElementsAre(2));
  EXPECT_THAT(bn.running_var->fetch<float>(),
              ElementsAre(FloatEq(0.5f + 10.0f / 3)));
  EXPECT_THAT(bn.num_batches_tracked->fetch<int64_t>(), ElementsAre(1));
  bn.eval();
  const float v = std::sqrt(0.5f + 10.0f / 3);
  EXPECT_THAT(bn(x).fetch<float>(),
              ElementsAre(FloatEq(-1 / v), FloatEq(1 / v), FloatEq(3 / v),
                          FloatEq(5 / v)));
  EXPECT_THAT(bn.num_batches_tracked->fetch<int64_t>(), ElementsAre(1));
  // Parameters are trained; buffers are state, saved and loaded with them.
  std::vector<std::string> names;
  for (const auto& [name, p] : bn.named_parameters()) names.push_back(name);
  EXPECT_THAT(names, ElementsAre("weight", "bias"));
  bn.save(dir_ / "bn.safetensors");
  nn::BatchNorm2d other(c, 1);
  other.load(dir_ / "bn.safetensors");
  EXPECT_THAT(other.running_mean->fetch<float>(), ElementsAre(2));
  EXPECT_FALSE(other.running_mean->requires_grad());
  EXPECT_TRUE(other.weight->requires_grad());
  try {
    bn(c.tensor<float>({1, 2}, {1, 1, 2}));
    FAIL() << "no error";
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), ErrorKind::kValueError);
    EXPECT_EQ(e.message(), "expected 4D input (got 3D input)");
  }
  // LayerNorm over the last dim, in a Batch too.
  nn::LayerNorm ln(c, {2}, /*eps=*/0);
  EXPECT_THAT(ln(c.tensor<float>({1, 3, 5, 9}, {2, 2})).fetch<float>(),
              ElementsAre(-1, 1, -1, 1));
  Batch batch = c.batch();
  const Batch::Value y =
      batch.layer_norm(x, {1, 2}, std::nullopt, std::nullopt, 0);
  batch.keep(y);
  EXPECT_THAT(batch.run()[y].fetch<float>(), ElementsAre(-1, 1, -1, 1));
  // batch_norm in a Batch: eval with running statistics, weight and bias
  // ((x - 1) / sqrt(4) * 3 + 1), and training updating them in place.
  const Tensor mean = c.tensor<float>({1}, {1});
  const Tensor var = c.tensor<float>({4}, {1});
  Batch norms = c.batch();
  const Batch::Value eval =
      norms.batch_norm(x, mean, var, c.tensor<float>({3}, {1}),
                       c.tensor<float>({1}, {1}), {.eps = 0});
  const Batch::Value train =
      norms.batch_norm(x, mean, var, std::nullopt, std::nullopt,
                       {.training = true, .momentum = 1, .eps = 0});
  norms.keep(eval);
  norms.keep(train);
  const BatchResults results = norms.run();
  EXPECT_THAT(results[eval].fetch<float>(), ElementsAre(1, 4, 7, 10));
  EXPECT_THAT(results[train].fetch<float>(),
              ElementsAre(FloatEq(-3 / s), FloatEq(-1 / s), FloatEq(1 / s),
                          FloatEq(3 / s)));
  EXPECT_THAT(mean.fetch<float>(), ElementsAre(4));
  EXPECT_THAT(var.fetch<float>(), ElementsAre(FloatEq(20.0f / 3)));
}

TEST_F(NnClientTest, StateDictSavesAndLoads) {
  Client& c = *client_;
  Small small(c);
  small.save(dir_ / "small.safetensors");
  Small other(c);
  EXPECT_NE(other.conv->weight.fetch<float>(), small.conv->weight.fetch<float>());
  other.load(dir_ / "small.safetensors");
  for (size_t i = 0; i < 4; ++i) {
    EXPECT_EQ(other.parameters()[i].fetch<float>(),
              small.parameters()[i].fetch<float>());
    EXPECT_TRUE(other.parameters()[i].requires_grad());
  }
  nn::Linear wrong(c, 5, 4);
  try {
    wrong.load(dir_ / "small.safetensors");
    FAIL() << "no error";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), StatusCode::INVALID_ARGUMENT);
    EXPECT_THAT(e.message(), HasSubstr("no tensor 'weight'"));
  }
  std::ofstream(dir_ / "junk.safetensors") << "not a safetensors file";
  EXPECT_THROW(small.load(dir_ / "junk.safetensors"), Error);
}

TEST_F(NnClientTest, ATrainingLoopEndsHoldingParametersAndStateOnly) {
  // 1,000 steps of a small classifier with Adam: afterwards the session
  // holds the parameters and the optimizer's state (grads live with their
  // parameters), and the device holds what it held after the first step.
  Client& c = *client_;
  nn::manual_seed(1);
  nn::Sequential net({std::make_shared<nn::Linear>(c, 4, 8),
                      std::make_shared<nn::ReLU>(),
                      std::make_shared<nn::Linear>(c, 8, 3)});
  optim::Adam optimizer(net.parameters(), {.lr = 0.01});
  auto x = c.randn({16, 4}, "cpu", 5);
  auto labels = x.narrow(1, 0, 3).argmax(1);  // learnable: the largest of 3
  uint64_t held_after_first = 0;
  float first = 0, last = 0;
  for (int step = 0; step < 1000; ++step) {
    if (step == 1) held_after_first = Held();
    optimizer.zero_grad();
    auto loss = cross_entropy(net(x), labels);
    loss.backward();
    optimizer.step();
    if (step == 0) first = loss.item<float>();
    if (step == 999) last = loss.item<float>();
  }
  EXPECT_LT(last, first / 4);
  EXPECT_EQ(optimizer.steps(), 1000);
  const size_t params = net.parameters().size();
  // The inputs, the parameters, Adam's two moments per parameter.
  EXPECT_EQ(c.tensors().size(), 2 + params + 2 * params);
  // Beyond its handles the session holds the parameters' grads, and
  // nothing any step's graph saved.
  const std::vector<TensorInfo> held = c.held();
  EXPECT_EQ(held.size(), params);
  for (const TensorInfo& t : held) {
    EXPECT_THAT(t.tag, ::testing::StartsWith("grad of tensor ")) << t.tag;
  }
  EXPECT_EQ(Held(), held_after_first);

  // The step in one Execute, and SGD's own messages.
  Batch b = c.batch();
  optimizer.zero_grad(b);
  auto kept = b.backward(b.cross_entropy(b.linear(b.relu(b.linear(
      x, net.parameters()[0], net.parameters()[1])),
      net.parameters()[2], net.parameters()[3]), labels));
  optimizer.step(b);
  b.keep(kept);
  EXPECT_LT(b.run()[kept].item<float>(), first);
  optim::SGD bad(net.parameters(), {.lr = -1});
  try {
    bad.step();
    (void)net.parameters()[0].fetch<float>();
    FAIL() << "no error";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), StatusCode::INVALID_ARGUMENT);
    EXPECT_THAT(e.message(), HasSubstr("Invalid learning rate: -1.0"));
  }
}

TEST_F(NnClientTest, LoadersReadCifarAndMnistFiles) {
  // Two CIFAR-10 records per batch file: label, then R, G, B planes.
  for (const std::string name :
       {"data_batch_1.bin", "data_batch_2.bin", "data_batch_3.bin",
        "data_batch_4.bin", "data_batch_5.bin", "test_batch.bin"}) {
    std::ofstream f(dir_ / name, std::ios::binary);
    for (int r = 0; r < 2; ++r) {
      f.put(static_cast<char>(r == 0 ? 3 : 9));
      for (int i = 0; i < 3072; ++i) f.put(static_cast<char>(i < 1024 ? 255 : 0));
    }
  }
  data::Dataset train = data::LoadCifar10(dir_, true);
  EXPECT_EQ(train.size(), 10);
  EXPECT_THAT(train.image_shape, ElementsAre(3, 32, 32));
  EXPECT_EQ(train.labels[0], 3);
  EXPECT_EQ(train.labels[1], 9);
  EXPECT_FLOAT_EQ(train.images[0], 1.0f);      // red plane: 255 -> 1
  EXPECT_FLOAT_EQ(train.images[1024], -1.0f);  // green: 0 -> -1
  EXPECT_EQ(data::LoadCifar10(dir_, false).size(), 2);
  std::ofstream(dir_ / "test_batch.bin", std::ios::binary) << "short";
  EXPECT_THROW(data::LoadCifar10(dir_, false), Error);

  // MNIST: two 2x3 images.
  auto be32 = [](std::ofstream& f, uint32_t v) {
    for (int s = 24; s >= 0; s -= 8) f.put(static_cast<char>(v >> s));
  };
  {
    std::ofstream images(dir_ / "images", std::ios::binary);
    be32(images, 0x803);
    be32(images, 2);
    be32(images, 2);
    be32(images, 3);
    for (int i = 0; i < 12; ++i) images.put(static_cast<char>(i * 20));
    std::ofstream labels(dir_ / "labels", std::ios::binary);
    be32(labels, 0x801);
    be32(labels, 2);
    labels.put(7);
    labels.put(1);
  }
  data::Dataset mnist = data::LoadMnist(dir_ / "images", dir_ / "labels");
  EXPECT_THAT(mnist.image_shape, ElementsAre(1, 2, 3));
  EXPECT_THAT(mnist.labels, ElementsAre(7, 1));
  EXPECT_FLOAT_EQ(mnist.images[0], -1.0f);
  EXPECT_THROW(data::LoadMnist(dir_ / "labels", dir_ / "images"), Error);

  // Batches: every image once per pass, shuffled differently each pass.
  data::Dataset synthetic = data::SyntheticPatterns(50, 3);
  EXPECT_EQ(synthetic.size(), 50);
  data::DataLoader loader(synthetic, 8, true, 1);
  EXPECT_EQ(loader.size(), 7);
  std::vector<int64_t> first_pass, second_pass;
  for (const data::Batch& b : loader) {
    EXPECT_EQ(b.shape[0], static_cast<int64_t>(b.labels.size()));
    first_pass.insert(first_pass.end(), b.labels.begin(), b.labels.end());
  }
  for (const data::Batch& b : loader) {
    second_pass.insert(second_pass.end(), b.labels.begin(), b.labels.end());
  }
  EXPECT_EQ(first_pass.size(), 50u);
  EXPECT_NE(first_pass, second_pass);
  std::sort(first_pass.begin(), first_pass.end());
  std::sort(second_pass.begin(), second_pass.end());
  EXPECT_EQ(first_pass, second_pass);
  // The classes differ in pattern, not in mean colour: every class's mean
  // is near 0 (random colours of either sign on random backgrounds).
  const data::Dataset many = data::SyntheticPatterns(2000, 4);
  std::vector<double> mean(10, 0.0), count(10, 0.0);
  for (int64_t i = 0; i < many.size(); ++i) {
    for (int64_t k = 0; k < many.image_numel(); ++k) {
      mean[many.labels[i]] += many.images[i * 3072 + k];
    }
    count[many.labels[i]] += 3072;
  }
  for (int k = 0; k < 10; ++k) {
    EXPECT_NEAR(mean[k] / count[k], 0, 0.1) << many.classes[k];
  }
}

}  // namespace
}  // namespace tensord

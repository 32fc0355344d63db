// Linear regression trained by gradient descent entirely on server-side
// tensors (d2l's "Linear Regression Implementation from Scratch", served
// remotely). Synthetic data y = X w* + b* + noise lives on the device; each
// step is one Batch (one round trip): forward, squared loss, hand-written
// gradients (matmul with X^T, sum) and in-place sub_ updates of w and b. The
// loss is fetched every --log-every steps only. Exits 0 with a message once
// the loss is below the threshold, 1 if --steps run out first.
//
//   train_regression [--address HOST:PORT] [--steps 500] [--log-every 20]
//                    [--samples 1000] [--features 4]
#include <cstdint>
#include <iostream>
#include <vector>

#include "example_flags.h"
#include "tensord/client.h"

int main(int argc, char** argv) {
  int64_t steps = 500, log_every = 20, samples = 1000, features = 4;
  const std::string address = tensord::examples::ParseArgs(
      argc, argv,
      {{"--steps", &steps, "most gradient steps"},
       {"--log-every", &log_every, "fetch the loss every N steps"},
       {"--samples", &samples, "training examples"},
       {"--features", &features, "input features"}});
  // The noise has variance 1e-4, so a converged model's mean squared error
  // is about 1e-4; 1e-3 means the weights are within a few hundredths.
  constexpr double kThreshold = 1e-3;
  constexpr double kLearningRate = 0.1;
  try {
    tensord::Client client(address);
    const tensord::Device dev = client.try_gpu();
    std::vector<float> true_w;
    for (int64_t i = 0; i < features; ++i) {
      true_w.push_back(static_cast<float>(i % 2 == 0 ? 2.0 - 0.5 * i : -3.4));
    }
    const float true_b = 4.2f;
    auto x = client.randn({samples, features}, dev, 11);
    auto noise = client.randn({samples, 1}, dev, 12) * 0.01;
    auto y = x.matmul(client.tensor<float>(true_w, {features, 1}, dev)) +
             true_b + noise;
    auto xt = x.t();  // [features, samples], for the gradient of w
    auto w = client.zeros({features, 1}, tensord::DType::kFloat32, dev);
    auto b = client.zeros({1}, tensord::DType::kFloat32, dev);
    const double scale = 2.0 * kLearningRate / static_cast<double>(samples);

    std::cout << "linear regression on " << dev << ": " << samples
              << " examples, " << features << " features, lr " << kLearningRate
              << ", threshold " << kThreshold << "\n";
    for (int64_t step = 1; step <= steps; ++step) {
      tensord::Batch batch = client.batch();
      auto pred = batch.add(batch.matmul(x, w), b);  // X w + b
      auto err = batch.sub(pred, y);
      auto loss = batch.mean(batch.mul(err, err));  // MSE before the step
      // d(MSE)/dw = 2/n X^T err, d(MSE)/db = 2/n sum(err).
      batch.sub_(w, batch.mul(batch.matmul(xt, err), scale));
      batch.sub_(b, batch.mul(batch.sum(err), scale));
      const bool report = step % log_every == 0 || step == steps;
      if (report) batch.keep(loss);
      tensord::BatchResults results = batch.run();
      if (!report) continue;
      const float l = results[loss].item<float>();
      std::cout << "step " << step << ": loss " << l << "\n";
      if (l < kThreshold) {
        std::cout << "converged: loss " << l << " is below " << kThreshold
                  << " after " << step << " steps; b = " << b.item<float>()
                  << " (true " << true_b << ")\n";
        return 0;
      }
    }
    std::cout << "did not converge: loss still above " << kThreshold
              << " after " << steps << " steps\n";
    return 1;
  } catch (const tensord::Error& e) {
    std::cerr << "train_regression: " << e.what() << "\n";
    return 1;
  }
}

// Seed 001 ("Training a Classifier", PyTorch's CIFAR-10 tutorial) on a
// remote device: the tutorial's network, loss, optimizer and loop, line for
// line, with tensord::nn, tensord::optim and autograd in the server.
// --data DIR trains on CIFAR-10's binary batches (cifar-10-batches-bin);
// without it, on tensord::data::SyntheticPatterns (10 classes of spatial
// patterns), so it runs on machines with no download. Prints the seed's
// "[epoch, batch] loss: ..." lines, saves the weights as safetensors with
// PyTorch's key names (they load into the tutorial's Net), then prints the
// accuracy on held-out images; exits 1 when it is below --min-accuracy.
//
//   train_cifar_net [--address HOST:PORT] [--data DIR] [--epochs 2]
//                   [--batch-size 4] [--lr 0.001] [--train 5000] [--test 1000]
//                   [--log-every 500] [--out cifar_net.safetensors]
//                   [--load WEIGHTS.safetensors] [--min-accuracy 0]
//                   [--compile 1]
//
// --compile 1 records the step once in a Batch (the same ops: Net's
// forward(Batch&)) and compiles it into a program the server plans once
// (tensord/program.h); each batch is then one RunProgram, with the loss's
// value in its reply. The losses are the eager loop's.
// The defaults are the seed's (batch 4, lr 0.001, momentum 0.9), which need
// the seed's 25,000 steps; on the synthetic set --batch-size 8 --lr 0.01
// reaches over 90% in 1,000 steps.
#include <cstdint>
#include <cstdio>
#include <iostream>
#include <memory>
#include <optional>
#include <string>

#include "cifar_net.h"
#include "example_flags.h"
#include "tensord/client.h"

int main(int argc, char** argv) {
  int64_t epochs = 2, batch_size = 4, train_n = 5000, test_n = 1000;
  int64_t log_every = 500, min_accuracy = 0, seed = 1, compile = 0;
  std::string data_dir, lr_text = "0.001", out = "cifar_net.safetensors";
  std::string load;
  const std::string address = tensord::examples::ParseArgs(
      argc, argv,
      {{"--epochs", &epochs, "passes over the training set"},
       {"--batch-size", &batch_size, "images per step"},
       {"--train", &train_n, "synthetic training images"},
       {"--test", &test_n, "synthetic held-out images"},
       {"--log-every", &log_every, "print the mean loss every N batches"},
       {"--min-accuracy", &min_accuracy, "exit 1 below this accuracy (%)"},
       {"--seed", &seed, "initial weights and shuffling"},
       {"--compile", &compile, "1: run the step as a program compiled once"}},
      {{"--data", &data_dir, "CIFAR-10 binary batches (else synthetic)"},
       {"--lr", &lr_text, "SGD learning rate (momentum 0.9)"},
       {"--out", &out, "where to save the weights"},
       {"--load", &load, "start from these weights (safetensors)"}});
  try {
    tensord::Client client(address);
    const tensord::Device device = client.try_gpu();
    std::cout << "training on " << device << "\n";

    const tensord::data::Dataset trainset =
        data_dir.empty() ? tensord::data::SyntheticPatterns(train_n, 2026)
                         : tensord::data::LoadCifar10(data_dir, true);
    const tensord::data::Dataset testset =
        data_dir.empty() ? tensord::data::SyntheticPatterns(test_n, 7)
                         : tensord::data::LoadCifar10(data_dir, false);
    tensord::data::DataLoader trainloader(trainset, batch_size, true, seed);
    std::cout << trainset.size() << " training images, " << testset.size()
              << " held out (" << (data_dir.empty() ? "synthetic" : "CIFAR-10")
              << ")\n";

    tensord::nn::manual_seed(static_cast<uint64_t>(seed));
    tensord::examples::Net net(client);
    net.to(device);
    if (!load.empty()) net.load(load);

    tensord::optim::SGD optimizer(net.parameters(),
                                  {.lr = std::stod(lr_text), .momentum = 0.9});

    // A batch's images on the device (the seed's inputs.to(device)).
    auto upload = [&](const tensord::data::Batch& data) {
      return client.FromBytes(
          tensord::DType::kFloat32, data.shape,
          {reinterpret_cast<const char*>(data.images.data()),
           data.images.size() * sizeof(float)},
          device);
    };
    std::optional<tensord::Program> step;  // --compile
    std::optional<tensord::Batch::Value> step_loss;
    for (int64_t epoch = 0; epoch < epochs; ++epoch) {  // loop over the dataset
      double running_loss = 0.0;
      int64_t i = 0;
      for (const tensord::data::Batch& data : trainloader) {
        // get the inputs; data is a list of [inputs, labels]
        auto inputs = upload(data);
        auto labels = client.tensor<int64_t>(data.labels, device);

        if (compile != 0) {
          // The step recorded at the first batch and compiled (planned once
          // on the server); a smaller last batch gets its own program.
          if (!step.has_value()) {
            tensord::Batch b = client.batch();
            optimizer.zero_grad(b);
            step_loss.emplace(
                b.cross_entropy(net.forward(b, inputs), labels));
            b.backward(*step_loss);
            optimizer.step(b);
            b.keep(*step_loss);
            step.emplace(b.compile({inputs, labels}));
          }
          running_loss += step->run({inputs, labels}).item<float>(*step_loss);
        } else {
          // zero the parameter gradients
          optimizer.zero_grad();

          // forward + backward + optimize
          auto outputs = net(inputs);
          auto loss = tensord::cross_entropy(outputs, labels);
          loss.backward();
          optimizer.step();

          // print statistics
          running_loss += loss.item<float>();
        }
        if (i % log_every == log_every - 1) {
          std::printf("[%lld, %5lld] loss: %.3f\n",
                      static_cast<long long>(epoch + 1),
                      static_cast<long long>(i + 1), running_loss / log_every);
          std::fflush(stdout);
          running_loss = 0.0;
        }
        ++i;
      }
    }
    std::cout << "Finished Training\n";
    net.save(out);
    std::cout << "saved " << out << "\n";

    // Accuracy on the held-out images, with no gradients recorded.
    net.eval();
    tensord::NoGradGuard no_grad;
    tensord::data::DataLoader testloader(testset, 100, false);
    int64_t correct = 0, total = 0;
    for (const tensord::data::Batch& data : testloader) {
      auto images = upload(data);
      // the class with the highest energy is what we choose as prediction
      auto outputs = net(images);
      const auto [energy, predicted_classes] = tensord::max(outputs, 1);
      const auto predicted = predicted_classes.fetch<int64_t>();
      for (size_t k = 0; k < predicted.size(); ++k) {
        correct += predicted[k] == data.labels[k];
      }
      total += static_cast<int64_t>(data.labels.size());
    }
    const int64_t accuracy = total == 0 ? 0 : 100 * correct / total;
    std::cout << "Accuracy of the network on the " << total
              << " test images: " << accuracy << " %\n";
    return accuracy >= min_accuracy ? 0 : 1;
  } catch (const tensord::Error& e) {
    std::cerr << "error: " << e.what() << "\n";
    return 1;
  }
}

// Datasets and batching on the client (tensord/data.h).
#include "tensord/data.h"

#include <algorithm>
#include <cmath>
#include <fstream>
#include <numbers>
#include <numeric>

#include "tensord/errors.h"

namespace tensord::client::data {
namespace {

std::string ReadFile(const std::filesystem::path& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) {
    throw Error(StatusCode::NOT_FOUND, "cannot open " + path.string());
  }
  return std::string((std::istreambuf_iterator<char>(in)),
                     std::istreambuf_iterator<char>());
}

Error BadFile(const std::filesystem::path& path, const std::string& why) {
  return Error(StatusCode::INVALID_ARGUMENT, path.string() + ": " + why);
}

// A byte as the seeds' transforms give it: ToTensor's [0, 1], then
// Normalize(0.5, 0.5).
float Normalised(unsigned char byte) {
  return (static_cast<float>(byte) / 255.0f - 0.5f) / 0.5f;
}

uint32_t BigEndian32(const std::string& bytes, size_t at) {
  uint32_t v = 0;
  for (size_t i = 0; i < 4; ++i) {
    v = (v << 8) | static_cast<unsigned char>(bytes[at + i]);
  }
  return v;
}

}  // namespace

int64_t Dataset::image_numel() const {
  int64_t n = 1;
  for (int64_t d : image_shape) n *= d;
  return n;
}

Dataset LoadCifar10(const std::filesystem::path& dir, bool train) {
  Dataset set;
  set.image_shape = {3, 32, 32};
  set.classes = {"plane", "car",  "bird",  "cat",  "deer",
                 "dog",   "frog", "horse", "ship", "truck"};
  std::vector<std::string> files;
  if (train) {
    for (int i = 1; i <= 5; ++i) {
      files.push_back("data_batch_" + std::to_string(i) + ".bin");
    }
  } else {
    files.push_back("test_batch.bin");
  }
  constexpr size_t kRecord = 1 + 3 * 32 * 32;
  for (const std::string& name : files) {
    const std::filesystem::path path = dir / name;
    const std::string bytes = ReadFile(path);
    if (bytes.empty() || bytes.size() % kRecord != 0) {
      throw BadFile(path, std::to_string(bytes.size()) +
                              " bytes is not a whole number of 3073-byte "
                              "CIFAR-10 records");
    }
    for (size_t at = 0; at < bytes.size(); at += kRecord) {
      const auto label = static_cast<unsigned char>(bytes[at]);
      if (label > 9) {
        throw BadFile(path, "label " + std::to_string(label) + " of record " +
                                std::to_string(at / kRecord) +
                                " is not a class (0-9)");
      }
      set.labels.push_back(label);
      for (size_t i = 1; i < kRecord; ++i) {
        set.images.push_back(
            Normalised(static_cast<unsigned char>(bytes[at + i])));
      }
    }
  }
  return set;
}

Dataset LoadMnist(const std::filesystem::path& images,
                  const std::filesystem::path& labels) {
  const std::string ib = ReadFile(images);
  const std::string lb = ReadFile(labels);
  if (ib.size() < 16 || BigEndian32(ib, 0) != 0x803) {
    throw BadFile(images, "not an IDX image file (magic 0x00000803)");
  }
  if (lb.size() < 8 || BigEndian32(lb, 0) != 0x801) {
    throw BadFile(labels, "not an IDX label file (magic 0x00000801)");
  }
  const uint64_t n = BigEndian32(ib, 4), rows = BigEndian32(ib, 8),
                 cols = BigEndian32(ib, 12);
  if (ib.size() != 16 + n * rows * cols) {
    throw BadFile(images, "holds " + std::to_string(ib.size() - 16) +
                              " pixel bytes; its header says " +
                              std::to_string(n * rows * cols));
  }
  if (BigEndian32(lb, 4) != n || lb.size() != 8 + n) {
    throw BadFile(labels, "holds " + std::to_string(lb.size() - 8) +
                              " labels for " + std::to_string(n) + " images");
  }
  Dataset set;
  set.image_shape = {1, static_cast<int64_t>(rows), static_cast<int64_t>(cols)};
  for (int i = 0; i < 10; ++i) set.classes.push_back(std::to_string(i));
  set.images.reserve(n * rows * cols);
  for (size_t i = 16; i < ib.size(); ++i) {
    set.images.push_back(Normalised(static_cast<unsigned char>(ib[i])));
  }
  for (size_t i = 8; i < lb.size(); ++i) {
    const auto label = static_cast<unsigned char>(lb[i]);
    if (label > 9) {
      throw BadFile(labels, "label " + std::to_string(label) + " of image " +
                                std::to_string(i - 8) + " is not a digit");
    }
    set.labels.push_back(label);
  }
  return set;
}

Dataset SyntheticPatterns(int64_t n, uint64_t seed) {
  Dataset set;
  set.image_shape = {3, 32, 32};
  set.classes = {"horizontal",   "vertical", "diagonal", "antidiagonal",
                 "checkerboard", "spot",     "ring",     "cross",
                 "frame",        "x"};
  std::mt19937_64 rng(seed);
  std::uniform_real_distribution<double> unit(0, 1);
  std::normal_distribution<double> noise(0, 0.35);
  auto uniform = [&](double lo, double hi) {
    return lo + (hi - lo) * unit(rng);
  };
  set.images.resize(static_cast<size_t>(n) * 3 * 32 * 32);
  for (int64_t i = 0; i < n; ++i) {
    const int64_t k = static_cast<int64_t>(rng() % 10);
    set.labels.push_back(k);
    const double period = uniform(4, 7), phase = uniform(0, period);
    const double cx = uniform(11, 21), cy = uniform(11, 21);
    const double size = uniform(6, 10), cell = uniform(3, 5);
    double colour[3], background[3];
    for (int c = 0; c < 3; ++c) {
      colour[c] = uniform(0.4, 1.0) * (unit(rng) < 0.5 ? -1 : 1);
      background[c] = uniform(-0.3, 0.3);
    }
    for (int y = 0; y < 32; ++y) {
      for (int x = 0; x < 32; ++x) {
        const double dx = x - cx, dy = y - cy;
        const double d = std::sqrt(dx * dx + dy * dy);
        auto stripes = [&](double t) {
          return std::sin(2 * std::numbers::pi * (t + phase) / period) > 0;
        };
        double p = 0;
        switch (k) {
          case 0:
            p = stripes(y);
            break;
          case 1:
            p = stripes(x);
            break;
          case 2:
            p = stripes((x + y) / std::numbers::sqrt2);
            break;
          case 3:
            p = stripes((x - y) / std::numbers::sqrt2);
            break;
          case 4:
            p = (static_cast<int>(std::floor((x + phase) / cell)) +
                 static_cast<int>(std::floor((y + phase) / cell))) %
                    2 !=
                0;
            break;
          case 5:
            p = std::exp(-d * d / (2 * 0.3 * size * size * 0.3));
            break;
          case 6:
            p = std::exp(-(d - size) * (d - size) / 2.0);
            break;
          case 7:
            p = std::abs(dx) < 1.5 || std::abs(dy) < 1.5;
            break;
          case 8:
            p = std::max(std::abs(dx), std::abs(dy)) < size &&
                std::max(std::abs(dx), std::abs(dy)) > size - 2;
            break;
          default:
            p = (std::abs(dx - dy) < 1.5 || std::abs(dx + dy) < 1.5) &&
                d < size + 2;
            break;
        }
        for (int c = 0; c < 3; ++c) {
          set.images[((i * 3 + c) * 32 + y) * 32 + x] = static_cast<float>(
              background[c] + colour[c] * (2 * p - 1) * 0.8 + noise(rng));
        }
      }
    }
  }
  return set;
}

DataLoader::DataLoader(const Dataset& dataset, int64_t batch_size, bool shuffle,
                       uint64_t seed)
    : dataset_(dataset),
      batch_size_(std::max<int64_t>(batch_size, 1)),
      shuffle_(shuffle),
      rng_(seed),
      order_(static_cast<size_t>(dataset.size())) {
  std::iota(order_.begin(), order_.end(), 0);
}

int64_t DataLoader::size() const {
  return (dataset_.size() + batch_size_ - 1) / batch_size_;
}

void DataLoader::Reshuffle() {
  if (shuffle_) std::shuffle(order_.begin(), order_.end(), rng_);
}

DataLoader::Iterator DataLoader::begin() {
  Reshuffle();
  return Iterator(this, 0);
}

Batch DataLoader::Get(int64_t index) const {
  const int64_t first = index * batch_size_;
  const int64_t b = std::min(batch_size_, dataset_.size() - first);
  const int64_t numel = dataset_.image_numel();
  Batch out;
  out.shape = {b};
  out.shape.insert(out.shape.end(), dataset_.image_shape.begin(),
                   dataset_.image_shape.end());
  out.images.resize(static_cast<size_t>(b * numel));
  for (int64_t j = 0; j < b; ++j) {
    const int64_t src = order_[first + j];
    std::copy_n(dataset_.images.begin() + src * numel, numel,
                out.images.begin() + j * numel);
    out.labels.push_back(dataset_.labels[src]);
  }
  return out;
}

}  // namespace tensord::client::data

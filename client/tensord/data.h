// Datasets and batching on the client (torchvision.datasets and
// torch.utils.data.DataLoader, for the seeds' loops): images live in host
// memory as float32 [n, c, h, w] and go to the server one batch at a time.
//
//   auto train = tensord::data::LoadCifar10(dir, /*train=*/true);
//   tensord::data::DataLoader loader(train, /*batch_size=*/4,
//   /*shuffle=*/true); for (const tensord::data::Batch& b : loader) { ...
//   b.images ... }
//
// LoadCifar10 reads the CIFAR-10 binary format (data_batch_1..5.bin,
// test_batch.bin: a label byte, then 3072 bytes of R, G and B planes),
// LoadMnist the IDX format (idx3 images, idx1 labels); both scale bytes to
// [0, 1] and normalise as the seeds' transforms do ((x - 0.5) / 0.5).
// SyntheticPatterns makes a deterministic stand-in for machines with no
// download: 3x32x32 images in 10 classes that differ in spatial pattern
// (stripes of four orientations, a checkerboard, a spot, a ring, a cross,
// a frame, an X), each in a random colour and position with noise, so
// that only convolutions tell them apart (not the mean colour).
//
// Errors: Error(NOT_FOUND) for a missing file, Error(INVALID_ARGUMENT) for
// a file not in its format (naming the file and what is wrong).
// Thread-safety: a Dataset is immutable; a DataLoader is one thread's.
#ifndef TENSORD_CLIENT_TENSORD_DATA_H_
#define TENSORD_CLIENT_TENSORD_DATA_H_

#include <cstdint>
#include <filesystem>
#include <random>
#include <string>
#include <vector>

namespace tensord::client::data {

struct Dataset {
  std::vector<int64_t> image_shape;  // [c, h, w]
  std::vector<float> images;         // n * c * h * w, row-major
  std::vector<int64_t> labels;       // n
  std::vector<std::string> classes;  // names, index = label
  int64_t size() const { return static_cast<int64_t>(labels.size()); }
  int64_t image_numel() const;
};

// CIFAR-10's binary version ("cifar-10-batches-bin"): the five training
// batches or the test batch.
Dataset LoadCifar10(const std::filesystem::path& dir, bool train);
// MNIST's IDX files (e.g. train-images-idx3-ubyte, train-labels-idx1-ubyte).
Dataset LoadMnist(const std::filesystem::path& images,
                  const std::filesystem::path& labels);
// `n` synthetic 3x32x32 images (see above), reproducible from `seed`.
Dataset SyntheticPatterns(int64_t n, uint64_t seed);

// Images [b, c, h, w] and labels [b] of one batch, on the host.
struct Batch {
  std::vector<int64_t> shape;  // [b, c, h, w]
  std::vector<float> images;
  std::vector<int64_t> labels;
};

// Batches of `batch_size` in order, or shuffled anew each pass when
// `shuffle` (from `seed`); the last batch may be smaller.
class DataLoader {
 public:
  DataLoader(const Dataset& dataset, int64_t batch_size, bool shuffle,
             uint64_t seed = 0);
  int64_t size() const;            // batches per pass
  Batch Get(int64_t index) const;  // batch `index` of this pass
  // Starts a new pass (reshuffles when shuffling).
  void Reshuffle();

  class Iterator {
   public:
    Iterator(const DataLoader* loader, int64_t i) : loader_(loader), i_(i) {}
    Batch operator*() const { return loader_->Get(i_); }
    Iterator& operator++() {
      ++i_;
      return *this;
    }
    bool operator!=(const Iterator& o) const { return i_ != o.i_; }

   private:
    const DataLoader* loader_;
    int64_t i_;
  };
  // A pass over the data; each begin() reshuffles (a new epoch).
  Iterator begin();
  Iterator end() const { return Iterator(this, size()); }

 private:
  const Dataset& dataset_;
  int64_t batch_size_;
  bool shuffle_;
  std::mt19937_64 rng_;
  std::vector<int64_t> order_;
};

}  // namespace tensord::client::data

namespace tensord {
namespace data = client::data;
}  // namespace tensord

#endif  // TENSORD_CLIENT_TENSORD_DATA_H_

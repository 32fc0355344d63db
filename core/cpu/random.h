// Internal: a counter-based random generator for the CPU fills.
//
// Draw i of a stream depends only on (seed, i), so a seeded fill gives the
// same values however the work is split across threads. It is SplitMix64
// indexed directly: draw i is the i-th output of SplitMix64 started at a
// state derived from the seed. Not for cryptography.
// Thread-safety: stateless.
#ifndef TENSORD_CORE_CPU_RANDOM_H_
#define TENSORD_CORE_CPU_RANDOM_H_

#include <cstdint>

namespace tensord::core::cpu {

inline constexpr uint64_t kGoldenGamma = 0x9e3779b97f4a7c15ULL;

inline uint64_t Mix64(uint64_t z) {
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
  return z ^ (z >> 31);
}

class CounterRandom {
 public:
  explicit CounterRandom(uint64_t seed) : key_(Mix64(seed + kGoldenGamma)) {}

  // The i-th 64-bit draw of the stream.
  uint64_t Bits(uint64_t i) const {
    return Mix64(key_ + (i + 1) * kGoldenGamma);
  }
  // Uniform in [0, 1) with 53 random bits.
  double Uniform(uint64_t i) const {
    return static_cast<double>(Bits(i) >> 11) * 0x1.0p-53;
  }
  // Uniform in (0, 1]: safe to take the logarithm of.
  double UniformOpenZero(uint64_t i) const {
    return static_cast<double>((Bits(i) >> 11) + 1) * 0x1.0p-53;
  }

 private:
  uint64_t key_;
};

}  // namespace tensord::core::cpu

#endif  // TENSORD_CORE_CPU_RANDOM_H_

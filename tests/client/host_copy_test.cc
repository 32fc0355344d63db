// The client's large-copy helpers: exact bytes at every slice boundary for
// sizes and addresses that are not page or slice multiples, and prefaulting
// that leaves memory as a later write expects it.
#include "client/host_copy.h"

#include <algorithm>
#include <cstdint>
#include <vector>

#include <gtest/gtest.h>

namespace tensord::client::internal {
namespace {

std::vector<uint8_t> Pattern(size_t n) {
  std::vector<uint8_t> out(n);
  for (size_t i = 0; i < n; ++i) out[i] = static_cast<uint8_t>(i * 37 + i / 4093);
  return out;
}

TEST(HostCopyTest, ParallelCopyIsExactAtAnySizeAndAlignment) {
  for (size_t n : {size_t{0}, size_t{1}, size_t{4095}, kLargeCopyBytes - 1,
                   kLargeCopyBytes, 3 * kLargeCopyBytes + 4097}) {
    for (size_t shift : {size_t{0}, size_t{3}}) {
      const std::vector<uint8_t> src = Pattern(n + shift);
      std::vector<uint8_t> dst(n + 2 * shift + 1, 0xee);
      ParallelCopy(dst.data() + shift, src.data() + shift, n);
      // std::equal, not memcmp: at n == 0 the pointers may be null.
      ASSERT_TRUE(std::equal(src.begin() + shift, src.end(),
                             dst.begin() + shift))
          << n << " bytes, shifted " << shift;
      // Nothing around the range is written.
      for (size_t i = 0; i < shift; ++i) ASSERT_EQ(dst[i], 0xee);
      for (size_t i = shift + n; i < dst.size(); ++i) ASSERT_EQ(dst[i], 0xee);
    }
  }
}

TEST(HostCopyTest, PrefaultedMemoryTakesAnyWrite) {
  for (size_t n : {size_t{100}, size_t{2} << 20, 2 * kLargeCopyBytes + 123}) {
    std::vector<uint8_t> buffer;
    buffer.reserve(n);
    PrefaultForWrite(buffer.data(), n);
    const std::vector<uint8_t> src = Pattern(n);
    buffer.insert(buffer.end(), src.begin(), src.end());
    ASSERT_EQ(buffer, src) << n;
  }
}

}  // namespace
}  // namespace tensord::client::internal

#include "core/cpu/host_pool.h"

#include <cstring>

#include <gtest/gtest.h>

namespace tensord::core {
namespace {

TEST(HostPoolTest, RoundsToGranules) {
  EXPECT_EQ(HostPool::BlockSize(HostPool::kMinBytes), HostPool::kGranule);
  EXPECT_EQ(HostPool::BlockSize(HostPool::kGranule + 1), 2 * HostPool::kGranule);
}

TEST(HostPoolTest, FreedBlocksAreReusedWarm) {
  HostPool pool(8 << 20);
  void* a = pool.Acquire(3 << 20);
  ASSERT_NE(a, nullptr);
  std::memset(a, 0x7f, 3 << 20);  // writable, whole block
  pool.Release(a, 3 << 20);
  EXPECT_EQ(pool.cached_bytes(), 4u << 20);
  void* b = pool.Acquire((3 << 20) + 5);  // same 4 MiB block size
  EXPECT_EQ(b, a);
  EXPECT_EQ(pool.cached_bytes(), 0u);
  pool.Release(b, 3 << 20);
}

TEST(HostPoolTest, CacheIsBoundedAndKeepsTheRecentlyFreed) {
  HostPool pool(4 << 20);
  void* a = pool.Acquire(2 << 20);
  void* b = pool.Acquire(2 << 20);
  ASSERT_NE(a, nullptr);
  ASSERT_NE(b, nullptr);
  EXPECT_NE(a, b);
  pool.Release(a, 2 << 20);
  pool.Release(b, 2 << 20);
  EXPECT_EQ(pool.cached_bytes(), 4u << 20);
  // A 4 MiB block freed now evicts the two older 2 MiB ones to fit.
  void* big = pool.Acquire(4 << 20);
  EXPECT_EQ(pool.cached_bytes(), 4u << 20);  // a fresh mapping: none fit
  pool.Release(big, 4 << 20);
  EXPECT_EQ(pool.cached_bytes(), 4u << 20);
  EXPECT_EQ(pool.Acquire(4 << 20), big);
  EXPECT_EQ(pool.cached_bytes(), 0u);
  // Larger than the whole cache: never cached.
  void* huge = pool.Acquire(6 << 20);
  pool.Release(huge, 6 << 20);
  EXPECT_EQ(pool.cached_bytes(), 0u);
  pool.Release(big, 4 << 20);
}

}  // namespace
}  // namespace tensord::core

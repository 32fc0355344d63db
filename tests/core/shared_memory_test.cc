// The server side of a client's shared memory region must survive a client
// that shrinks the object under it: the copy fails, the daemon lives.
#include "core/shared_memory.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <unistd.h>

#include <cstring>
#include <string>
#include <vector>

#include <gtest/gtest.h>

namespace tensord::core {
namespace {

TEST(SharedMemoryTest, GuardedCopySurvivesAShrunkObject) {
  const std::string name = "/tensord-test-" + std::to_string(::getpid());
  const int fd = ::shm_open(name.c_str(), O_RDWR | O_CREAT | O_EXCL, 0600);
  ASSERT_GE(fd, 0);
  const size_t size = 4 * 4096;
  ASSERT_EQ(::ftruncate(fd, size), 0);
  void* map = ::mmap(nullptr, size, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  ASSERT_NE(map, MAP_FAILED);
  std::memset(map, 0x5a, size);
  std::vector<uint8_t> out(size);
  ASSERT_TRUE(GuardedCopy(out.data(), map, size).ok());
  EXPECT_EQ(out[size - 1], 0x5a);

  ASSERT_EQ(::ftruncate(fd, 4096), 0);  // the client shrinks its object
  absl::Status read = GuardedCopy(out.data(), map, size);
  EXPECT_EQ(read.code(), absl::StatusCode::kOutOfRange) << read;
  absl::Status write = GuardedCopy(static_cast<char*>(map) + 8192, out.data(), 16);
  EXPECT_EQ(write.code(), absl::StatusCode::kOutOfRange) << write;
  // And it still works for what is left.
  EXPECT_TRUE(GuardedCopy(out.data(), map, 4096).ok());

  ::munmap(map, size);
  ::close(fd);
  ::shm_unlink(name.c_str());
}

// Large copies are split across threads; each slice has its own SIGBUS
// guard, so a shrink under the later slices fails the copy from whichever
// thread hits it, and the bytes of a whole copy are exact at every slice
// boundary (a size that is not a multiple of the page or the slice count).
TEST(SharedMemoryTest, ParallelGuardedCopyIsExactAndSurvivesAShrink) {
  const std::string name = "/tensord-ptest-" + std::to_string(::getpid());
  const int fd = ::shm_open(name.c_str(), O_RDWR | O_CREAT | O_EXCL, 0600);
  ASSERT_GE(fd, 0);
  const size_t size = 3 * kParallelCopyBytes + 12345;
  ASSERT_EQ(::ftruncate(fd, static_cast<off_t>(size)), 0);
  auto* map = static_cast<uint8_t*>(
      ::mmap(nullptr, size, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0));
  ASSERT_NE(map, MAP_FAILED);
  for (size_t i = 0; i < size; ++i) map[i] = static_cast<uint8_t>(i * 131 + i / 4096);
  std::vector<uint8_t> out(size);
  ASSERT_TRUE(GuardedCopy(out.data(), map, size).ok());
  EXPECT_EQ(std::memcmp(out.data(), map, size), 0);
  std::vector<uint8_t> back(size);
  for (size_t i = 0; i < size; ++i) back[i] = static_cast<uint8_t>(~out[i]);
  ASSERT_TRUE(GuardedCopy(map, back.data(), size).ok());
  EXPECT_EQ(std::memcmp(back.data(), map, size), 0);

  ASSERT_EQ(::ftruncate(fd, static_cast<off_t>(size / 4)), 0);
  absl::Status read = GuardedCopy(out.data(), map, size);
  EXPECT_EQ(read.code(), absl::StatusCode::kOutOfRange) << read;
  absl::Status write = GuardedCopy(map, back.data(), size);
  EXPECT_EQ(write.code(), absl::StatusCode::kOutOfRange) << write;
  EXPECT_TRUE(GuardedCopy(out.data(), map, size / 4 / 4096 * 4096).ok());

  ::munmap(map, size);
  ::close(fd);
  ::shm_unlink(name.c_str());
}

TEST(SharedMemoryTest, ShrinkBeforeACopyIsCaughtByTheSizeCheck) {
  const std::string name = "/tensord-test2-" + std::to_string(::getpid());
  const int fd = ::shm_open(name.c_str(), O_RDWR | O_CREAT | O_EXCL, 0600);
  ASSERT_GE(fd, 0);
  const size_t size = kSharedMemoryDataOffset + 8192;
  ASSERT_EQ(::ftruncate(fd, size), 0);
  const std::string cookie(kSharedMemoryCookieBytes, '\x42');
  ASSERT_EQ(::pwrite(fd, cookie.data(), cookie.size(), 0),
            static_cast<ssize_t>(cookie.size()));
  auto mapping = SharedMemoryMapping::Open(name, size, cookie);
  ASSERT_TRUE(mapping.ok()) << mapping.status();
  std::vector<uint8_t> buf(8192, 1);
  EXPECT_TRUE((*mapping)->CopyIn(0, buf).ok());
  ASSERT_EQ(::ftruncate(fd, kSharedMemoryDataOffset), 0);
  EXPECT_EQ((*mapping)->CopyOut(0, buf).code(), absl::StatusCode::kOutOfRange);
  EXPECT_EQ((*mapping)->CopyIn(0, buf).code(), absl::StatusCode::kOutOfRange);
  ::close(fd);
  ::shm_unlink(name.c_str());
}

}  // namespace
}  // namespace tensord::core

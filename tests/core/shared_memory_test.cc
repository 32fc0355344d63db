// The server side of a client's shared memory region must survive a client
// that shrinks the object under it: the copy fails, the daemon lives.
#include "core/runtime/shared_memory.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <unistd.h>

#include <cstring>
#include <string>
#include <vector>

#include <gtest/gtest.h>

namespace tensord::core {
namespace {

// A POSIX shared memory object of `size` bytes, mapped, standing in for a
// client's; unmapped, closed and unlinked when the test ends.
class ShmObject {
 public:
  ShmObject(const std::string& tag, size_t size)
      : name_("/tensord-" + tag + "-" + std::to_string(::getpid())),
        size_(size) {
    fd_ = ::shm_open(name_.c_str(), O_RDWR | O_CREAT | O_EXCL, 0600);
    if (fd_ < 0 || ::ftruncate(fd_, static_cast<off_t>(size)) != 0) return;
    void* map = ::mmap(nullptr, size, PROT_READ | PROT_WRITE, MAP_SHARED, fd_, 0);
    if (map != MAP_FAILED) map_ = static_cast<uint8_t*>(map);
  }
  ~ShmObject() {
    if (map_ != nullptr) ::munmap(map_, size_);
    if (fd_ >= 0) ::close(fd_);
    ::shm_unlink(name_.c_str());
  }
  ShmObject(const ShmObject&) = delete;
  ShmObject& operator=(const ShmObject&) = delete;

  bool ok() const { return map_ != nullptr; }
  const std::string& name() const { return name_; }
  uint8_t* map() const { return map_; }
  // What a misbehaving client does: shrinks the object under the mapping.
  bool Shrink(size_t size) const {
    return ::ftruncate(fd_, static_cast<off_t>(size)) == 0;
  }

 private:
  const std::string name_;
  const size_t size_;
  int fd_ = -1;
  uint8_t* map_ = nullptr;
};

TEST(SharedMemoryTest, GuardedCopySurvivesAShrunkObject) {
  const size_t size = 4 * 4096;
  ShmObject shm("test", size);
  ASSERT_TRUE(shm.ok());
  uint8_t* map = shm.map();
  std::memset(map, 0x5a, size);
  std::vector<uint8_t> out(size);
  ASSERT_TRUE(GuardedCopy(out.data(), map, size).ok());
  EXPECT_EQ(out[size - 1], 0x5a);

  ASSERT_TRUE(shm.Shrink(4096));  // the client shrinks its object
  absl::Status read = GuardedCopy(out.data(), map, size);
  EXPECT_EQ(read.code(), absl::StatusCode::kOutOfRange) << read;
  absl::Status write = GuardedCopy(map + 8192, out.data(), 16);
  EXPECT_EQ(write.code(), absl::StatusCode::kOutOfRange) << write;
  // And it still works for what is left.
  EXPECT_TRUE(GuardedCopy(out.data(), map, 4096).ok());
}

// Large copies are split across threads; each slice has its own SIGBUS
// guard, so a shrink under the later slices fails the copy from whichever
// thread hits it, and the bytes of a whole copy are exact at every slice
// boundary (a size that is not a multiple of the page or the slice count).
TEST(SharedMemoryTest, ParallelGuardedCopyIsExactAndSurvivesAShrink) {
  const size_t size = 3 * kParallelCopyBytes + 12345;
  ShmObject shm("ptest", size);
  ASSERT_TRUE(shm.ok());
  uint8_t* map = shm.map();
  for (size_t i = 0; i < size; ++i) map[i] = static_cast<uint8_t>(i * 131 + i / 4096);
  std::vector<uint8_t> out(size);
  ASSERT_TRUE(GuardedCopy(out.data(), map, size).ok());
  EXPECT_EQ(std::memcmp(out.data(), map, size), 0);
  std::vector<uint8_t> back(size);
  for (size_t i = 0; i < size; ++i) back[i] = static_cast<uint8_t>(~out[i]);
  ASSERT_TRUE(GuardedCopy(map, back.data(), size).ok());
  EXPECT_EQ(std::memcmp(back.data(), map, size), 0);

  ASSERT_TRUE(shm.Shrink(size / 4));
  absl::Status read = GuardedCopy(out.data(), map, size);
  EXPECT_EQ(read.code(), absl::StatusCode::kOutOfRange) << read;
  absl::Status write = GuardedCopy(map, back.data(), size);
  EXPECT_EQ(write.code(), absl::StatusCode::kOutOfRange) << write;
  EXPECT_TRUE(GuardedCopy(out.data(), map, size / 4 / 4096 * 4096).ok());
}

TEST(SharedMemoryTest, ShrinkBeforeACopyIsCaughtByTheSizeCheck) {
  const size_t size = kSharedMemoryDataOffset + 8192;
  ShmObject shm("test2", size);
  ASSERT_TRUE(shm.ok());
  const std::string cookie(kSharedMemoryCookieBytes, '\x42');
  std::memcpy(shm.map(), cookie.data(), cookie.size());
  auto mapping = SharedMemoryMapping::Open(shm.name(), size, cookie);
  ASSERT_TRUE(mapping.ok()) << mapping.status();
  std::vector<uint8_t> buf(8192, 1);
  EXPECT_TRUE((*mapping)->CopyIn(0, buf).ok());
  ASSERT_TRUE(shm.Shrink(kSharedMemoryDataOffset));
  EXPECT_EQ((*mapping)->CopyOut(0, buf).code(), absl::StatusCode::kOutOfRange);
  EXPECT_EQ((*mapping)->CopyIn(0, buf).code(), absl::StatusCode::kOutOfRange);
}

}  // namespace
}  // namespace tensord::core

#include "core/shared_memory.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <limits>
#include <utility>

#include "absl/strings/str_cat.h"
#include "core/absl_compat.h"

namespace tensord::core {
namespace {

bool ValidName(std::string_view name) {
  constexpr size_t kMaxSuffix = 64;
  if (name.size() <= kSharedMemoryNamePrefix.size() ||
      name.size() > kSharedMemoryNamePrefix.size() + kMaxSuffix ||
      name.substr(0, kSharedMemoryNamePrefix.size()) != kSharedMemoryNamePrefix) {
    return false;
  }
  for (char c : name.substr(kSharedMemoryNamePrefix.size())) {
    const bool ok = (c >= '0' && c <= '9') || (c >= 'a' && c <= 'z') ||
                    (c >= 'A' && c <= 'Z') || c == '_' || c == '.' || c == '-';
    if (!ok) return false;
  }
  return true;
}

// Compares without an early exit, so timing says nothing about where the
// first difference is.
bool ConstantTimeEqual(const uint8_t* a, const uint8_t* b, size_t n) {
  uint8_t diff = 0;
  for (size_t i = 0; i < n; ++i) diff |= static_cast<uint8_t>(a[i] ^ b[i]);
  return diff == 0;
}

}  // namespace

absl::StatusOr<std::shared_ptr<SharedMemoryMapping>> SharedMemoryMapping::Open(
    std::string_view name, uint64_t size, std::string_view cookie,
    std::atomic<int64_t>* live) {
  if (!ValidName(name)) {
    return absl::InvalidArgumentError(absl::StrCat(
        "shared memory name '", ToAbsl(name.substr(0, 80)),
        "' is malformed: expected '", ToAbsl(kSharedMemoryNamePrefix),
        "' followed by 1 to 64 of [0-9A-Za-z_.-]"));
  }
  if (size < kSharedMemoryDataOffset ||
      size > static_cast<uint64_t>(std::numeric_limits<off_t>::max())) {
    return absl::InvalidArgumentError(absl::StrCat(
        "shared memory region size ", size, " is invalid: a region holds a ",
        kSharedMemoryDataOffset, "-byte header before its data"));
  }
  if (cookie.size() != kSharedMemoryCookieBytes) {
    return absl::InvalidArgumentError(
        absl::StrCat("the shared memory cookie must be ",
                     kSharedMemoryCookieBytes, " bytes, got ", cookie.size()));
  }
  const std::string path(name);
  const int fd = ::shm_open(path.c_str(), O_RDWR | O_CLOEXEC | O_NOFOLLOW, 0);
  if (fd < 0) {
    const int err = errno;
    if (err == ENOENT) {
      return absl::NotFoundError(absl::StrCat(
          "no shared memory region '", path,
          "' on the server's host: shared memory works only when client and "
          "server share a host"));
    }
    if (err == EACCES || err == EPERM) {
      return absl::PermissionDeniedError(absl::StrCat(
          "the server may not open shared memory region '", path,
          "' (", std::strerror(err),
          "): it runs as another user than the client"));
    }
    return absl::InternalError(absl::StrCat(
        "shm_open('", path, "') failed: ", std::strerror(err)));
  }
  struct stat st {};
  if (::fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
    ::close(fd);
    return absl::InvalidArgumentError(absl::StrCat(
        "shared memory region '", path, "' is not a memory object"));
  }
  if (static_cast<uint64_t>(st.st_size) < size) {
    ::close(fd);
    return absl::OutOfRangeError(absl::StrCat(
        "shared memory region '", path, "' is ", st.st_size,
        " bytes, smaller than the registered size of ", size, " bytes"));
  }
  void* base = ::mmap(nullptr, static_cast<size_t>(size),
                      PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  if (base == MAP_FAILED) {
    const int err = errno;
    ::close(fd);
    return absl::ResourceExhaustedError(absl::StrCat(
        "cannot map shared memory region '", path, "' of ", size,
        " bytes: ", std::strerror(err)));
  }
  uint8_t expected[kSharedMemoryCookieBytes];
  std::memcpy(expected, static_cast<const uint8_t*>(base),
              kSharedMemoryCookieBytes);
  if (!ConstantTimeEqual(expected,
                         reinterpret_cast<const uint8_t*>(cookie.data()),
                         kSharedMemoryCookieBytes)) {
    ::munmap(base, static_cast<size_t>(size));
    ::close(fd);
    return absl::PermissionDeniedError(absl::StrCat(
        "the cookie does not match the header of shared memory region '",
        path, "': only its creator may register it"));
  }
  return std::shared_ptr<SharedMemoryMapping>(new SharedMemoryMapping(
      path, fd, static_cast<uint8_t*>(base), size, live));
}

SharedMemoryMapping::SharedMemoryMapping(std::string name, int fd,
                                         uint8_t* base, uint64_t size,
                                         std::atomic<int64_t>* live)
    : name_(std::move(name)), fd_(fd), base_(base), size_(size), live_(live) {
  if (live_ != nullptr) live_->fetch_add(1);
}

SharedMemoryMapping::~SharedMemoryMapping() {
  ::munmap(base_, static_cast<size_t>(size_));
  ::close(fd_);
  if (live_ != nullptr) live_->fetch_sub(1);
}

absl::Status SharedMemoryMapping::CheckSize() const {
  struct stat st {};
  if (::fstat(fd_, &st) != 0 || static_cast<uint64_t>(st.st_size) < size_) {
    return absl::OutOfRangeError(absl::StrCat(
        "shared memory region '", name_, "' shrank below its registered size "
        "of ", size_, " bytes"));
  }
  return absl::OkStatus();
}

absl::StatusOr<std::span<uint8_t>> SharedMemoryMapping::Range(
    uint64_t offset, uint64_t length) const {
  const uint64_t n = data_size();
  if (offset > n || length > n - offset) {
    return absl::OutOfRangeError(absl::StrCat(
        "offset ", offset, " + size ", length,
        " bytes is past the end of shared memory region '", name_,
        "' (its data area is ", n, " bytes)"));
  }
  absl::Status size_ok = CheckSize();
  if (!size_ok.ok()) return size_ok;
  return std::span<uint8_t>(base_ + kSharedMemoryDataOffset + offset,
                            static_cast<size_t>(length));
}

}  // namespace tensord::core

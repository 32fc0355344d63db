#include "core/runtime/shared_memory.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <csetjmp>
#include <csignal>
#include <cstring>
#include <limits>
#include <mutex>
#include <thread>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "core/base/absl_compat.h"
#include "core/base/status.h"

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

absl::StatusOr<uint8_t*> SharedMemoryMapping::Locate(uint64_t offset,
                                                     uint64_t length) const {
  const uint64_t n = data_size();
  if (offset > n || length > n - offset) {
    return absl::OutOfRangeError(absl::StrCat(
        "offset ", offset, " + size ", length,
        " bytes is past the end of shared memory region '", name_,
        "' (its data area is ", n, " bytes)"));
  }
  RETURN_IF_ERROR(CheckSize());
  return base_ + kSharedMemoryDataOffset + offset;
}

absl::Status SharedMemoryMapping::CopyOut(uint64_t offset,
                                          std::span<uint8_t> dst) const {
  ASSIGN_OR_RETURN(uint8_t * src, Locate(offset, dst.size()));
  return GuardedCopy(dst.data(), src, dst.size());
}

absl::Status SharedMemoryMapping::CopyIn(uint64_t offset,
                                         std::span<const uint8_t> src) const {
  ASSIGN_OR_RETURN(uint8_t * dst, Locate(offset, src.size()));
  return GuardedCopy(dst, src.data(), src.size());
}

namespace {

// volatile: the stores around the memcpy must not be optimized away (the
// compiler knows memcpy cannot read this variable; the signal handler can).
thread_local sigjmp_buf* volatile t_sigbus_target = nullptr;

void OnSigbus(int signal_number, siginfo_t*, void*) {
  if (t_sigbus_target != nullptr) siglongjmp(*t_sigbus_target, 1);
  // Not a guarded copy: a real bug. Die as SIGBUS would have.
  ::signal(signal_number, SIG_DFL);
  ::raise(signal_number);
}

absl::Status GuardedCopySlice(void* dst, const void* src, size_t n) {
  static std::once_flag installed;
  std::call_once(installed, [] {
    struct sigaction action {};
    action.sa_sigaction = OnSigbus;
    action.sa_flags = SA_SIGINFO | SA_NODEFER;
    sigemptyset(&action.sa_mask);
    ::sigaction(SIGBUS, &action, nullptr);
  });
  sigjmp_buf target;
  if (sigsetjmp(target, 1) != 0) {
    t_sigbus_target = nullptr;
    return absl::OutOfRangeError(
        "the shared memory region shrank while it was being copied");
  }
  t_sigbus_target = &target;
  std::atomic_signal_fence(std::memory_order_seq_cst);
  std::memcpy(dst, src, n);
  std::atomic_signal_fence(std::memory_order_seq_cst);
  t_sigbus_target = nullptr;
  return absl::OkStatus();
}

}  // namespace

absl::Status GuardedCopy(void* dst, const void* src, size_t n) {
  constexpr size_t kMaxThreads = 4, kPage = 4096;
  const size_t threads =
      n < kParallelCopyBytes
          ? 1
          : std::clamp<size_t>(std::thread::hardware_concurrency(), 1,
                               kMaxThreads);
  if (threads == 1) return GuardedCopySlice(dst, src, n);
  auto* d = static_cast<uint8_t*>(dst);
  const auto* s = static_cast<const uint8_t*>(src);
  const size_t slice = (n / threads + kPage - 1) & ~(kPage - 1);
  std::vector<absl::Status> statuses(threads);
  std::vector<std::thread> workers;
  size_t at = 0, i = 0;
  for (; i + 1 < threads && at + slice < n; ++i, at += slice) {
    try {
      workers.emplace_back([&statuses, i, d, s, at, slice] {
        statuses[i] = GuardedCopySlice(d + at, s + at, slice);
      });
    } catch (...) {  // no thread (system_error) or no room for it (bad_alloc)
      statuses[i] = GuardedCopySlice(d + at, s + at, slice);
    }
  }
  statuses[i] = GuardedCopySlice(d + at, s + at, n - at);
  for (std::thread& w : workers) w.join();
  for (absl::Status& status : statuses) RETURN_IF_ERROR(status);
  return absl::OkStatus();
}

}  // namespace tensord::core

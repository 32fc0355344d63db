// The client's side of the same-host fast path (tensord.proto, "shared
// memory"): creating, registering and tearing down POSIX shared-memory
// regions, and the RPCs that move tensor bytes through them.
#include <fcntl.h>
#include <sys/mman.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <random>
#include <string>
#include <utility>

#include "client/grpc_session.h"
#include "tensord/client.h"

namespace tensord::client {
namespace {

namespace v1 = internal::v1;

// Wire constants (tensord.proto): the data area starts after a 4 KiB
// header page whose first 16 bytes are the cookie.
constexpr size_t kDataOffset = 4096;
constexpr size_t kCookieBytes = 16;

std::string RandomHex(size_t bytes) {
  std::random_device rd;
  static constexpr char kHex[] = "0123456789abcdef";
  std::string out;
  for (size_t i = 0; i < bytes; ++i) {
    const unsigned v = rd() & 0xff;
    out += kHex[v >> 4];
    out += kHex[v & 0xf];
  }
  return out;
}

std::string RandomBytes(size_t n) {
  std::random_device rd;
  std::string out(n, '\0');
  for (char& c : out) c = static_cast<char>(rd() & 0xff);
  return out;
}

[[noreturn]] void ThrowErrno(StatusCode code, const std::string& what, int err) {
  throw Error(code, what + ": " + std::strerror(err));
}

}  // namespace

SharedMemoryRegion::~SharedMemoryRegion() {
  if (std::shared_ptr<const internal::Session> session = session_.lock()) {
    try {
      v1::UnregisterSharedMemoryRequest request;
      request.set_region(id_);
      (void)session->Call(&v1::TensorService::Stub::UnregisterSharedMemory,
                          std::move(request));
    } catch (...) {
      // The session's close unmaps it on the server anyway.
    }
  }
  if (base_ != nullptr) ::munmap(base_, mapped_);
  if (!name_.empty()) ::shm_unlink(name_.c_str());
}

Tensor Client::upload_shared(const SharedMemoryRegion& region, uint64_t offset,
                             DType dtype, std::vector<int64_t> shape,
                             const Device& device) const {
  return Tensor(session_->Adopt(session_->UploadShared(
      region, offset, internal::DTypeToProto(dtype), shape, device.str())));
}

std::shared_ptr<SharedMemoryRegion> Client::create_shared_memory(
    size_t bytes) const {
  return session_->CreateRegion(bytes);
}

bool Client::enable_shared_memory(size_t bytes, std::string* reason) const {
  try {
    session_->SetAutoRegion(session_->CreateRegion(bytes));
    return true;
  } catch (const Error& e) {
    if (reason != nullptr) *reason = e.what();
    return false;
  }
}

void Client::disable_shared_memory() const { session_->SetAutoRegion(nullptr); }

bool Client::shared_memory_enabled() const { return session_->HasAutoRegion(); }

void Tensor::fetch_into(std::span<std::byte> dst) const {
  state_->session->FetchInto(state_->handle, state_->nbytes, dst);
}

void Tensor::fetch_shared(const SharedMemoryRegion& region,
                          uint64_t offset) const {
  state_->session->FetchShared(state_->handle, region, offset);
}

namespace internal {

std::shared_ptr<SharedMemoryRegion> Session::CreateRegion(
    size_t data_bytes) const {
  if (data_bytes > (size_t{1} << 46)) {
    throw Error(StatusCode::INVALID_ARGUMENT,
                "shared memory region of " + std::to_string(data_bytes) +
                    " bytes is too large");
  }
  const size_t total = kDataOffset + data_bytes;
  // make_shared cannot reach the private constructor.
  std::shared_ptr<SharedMemoryRegion> region(new SharedMemoryRegion());
  region->session_ = weak_from_this();
  region->session_id_ = id_;
  const std::string name = "/tensord-" + RandomHex(16);
  const int fd =
      ::shm_open(name.c_str(), O_CREAT | O_EXCL | O_RDWR | O_CLOEXEC, 0600);
  if (fd < 0) ThrowErrno(StatusCode::UNAVAILABLE, "shm_open(" + name + ")", errno);
  region->name_ = name;  // from here on the destructor unlinks it
  // Reserve the pages now: a /dev/shm too small fails here, cleanly,
  // rather than with SIGBUS on a later write.
  const int fallocated = ::posix_fallocate(fd, 0, static_cast<off_t>(total));
  if (fallocated != 0) {
    ::close(fd);
    ThrowErrno(StatusCode::RESOURCE_EXHAUSTED,
               "cannot reserve " + std::to_string(total) +
                   " bytes of shared memory for " + name,
               fallocated);
  }
  // Pre-faulted: the first transfer does not pay a page fault per page.
  void* base = ::mmap(nullptr, total, PROT_READ | PROT_WRITE,
                      MAP_SHARED | MAP_POPULATE, fd, 0);
  const int map_errno = errno;
  ::close(fd);
  if (base == MAP_FAILED) {
    ThrowErrno(StatusCode::RESOURCE_EXHAUSTED, "mmap of " + name, map_errno);
  }
  region->base_ = base;
  region->mapped_ = total;
  region->data_ = static_cast<std::byte*>(base) + kDataOffset;
  region->size_ = data_bytes;
  const std::string cookie = RandomBytes(kCookieBytes);
  std::memcpy(base, cookie.data(), kCookieBytes);

  v1::RegisterSharedMemoryRequest request;
  request.set_name(name);
  request.set_size(total);
  request.set_cookie(cookie);
  // If Register throws, `region` goes here: unmapped and unlinked, with
  // nothing to unregister (no session set until it is registered).
  const std::weak_ptr<const Session> owner = region->session_;
  region->session_.reset();
  region->id_ = Call(&v1::TensorService::Stub::RegisterSharedMemory,
                     std::move(request))
                    .region();
  region->session_ = owner;
  return region;
}

v1::TensorInfo Session::UploadShared(const SharedMemoryRegion& region,
                                     uint64_t offset, v1::DType dtype,
                                     const std::vector<int64_t>& shape,
                                     const std::string& device) const {
  if (region.session_id_ != id_) {
    throw Error(StatusCode::INVALID_ARGUMENT,
                "shared memory region " + region.name_ +
                    " belongs to another session");
  }
  v1::UploadFromSharedMemoryRequest request;
  request.set_region(region.id_);
  request.set_offset(offset);
  request.set_device(device);
  request.set_dtype(dtype);
  request.mutable_shape()->Add(shape.begin(), shape.end());
  return Call(&v1::TensorService::Stub::UploadFromSharedMemory,
              std::move(request))
      .tensor();
}

void Session::FetchShared(uint64_t handle, const SharedMemoryRegion& region,
                          uint64_t offset) const {
  if (region.session_id_ != id_) {
    throw Error(StatusCode::INVALID_ARGUMENT,
                "shared memory region " + region.name_ +
                    " belongs to another session");
  }
  v1::FetchToSharedMemoryRequest request;
  request.set_handle(handle);
  request.set_region(region.id_);
  request.set_offset(offset);
  (void)Call(&v1::TensorService::Stub::FetchToSharedMemory, std::move(request));
}

void Session::SetAutoRegion(std::shared_ptr<SharedMemoryRegion> region) const {
  std::shared_ptr<SharedMemoryRegion> old;  // torn down outside the lock
  std::lock_guard<std::mutex> lock(shm_mu_);
  old = std::move(auto_region_);
  auto_region_ = std::move(region);
}

bool Session::HasAutoRegion() const {
  std::lock_guard<std::mutex> lock(shm_mu_);
  return auto_region_ != nullptr;
}

}  // namespace internal
}  // namespace tensord::client

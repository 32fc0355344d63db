// FaultyDevice: a core::Device for tests that wraps a real device, forwards
// every call to it, and fails chosen calls on demand (LevelDB's SpecialEnv;
// STYLE.md point 11: faults are injected through the interface, not by a
// mock framework).
//
// Each call belongs to a FaultSite (Allocate, CopyFromHost, CopyToHost,
// CopyFromDevice, one per kernel kind of Device::Launch, Synchronize); every
// kernel call also counts under kAnyKernel. Arm(site, fault) makes the
// `fault.nth` call of `site` counted from the arming fail (or, with `sticky`,
// that call and every later one until Disarm). Calls of a site are numbered
// from 1 since construction, failed ones included; messages quote those numbers
// (FaultCallLabel). A failing call returns the status a real device would
// give for that failure, with Fault::code overriding the code:
//   Allocate   RESOURCE_EXHAUSTED "<name>: FaultyDevice: injected out of
//              memory on allocation #<n> (<bytes> bytes)" (with another
//              code: "... injected failure of allocation #<n> (...)")
//   copies     INTERNAL, like a CUDA error: "<name>: FaultyDevice: injected
//              failure of CopyFromHost call #<n> (<bytes> bytes at offset
//              <offset>)"; CopyFromDevice says "(<bytes> bytes from <src>)"
//   kernels    INTERNAL "<name>: FaultyDevice: injected failure of kernel
//              Binary (add; Binary call #<i>, kernel call #<j>)" (the op's
//              name for Binary, Unary and Reduce only)
//   Synchronize INTERNAL "<name>: FaultyDevice: injected failure of
//              Synchronize call #<n>"
// Every message contains kInjectedMarker. By default the failing call does
// nothing (the wrapped device is not called); with `after_forwarding` the
// wrapped device does the work first and the failure is reported after it
// (an asynchronous error surfacing late): an allocation made that way is
// freed before the error is returned.
//
// Identity: the device reports the name, kind and index of its options
// (default "cuda:7", kCuda, 7), so a Runtime hosts it next to its CPU
// devices (RuntimeOptions::extra_devices) and, as the kind is not kCpu,
// treats its memory as not host-addressable: uploads and reads go through
// the bounce-buffer paths and device calls. Its Properties() are the wrapped
// device's with the model prefixed "FaultyDevice over ", `total_memory` from
// the options and free_memory = total_memory - live_bytes(). It must not be
// hosted next to a real CUDA device: a CudaDevice copying from it would see
// a "CUDA" device that is not one.
//
// Buffers are the wrapped device's, wrapped to count the live ones
// (live_buffers(), live_bytes(): what the device itself still holds, a
// witness independent of the Runtime's accounting); calls unwrap them before
// forwarding, so every buffer passed to a FaultyDevice must come from its
// Allocate (the Device contract), except CopyFromDevice's source buffer,
// which belongs to `src_device`.
//
// Thread-safety: as Device. Call counts are atomics and the arming is
// guarded by a mutex, so Arm/Disarm may race with calls: a one-shot fault
// then fails at most one call (exactly one when its n-th call begins after
// Arm returns); which concurrent call is "the n-th" is the scheduler's.
#ifndef TENSORD_TESTS_CORE_FAULTY_DEVICE_H_
#define TENSORD_TESTS_CORE_FAULTY_DEVICE_H_

#include <array>
#include <atomic>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "core/base/device.h"

namespace tensord::core {

// What a fault can be injected into.
enum class FaultSite {
  kAllocate,
  kCopyFromHost,
  kCopyToHost,
  kCopyFromDevice,
  // Kernels.
  kFill,
  kCast,
  kBinary,
  kMatMul,
  kUnary,
  kReduce,
  kPermute,
  kCopyBlocks,
  kWhere,
  kIm2Col,
  kCol2Im,
  kConv2d,  // the library kernels (FaultyDevice composes: never reached)
  kPool2d,
  kBatchNorm,
  kAnyKernel,  // every kernel above, counted together
  kSynchronize,
};
inline constexpr size_t kFaultSiteCount =
    static_cast<size_t>(FaultSite::kSynchronize) + 1;
// "Allocate", "CopyFromHost", ..., "Fill", ..., "kernel", "Synchronize".
std::string_view FaultSiteName(FaultSite site);

// Every injected failure's message contains this.
inline constexpr std::string_view kInjectedMarker = "FaultyDevice: injected";
// How an injected failure's message names call #k of `site` (counted since
// the device was made): "allocation #3", "CopyToHost call #2",
// "Cast call #1", "kernel call #4".
std::string FaultCallLabel(FaultSite site, uint64_t k);

// One armed fault of a site.
struct Fault {
  // The call that fails, counted from the arming: 1 = the next call.
  uint64_t nth = 1;
  // Also fail every call after it, until Disarm.
  bool sticky = false;
  // The failure's code; kOk = the site's default (RESOURCE_EXHAUSTED for
  // Allocate, INTERNAL otherwise).
  absl::StatusCode code = absl::StatusCode::kOk;
  // Forward the call to the wrapped device first, then report the failure.
  bool after_forwarding = false;
};

struct FaultyDeviceOptions {
  std::string name = "cuda:7";
  DeviceKind kind = DeviceKind::kCuda;
  int index = 7;
  // Reported as Properties().total_memory (a Runtime's default budget for
  // an extra device is this less max(5%, 256 MiB)).
  uint64_t total_memory = uint64_t{1} << 30;
};

class FaultyDevice final : public Device {
 public:
  // Wraps `inner` (owned).
  FaultyDevice(std::unique_ptr<Device> inner, FaultyDeviceOptions options = {});
  // A FaultyDevice over a new CPU device named as `options` says.
  static std::unique_ptr<FaultyDevice> OverCpu(
      FaultyDeviceOptions options = {});
  ~FaultyDevice() override;

  FaultyDevice(const FaultyDevice&) = delete;
  FaultyDevice& operator=(const FaultyDevice&) = delete;

  // Arms `fault` for `site`, replacing what was armed there. `fault.nth`
  // must be >= 1 (0 is taken as 1).
  void Arm(FaultSite site, Fault fault);
  // Arm(site, {.nth = n}): the n-th call of `site` from now fails, once.
  void FailNth(FaultSite site, uint64_t n);
  void Disarm(FaultSite site);
  void DisarmAll();

  // Calls of `site` since construction (failed ones included).
  uint64_t calls(FaultSite site) const;
  // Failures injected into `site` since construction (a kernel's failure
  // counts under its own site and kAnyKernel).
  uint64_t injected(FaultSite site) const;
  // Failures injected into any site since construction.
  uint64_t injected_total() const;
  // Buffers allocated by this device and not yet destroyed, and their bytes.
  uint64_t live_buffers() const;
  uint64_t live_bytes() const;

  Device& inner() { return *inner_; }

  // --- Device -------------------------------------------------------------
  const std::string& name() const override { return options_.name; }
  DeviceKind kind() const override { return options_.kind; }
  int index() const override { return options_.index; }
  DeviceProperties Properties() const override;
  const Capabilities& capabilities() const override;
  absl::StatusOr<std::unique_ptr<Buffer>> Allocate(
      AllocationGrant grant) override;
  absl::Status CopyFromHost(const void* src, Buffer& dst, size_t offset,
                            size_t bytes) override;
  absl::Status CopyToHost(const Buffer& src, size_t offset, void* dst,
                          size_t bytes) override;
  absl::Status CopyFromDevice(Device& src_device, const Buffer& src,
                              Buffer& dst, size_t bytes) override;
  absl::Status Launch(const KernelCall& call) override;
  absl::Status Synchronize() override;

 private:
  class CountedBuffer;
  struct Armed {
    bool armed = false;
    uint64_t fail_at = 0;  // absolute call number
    Fault fault;
  };
  // What Enter decided for one call.
  struct Verdict {
    bool fail = false;
    bool after_forwarding = false;
    absl::Status status;  // the failure, when `fail`
  };

  // Counts a call of `site` (a kernel also under kAnyKernel) and decides
  // whether it fails; `detail` goes into the message.
  Verdict Enter(FaultSite site, std::string_view detail);
  // Runs `forward` unless the verdict fails before forwarding.
  template <typename Forward>
  absl::Status Guard(FaultSite site, std::string_view detail,
                     Forward&& forward);

  static Buffer& Unwrap(Buffer& buffer);
  static const Buffer& Unwrap(const Buffer& buffer);
  static TensorRef Unwrap(const TensorRef& ref);

  const std::unique_ptr<Device> inner_;
  const FaultyDeviceOptions options_;
  std::array<std::atomic<uint64_t>, kFaultSiteCount> calls_{};
  std::array<std::atomic<uint64_t>, kFaultSiteCount> injected_{};
  std::atomic<uint64_t> injected_total_{0};
  // Shared with the buffers, which may outlive the device in a test that
  // keeps one past the Runtime.
  struct Live {
    std::atomic<uint64_t> buffers{0};
    std::atomic<uint64_t> bytes{0};
  };
  const std::shared_ptr<Live> live_ = std::make_shared<Live>();
  mutable absl::Mutex mu_;
  std::array<Armed, kFaultSiteCount> armed_ ABSL_GUARDED_BY(mu_);
};

}  // namespace tensord::core

#endif  // TENSORD_TESTS_CORE_FAULTY_DEVICE_H_

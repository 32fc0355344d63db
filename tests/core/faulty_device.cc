#include "tests/core/faulty_device.h"

#include <algorithm>
#include <utility>
#include <variant>

#include "absl/strings/str_cat.h"
#include "core/base/absl_compat.h"
#include "core/cpu/cpu_device.h"
#include "core/base/status.h"

namespace tensord::core {
namespace {

size_t Index(FaultSite site) { return static_cast<size_t>(site); }

bool IsKernel(FaultSite site) {
  return site >= FaultSite::kFill && site <= FaultSite::kBatchNorm;
}

absl::StatusCode DefaultCode(FaultSite site) {
  return site == FaultSite::kAllocate ? absl::StatusCode::kResourceExhausted
                                      : absl::StatusCode::kInternal;
}

}  // namespace

std::string_view FaultSiteName(FaultSite site) {
  switch (site) {
    case FaultSite::kAllocate:
      return "Allocate";
    case FaultSite::kCopyFromHost:
      return "CopyFromHost";
    case FaultSite::kCopyToHost:
      return "CopyToHost";
    case FaultSite::kCopyFromDevice:
      return "CopyFromDevice";
    case FaultSite::kFill:
      return "Fill";
    case FaultSite::kCast:
      return "Cast";
    case FaultSite::kBinary:
      return "Binary";
    case FaultSite::kMatMul:
      return "MatMul";
    case FaultSite::kUnary:
      return "Unary";
    case FaultSite::kReduce:
      return "Reduce";
    case FaultSite::kPermute:
      return "Permute";
    case FaultSite::kCopyBlocks:
      return "CopyBlocks";
    case FaultSite::kWhere:
      return "Where";
    case FaultSite::kIm2Col:
      return "Im2Col";
    case FaultSite::kCol2Im:
      return "Col2Im";
    case FaultSite::kConv2d:
      return "Conv2d";
    case FaultSite::kPool2d:
      return "Pool2d";
    case FaultSite::kBatchNorm:
      return "BatchNorm";
    case FaultSite::kAnyKernel:
      return "kernel";
    case FaultSite::kSynchronize:
      return "Synchronize";
  }
  return "?";
}

std::string FaultCallLabel(FaultSite site, uint64_t k) {
  if (site == FaultSite::kAllocate) return absl::StrCat("allocation #", k);
  return absl::StrCat(ToAbsl(FaultSiteName(site)), " call #", k);
}

// A buffer of the wrapped device, counted while it lives.
class FaultyDevice::CountedBuffer final : public Buffer {
 public:
  CountedBuffer(std::unique_ptr<Buffer> inner, std::shared_ptr<Live> live)
      : inner_(std::move(inner)), live_(std::move(live)) {
    live_->buffers.fetch_add(1);
    live_->bytes.fetch_add(inner_->size());
  }
  ~CountedBuffer() override {
    const size_t size = inner_->size();
    inner_.reset();
    live_->bytes.fetch_sub(size);
    live_->buffers.fetch_sub(1);
  }
  CountedBuffer(const CountedBuffer&) = delete;
  CountedBuffer& operator=(const CountedBuffer&) = delete;

  void* data() override { return inner_->data(); }
  const void* data() const override { return inner_->data(); }
  size_t size() const override { return inner_->size(); }
  Buffer& inner() const { return *inner_; }

 private:
  std::unique_ptr<Buffer> inner_;
  const std::shared_ptr<Live> live_;
};

FaultyDevice::FaultyDevice(std::unique_ptr<Device> inner,
                           FaultyDeviceOptions options)
    : inner_(std::move(inner)), options_(std::move(options)) {}

FaultyDevice::~FaultyDevice() = default;

std::unique_ptr<FaultyDevice> FaultyDevice::OverCpu(
    FaultyDeviceOptions options) {
  CpuDeviceOptions cpu;
  // Named as the wrapper, so the wrapped device's own messages (a range
  // check, an unsupported dtype) name the device the Runtime knows.
  cpu.name = options.name;
  cpu.index = options.index;
  cpu.total_memory = options.total_memory;
  // No cache of freed blocks: what a test frees goes back at once.
  cpu.host_cache_bytes = 0;
  return std::make_unique<FaultyDevice>(CreateCpuDevice(cpu),
                                        std::move(options));
}

void FaultyDevice::Arm(FaultSite site, Fault fault) {
  fault.nth = std::max<uint64_t>(fault.nth, 1);
  if (fault.code == absl::StatusCode::kOk) fault.code = DefaultCode(site);
  absl::MutexLock lock(&mu_);
  Armed& a = armed_[Index(site)];
  a.armed = true;
  a.fail_at = calls_[Index(site)].load() + fault.nth;
  a.fault = fault;
}

void FaultyDevice::FailNth(FaultSite site, uint64_t n) {
  Fault fault;
  fault.nth = n;
  Arm(site, fault);
}

void FaultyDevice::Disarm(FaultSite site) {
  absl::MutexLock lock(&mu_);
  armed_[Index(site)].armed = false;
}

void FaultyDevice::DisarmAll() {
  absl::MutexLock lock(&mu_);
  for (Armed& a : armed_) a.armed = false;
}

uint64_t FaultyDevice::calls(FaultSite site) const {
  return calls_[Index(site)].load();
}

uint64_t FaultyDevice::injected(FaultSite site) const {
  return injected_[Index(site)].load();
}

uint64_t FaultyDevice::injected_total() const { return injected_total_.load(); }

uint64_t FaultyDevice::live_buffers() const { return live_->buffers.load(); }
uint64_t FaultyDevice::live_bytes() const { return live_->bytes.load(); }

FaultyDevice::Verdict FaultyDevice::Enter(FaultSite site,
                                          std::string_view detail) {
  const bool kernel = IsKernel(site);
  const uint64_t k = calls_[Index(site)].fetch_add(1) + 1;
  const uint64_t any =
      kernel ? calls_[Index(FaultSite::kAnyKernel)].fetch_add(1) + 1 : 0;
  Fault fault;
  {
    absl::MutexLock lock(&mu_);
    // Whether the armed fault `a` takes call number `n`; a one-shot fault
    // is spent by it.
    auto takes = [](Armed& a, uint64_t n) {
      if (!a.armed || n < a.fail_at || (n > a.fail_at && !a.fault.sticky)) {
        return false;
      }
      if (!a.fault.sticky) a.armed = false;
      return true;
    };
    if (takes(armed_[Index(site)], k)) {
      fault = armed_[Index(site)].fault;
    } else if (kernel && takes(armed_[Index(FaultSite::kAnyKernel)], any)) {
      fault = armed_[Index(FaultSite::kAnyKernel)].fault;
    } else {
      return Verdict{};
    }
  }
  injected_[Index(site)].fetch_add(1);
  if (kernel) injected_[Index(FaultSite::kAnyKernel)].fetch_add(1);
  injected_total_.fetch_add(1);

  std::string message =
      absl::StrCat(options_.name, ": ", ToAbsl(kInjectedMarker));
  const absl::string_view what = ToAbsl(detail);
  if (site == FaultSite::kAllocate) {
    absl::StrAppend(&message,
                    fault.code == absl::StatusCode::kResourceExhausted
                        ? " out of memory on "
                        : " failure of ",
                    FaultCallLabel(site, k), " (", what, ")");
  } else if (kernel) {
    absl::StrAppend(&message, " failure of kernel ",
                    ToAbsl(FaultSiteName(site)), " (", what,
                    what.empty() ? "" : "; ", FaultCallLabel(site, k), ", ",
                    FaultCallLabel(FaultSite::kAnyKernel, any), ")");
  } else {
    absl::StrAppend(&message, " failure of ", FaultCallLabel(site, k));
    if (!what.empty()) absl::StrAppend(&message, " (", what, ")");
  }
  return Verdict{true, fault.after_forwarding,
                 absl::Status(fault.code, message)};
}

template <typename Forward>
absl::Status FaultyDevice::Guard(FaultSite site, std::string_view detail,
                                 Forward&& forward) {
  Verdict verdict = Enter(site, detail);
  if (verdict.fail && !verdict.after_forwarding) return verdict.status;
  absl::Status status = forward();
  if (verdict.fail) return verdict.status;
  return status;
}

Buffer& FaultyDevice::Unwrap(Buffer& buffer) {
  // Every buffer a caller passes comes from this device's Allocate (the
  // Device contract), so it is a CountedBuffer.
  return static_cast<CountedBuffer&>(buffer).inner();
}

const Buffer& FaultyDevice::Unwrap(const Buffer& buffer) {
  return static_cast<const CountedBuffer&>(buffer).inner();
}

TensorRef FaultyDevice::Unwrap(const TensorRef& ref) {
  TensorRef out = ref;
  if (out.buffer != nullptr) out.buffer = &Unwrap(*out.buffer);
  return out;
}

DeviceProperties FaultyDevice::Properties() const {
  DeviceProperties p = inner_->Properties();
  p.model = "FaultyDevice over " + p.model;
  p.total_memory = options_.total_memory;
  p.free_memory = options_.total_memory -
                  std::min<uint64_t>(options_.total_memory, live_bytes());
  return p;
}

const Capabilities& FaultyDevice::capabilities() const {
  return inner_->capabilities();
}

absl::StatusOr<std::unique_ptr<Buffer>> FaultyDevice::Allocate(
    AllocationGrant grant) {
  Verdict verdict =
      Enter(FaultSite::kAllocate, absl::StrCat(grant.bytes(), " bytes"));
  if (verdict.fail && !verdict.after_forwarding) return verdict.status;
  ASSIGN_OR_RETURN(std::unique_ptr<Buffer> buffer,
                   inner_->Allocate(std::move(grant)));
  if (verdict.fail) return verdict.status;  // `buffer` is freed
  return std::make_unique<CountedBuffer>(std::move(buffer), live_);
}

absl::Status FaultyDevice::CopyFromHost(const void* src, Buffer& dst,
                                        size_t offset, size_t bytes) {
  return Guard(FaultSite::kCopyFromHost,
               absl::StrCat(bytes, " bytes at offset ", offset), [&] {
                 return inner_->CopyFromHost(src, Unwrap(dst), offset, bytes);
               });
}

absl::Status FaultyDevice::CopyToHost(const Buffer& src, size_t offset,
                                      void* dst, size_t bytes) {
  return Guard(
      FaultSite::kCopyToHost, absl::StrCat(bytes, " bytes at offset ", offset),
      [&] { return inner_->CopyToHost(Unwrap(src), offset, dst, bytes); });
}

absl::Status FaultyDevice::CopyFromDevice(Device& src_device, const Buffer& src,
                                          Buffer& dst, size_t bytes) {
  return Guard(FaultSite::kCopyFromDevice,
               absl::StrCat(bytes, " bytes from ", src_device.name()), [&] {
                 // A copy within this device is the wrapped device's own copy
                 // (and no CopyToHost call of ours).
                 if (&src_device == this) {
                   return inner_->CopyFromDevice(*inner_, Unwrap(src),
                                                 Unwrap(dst), bytes);
                 }
                 return inner_->CopyFromDevice(src_device, src, Unwrap(dst),
                                               bytes);
               });
}

namespace {

// The site of a kernel call: its kind's.
FaultSite SiteOf(KernelKind kind) {
  switch (kind) {
    case KernelKind::kFill:
      return FaultSite::kFill;
    case KernelKind::kCast:
      return FaultSite::kCast;
    case KernelKind::kBinary:
      return FaultSite::kBinary;
    case KernelKind::kUnary:
      return FaultSite::kUnary;
    case KernelKind::kReduce:
      return FaultSite::kReduce;
    case KernelKind::kMatMul:
      return FaultSite::kMatMul;
    case KernelKind::kPermute:
      return FaultSite::kPermute;
    case KernelKind::kCopyBlocks:
      return FaultSite::kCopyBlocks;
    case KernelKind::kWhere:
      return FaultSite::kWhere;
    case KernelKind::kIm2Col:
      return FaultSite::kIm2Col;
    case KernelKind::kCol2Im:
      return FaultSite::kCol2Im;
    case KernelKind::kConv2d:
      return FaultSite::kConv2d;
    case KernelKind::kPool2d:
      return FaultSite::kPool2d;
    case KernelKind::kBatchNorm:
      return FaultSite::kBatchNorm;
  }
  return FaultSite::kAnyKernel;  // unreachable
}

// The op a kernel call runs, for the message ("add"); empty for the kinds
// that have one op.
std::string_view OpOf(const KernelCall& call) {
  if (const auto* b = std::get_if<BinaryArgs>(&call.args)) {
    return BinaryOpName(b->op);
  }
  if (const auto* u = std::get_if<UnaryArgs>(&call.args)) {
    return UnaryOpName(u->op);
  }
  if (const auto* r = std::get_if<ReduceArgs>(&call.args)) {
    return ReduceOpName(r->op);
  }
  return "";
}

}  // namespace

absl::Status FaultyDevice::Launch(const KernelCall& call) {
  return Guard(SiteOf(call.kind()), OpOf(call), [&] {
    KernelCall inner = call;
    for (TensorRef& in : inner.inputs) in = Unwrap(in);
    inner.out = Unwrap(call.out);
    return inner_->Launch(inner);
  });
}

absl::Status FaultyDevice::Synchronize() {
  return Guard(FaultSite::kSynchronize, "",
               [&] { return inner_->Synchronize(); });
}

}  // namespace tensord::core

#include "core/cpu/cpu_device.h"

#include <unistd.h>

#include <algorithm>
#include <cstring>
#include <fstream>
#include <new>
#include <string>
#include <variant>

#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/strip.h"
#include "core/base/op_checks.h"
#include "core/base/status.h"
#include "core/cpu/blas.h"
#include "core/cpu/cpu_kernels.h"
#include "core/cpu/host_pool.h"
#include "core/cpu/library_kernels.h"
#include "core/cpu/norm_kernels.h"
#include "core/cpu/pool_kernels.h"

namespace tensord::core {
namespace {

constexpr size_t kAlignment = 64;

// Host memory aligned for vector loads. Large blocks come from the
// device's HostPool (pre-faulted, reused); small ones from the heap. A
// zero-byte buffer still owns a (minimal) allocation so data() is never null.
class HostBuffer final : public Buffer {
 public:
  // `pool` is borrowed and outlives every buffer (the device owns it and
  // the Runtime frees tensors before devices).
  static std::unique_ptr<HostBuffer> Create(size_t bytes, HostPool* pool) {
    if (bytes >= HostPool::kMinBytes) {
      void* p = pool->Acquire(bytes);
      if (p == nullptr) return nullptr;
      return std::unique_ptr<HostBuffer>(new HostBuffer(p, bytes, pool));
    }
    const size_t rounded =
        bytes == 0 ? kAlignment
                   : (bytes + kAlignment - 1) / kAlignment * kAlignment;
    void* p =
        ::operator new(rounded, std::align_val_t(kAlignment), std::nothrow);
    if (p == nullptr) return nullptr;
    return std::unique_ptr<HostBuffer>(new HostBuffer(p, bytes, nullptr));
  }
  ~HostBuffer() override {
    if (pool_ != nullptr) {
      pool_->Release(data_, size_);
    } else {
      ::operator delete(data_, std::align_val_t(kAlignment));
    }
  }
  HostBuffer(const HostBuffer&) = delete;
  HostBuffer& operator=(const HostBuffer&) = delete;

  void* data() override { return data_; }
  const void* data() const override { return data_; }
  size_t size() const override { return size_; }

 private:
  HostBuffer(void* data, size_t size, HostPool* pool)
      : data_(data), size_(size), pool_(pool) {}
  void* data_;
  size_t size_;
  HostPool* pool_;  // borrowed; nullptr for heap blocks
};

// First "model name" line of /proc/cpuinfo, or "unknown CPU".
std::string CpuModel() {
  std::ifstream in("/proc/cpuinfo");
  std::string line;
  while (std::getline(in, line)) {
    if (absl::StartsWith(line, "model name")) {
      const size_t colon = line.find(':');
      if (colon != std::string::npos) {
        return std::string(absl::StripAsciiWhitespace(line.substr(colon + 1)));
      }
    }
  }
  return "unknown CPU";
}

uint64_t PhysicalMemory() {
  const long pages = sysconf(_SC_PHYS_PAGES);
  const long page_size = sysconf(_SC_PAGESIZE);
  if (pages <= 0 || page_size <= 0) return 0;
  return static_cast<uint64_t>(pages) * static_cast<uint64_t>(page_size);
}

// MemAvailable from /proc/meminfo in bytes; 0 when unreadable.
uint64_t AvailableMemory() {
  std::ifstream in("/proc/meminfo");
  std::string line;
  while (std::getline(in, line)) {
    absl::string_view rest = line;
    if (absl::ConsumePrefix(&rest, "MemAvailable:")) {
      rest = absl::StripAsciiWhitespace(rest);
      absl::ConsumeSuffix(&rest, "kB");
      uint64_t kib = 0;
      if (absl::SimpleAtoi(absl::StripAsciiWhitespace(rest), &kib)) {
        return kib * 1024;
      }
    }
  }
  return 0;
}

// Every dtype computes on the CPU (float16/bfloat16 in float32, rounded
// back, as PyTorch's CPU does) except random fills of the half and
// non-floating types and matmul of bool.
Capabilities CpuCapabilities() {
  Capabilities caps = Capabilities::Common();
  caps.Allow(OpKind::kRandomFill, DType::kFloat32)
      .Allow(OpKind::kRandomFill, DType::kFloat64);
  return caps;
}

class CpuDevice final : public Device {
 public:
  explicit CpuDevice(const CpuDeviceOptions& options)
      : name_(options.name),
        index_(options.index),
        model_(CpuModel()),
        total_memory_(options.total_memory != 0 ? options.total_memory
                                                : PhysicalMemory()),
        capabilities_(CpuCapabilities()),
        kernel_libraries_(options.kernel_libraries),
        pool_(options.host_cache_bytes) {}

  const std::string& name() const override { return name_; }
  DeviceKind kind() const override { return DeviceKind::kCpu; }
  int index() const override { return index_; }

  DeviceProperties Properties() const override {
    DeviceProperties p;
    p.model = model_;
    p.total_memory = total_memory_;
    p.free_memory = std::min(AvailableMemory(), total_memory_);
    p.kernel_library = KernelLibrary();
    const cpu::LibraryKernelCounters counts = cpu::GetLibraryKernelCounters();
    p.library_prepared = counts.primitives;
    p.library_reused = counts.reused;
    p.library_evicted = counts.evicted;
    p.library_reorders = counts.reorders;
    p.library_team_calls = counts.team_calls;
    p.library_alone_calls = counts.alone_calls;
    p.library_contended = counts.contended;
    return p;
  }

  const Capabilities& capabilities() const override { return capabilities_; }

  // The kernel-selection table, when one-call kernels are on: conv2d on
  // oneDNN where it runs the dtype and window (cpu::LibraryRuns); pooling
  // in every floating dtype and window on the device's own direct kernel
  // (core/cpu/pool_kernels.h: faster here than oneDNN's); batch norm in
  // training, float32 and float64, on its direct kernel
  // (core/cpu/norm_kernels.h); everything else composed.
  Implementation Select(const KernelArgs& args, DType dtype) const override {
    if (!kernel_libraries_) return Implementation::kComposed;
    if (std::holds_alternative<Pool2dArgs>(args)) {
      return IsFloating(dtype) ? Implementation::kLibrary
                               : Implementation::kComposed;
    }
    if (std::holds_alternative<BatchNormArgs>(args)) {
      return dtype == DType::kFloat32 || dtype == DType::kFloat64
                 ? Implementation::kLibrary
                 : Implementation::kComposed;
    }
    return cpu::LibraryRuns(args, dtype) ? Implementation::kLibrary
                                         : Implementation::kComposed;
  }
  absl::StatusOr<uint64_t> WorkspaceBytes(const KernelArgs& args,
                                          DType dtype) const override {
    if (!std::holds_alternative<Conv2dArgs>(args)) return uint64_t{0};
    return cpu::LibraryWorkspace(args, dtype);
  }
  std::string KernelLibrary() const override {
    if (!kernel_libraries_) return "";
    const std::string& onednn = cpu::KernelLibraryName();
    return onednn.empty()
               ? "pooling direct"
               : absl::StrCat("conv2d on ", onednn, ", pooling direct");
  }

  absl::StatusOr<std::unique_ptr<Buffer>> Allocate(
      AllocationGrant grant) override {
    const size_t bytes = grant.bytes();
    std::unique_ptr<Buffer> buffer = HostBuffer::Create(bytes, &pool_);
    if (buffer == nullptr) {
      return absl::ResourceExhaustedError(
          absl::StrCat(name_, ": host allocation of ", bytes, " bytes failed"));
    }
    NoteDeviceAllocation(bytes);
    return buffer;
  }

  absl::Status CopyFromHost(const void* src, Buffer& dst, size_t offset,
                            size_t bytes) override {
    RETURN_IF_ERROR(CheckRange(dst, offset, bytes));
    if (bytes > 0)
      std::memcpy(static_cast<char*>(dst.data()) + offset, src, bytes);
    return absl::OkStatus();
  }

  absl::Status CopyToHost(const Buffer& src, size_t offset, void* dst,
                          size_t bytes) override {
    RETURN_IF_ERROR(CheckRange(src, offset, bytes));
    if (bytes > 0) {
      std::memcpy(dst, static_cast<const char*>(src.data()) + offset, bytes);
    }
    return absl::OkStatus();
  }

  absl::Status CopyFromDevice(Device& src_device, const Buffer& src,
                              Buffer& dst, size_t bytes) override {
    RETURN_IF_ERROR(CheckRange(dst, 0, bytes));
    // Our memory is host memory, so any source device can write straight
    // into it (a plain memcpy when it is another CPU device).
    return src_device.CopyToHost(src, 0, dst.data(), bytes);
  }

  absl::Status Launch(const KernelCall& call) override {
    RETURN_IF_ERROR(CheckKernelCall(call, name_));
    return std::visit([&](const auto& args) { return Run(args, call); },
                      call.args);
  }

  absl::Status Synchronize() override { return absl::OkStatus(); }

 private:
  // One per kernel kind, on host pointers (cpu_kernels.h); `call` is
  // well-formed (Launch checked) and planned (nothing re-validated).
  static absl::Status Run(const FillSpec& spec, const KernelCall& call) {
    const TensorRef& out = call.out;
    return cpu::FillKernel(spec, out.dtype, out.shape.NumElements(),
                           out.buffer->data());
  }

  static absl::Status Run(const CastArgs&, const KernelCall& call) {
    const TensorRef& in = call.inputs[0];
    return cpu::CastKernel(in.dtype, in.buffer->data(), call.out.dtype,
                           call.out.buffer->data(), in.shape.NumElements());
  }

  static absl::Status Run(const BinaryArgs& args, const KernelCall& call) {
    const TensorRef& a = call.inputs[0];
    const TensorRef& b = call.inputs[1];
    return cpu::BinaryKernel(args.op, a.dtype, a.buffer->data(), a.shape,
                             b.buffer->data(), b.shape, call.out.buffer->data(),
                             call.out.shape);
  }

  static absl::Status Run(const UnaryArgs& args, const KernelCall& call) {
    const TensorRef& in = call.inputs[0];
    return cpu::UnaryKernel(args.op, args.alpha, args.beta, in.dtype,
                            in.buffer->data(), call.out.buffer->data(),
                            in.shape.NumElements());
  }

  static absl::Status Run(const ReduceArgs& args, const KernelCall& call) {
    const TensorRef& in = call.inputs[0];
    return cpu::ReduceKernel(args.op, in.dtype, args.dims, in.buffer->data(),
                             call.out.buffer->data());
  }

  static absl::Status Run(const MatMulDims& dims, const KernelCall& call) {
    return cpu::MatMulKernel(
        dims, call.out.dtype, call.inputs[0].buffer->data(),
        call.inputs[1].buffer->data(), call.out.buffer->data());
  }

  static absl::Status Run(const PermuteArgs& args, const KernelCall& call) {
    const TensorRef& in = call.inputs[0];
    cpu::PermuteKernel(DTypeSize(in.dtype), in.buffer->data(), in.shape,
                       args.perm, call.out.buffer->data());
    return absl::OkStatus();
  }

  static absl::Status Run(const BlockCopy& c, const KernelCall& call) {
    if (c.rows <= 0 || c.row_bytes <= 0) return absl::OkStatus();
    const Buffer& src = *call.inputs[0].buffer;
    Buffer& dst = *call.out.buffer;
    const int64_t src_end = c.src_offset + (c.rows - 1) * c.src_stride;
    const int64_t dst_end = c.dst_offset + (c.rows - 1) * c.dst_stride;
    RETURN_IF_ERROR(CheckRange(src, src_end, c.row_bytes));
    RETURN_IF_ERROR(CheckRange(dst, dst_end, c.row_bytes));
    const auto* s = static_cast<const char*>(src.data()) + c.src_offset;
    auto* d = static_cast<char*>(dst.data()) + c.dst_offset;
    for (int64_t r = 0; r < c.rows; ++r) {
      std::memcpy(d + r * c.dst_stride, s + r * c.src_stride, c.row_bytes);
    }
    return absl::OkStatus();
  }

  static absl::Status Run(const WhereArgs&, const KernelCall& call) {
    const TensorRef& c = call.inputs[0];
    const TensorRef& x = call.inputs[1];
    const TensorRef& y = call.inputs[2];
    return cpu::WhereKernel(x.dtype, c.buffer->data(), c.shape,
                            x.buffer->data(), x.shape, y.buffer->data(),
                            y.shape, call.out.buffer->data(), call.out.shape);
  }

  static absl::Status Run(const Col2ImArgs& args, const KernelCall& call) {
    return cpu::Col2ImKernel(call.out.dtype, args.dims,
                             call.inputs[0].buffer->data(),
                             call.out.buffer->data());
  }

  static absl::Status Run(const Conv2dArgs&, const KernelCall& call) {
    return cpu::RunLibraryKernel(call);
  }

  static absl::Status Run(const BatchNormArgs& args, const KernelCall& call) {
    const void* const in[5] = {
        call.inputs[0].buffer->data(), call.inputs[1].buffer->data(),
        call.inputs[2].buffer->data(), call.inputs[3].buffer->data(),
        call.inputs[4].buffer->data()};
    return cpu::BatchNormKernel(args, call.out.dtype, in,
                                call.out.buffer->data());
  }

  static absl::Status Run(const Pool2dArgs& args, const KernelCall& call) {
    return cpu::Pool2dKernel(
        args, call.out.dtype, call.inputs[0].buffer->data(),
        call.inputs[1].buffer->data(), call.out.buffer->data());
  }

  static absl::Status Run(const Im2ColArgs& args, const KernelCall& call) {
    const TensorRef& in = call.inputs[0];
    cpu::Im2ColKernel(DTypeSize(in.dtype), args.dims, args.pad_bits,
                      in.buffer->data(), call.out.buffer->data());
    return absl::OkStatus();
  }

  const std::string name_;
  const int index_;
  const std::string model_;
  const uint64_t total_memory_;
  const Capabilities capabilities_;
  const bool kernel_libraries_;
  HostPool pool_;  // must outlive buffers: the Runtime frees tensors first
};

}  // namespace

std::unique_ptr<Device> CreateCpuDevice(const CpuDeviceOptions& options) {
  return std::make_unique<CpuDevice>(options);
}

}  // namespace tensord::core

// The Device interface: one implementation per kind of device (CPU, CUDA).
//
// The runtime, handle table and service are written once against this
// interface (ggml's backend interface; LevelDB's Env). A Device owns its
// memory and its execution resources; it knows nothing about sessions,
// handles or budgets — the Runtime does validation, accounting and the
// same-device rule, so kernels may assume valid input: shapes checked,
// dtypes as documented per method, buffers large enough, all buffers of one
// call allocated by this device.
//
// Thread-safety: every method may be called concurrently from many threads.
// Kernels are ordered with respect to one another on a device (a GPU queues
// them on its stream; the CPU runs them synchronously); results are visible
// to CopyToHost / CopyFromDevice issued after them.
#ifndef TENSORD_CORE_DEVICE_H_
#define TENSORD_CORE_DEVICE_H_

#include <cstddef>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "core/dtype.h"
#include "core/op_kinds.h"
#include "core/shape.h"

namespace tensord::core {

enum class DeviceKind { kCpu, kCuda };
std::string_view DeviceKindName(DeviceKind kind);  // "cpu", "cuda"

// A block of device memory. Freed when destroyed. `data()` is an address in
// the device's own address space (host memory for the CPU device).
class Buffer {
 public:
  virtual ~Buffer() = default;
  virtual void* data() = 0;
  virtual const void* data() const = 0;
  virtual size_t size() const = 0;
};

// What a device reports about itself (nvidia-smi's view).
struct DeviceProperties {
  std::string model;          // "Intel(R) Xeon(R) ...", "NVIDIA H100 80GB HBM3"
  uint64_t total_memory = 0;  // bytes
  uint64_t free_memory = 0;   // bytes, as the OS / driver reports now
  int compute_capability_major = 0;  // GPUs only
  int compute_capability_minor = 0;
  int multiprocessor_count = 0;
};

// A tensor operand as kernels see it: a buffer plus its dtype and shape.
// Borrowed: valid for the duration of the call.
struct TensorRef {
  Buffer* buffer = nullptr;
  DType dtype = DType::kFloat32;
  Shape shape;
};

// The op families (BinaryOp, UnaryOp, ReduceOp) are in core/op_kinds.h.
// PyTorch's names: "add", "sub", "mul", "div", "maximum", "pow", "eq", ...
std::string_view BinaryOpName(BinaryOp op);
bool IsComparison(BinaryOp op);            // kEq .. kGe
std::string_view UnaryOpName(UnaryOp op);  // "neg", "abs", "exp", ...
// True for the ops whose result is floating: all but neg, abs and relu.
bool IsFloatingUnary(UnaryOp op);
std::string_view ReduceOpName(ReduceOp op);  // "sum", "mean", ..., "norm"

struct FillSpec {
  enum class Kind { kZeros, kOnes, kFull, kArange, kRand, kRandn };
  Kind kind = Kind::kZeros;
  double value = 0;              // kFull
  double start = 0, step = 1;    // kArange: element i = start + i * step
  double low = 0, high = 1;      // kRand
  double mean = 0, stddev = 1;   // kRandn
  std::optional<uint64_t> seed;  // kRand/kRandn; unset = nondeterministic
};

// The operations a device may or may not implement for a dtype.
enum class OpKind {
  kFill,
  kRandomFill,
  kCast,
  kBinary,
  kMatMul,
  kUnary,
  kReduce,
  kWhere,
};

// A kernel that arrives through Device::Launch, named by its kind: the one
// entry point new kernels take, so that adding one adds an enumerator and a
// kernel, never a method (ggml's backend interface). The kernel families
// with a method of their own below are to move here in turn.
enum class KernelKind {
  // inputs = {cond (bool), x, y}: out = cond ? x : y elementwise, all three
  // broadcast to out.shape; x, y and out share one dtype (any).
  kWhere,
};
struct KernelCall {
  KernelKind kind = KernelKind::kWhere;
  std::vector<TensorRef> inputs;  // borrowed for the call
  TensorRef out;
};

class Device {
 public:
  virtual ~Device() = default;

  // Canonical name, e.g. "cpu", "cpu:1", "cuda:0". Assigned at construction.
  virtual const std::string& name() const = 0;
  virtual DeviceKind kind() const = 0;
  virtual int index() const = 0;
  virtual DeviceProperties Properties() const = 0;

  // OK if this device implements `op` for `dtype`; otherwise
  // FAILED_PRECONDITION with a message naming op, dtype and device (PyTorch:
  // "\"addmm_impl_cpu_\" not implemented for 'Bool'").
  virtual absl::Status Supports(OpKind op, DType dtype) const = 0;

  // Allocates `bytes` (0 allowed) of device memory. RESOURCE_EXHAUSTED when
  // the device itself is out of memory. Budgets are the Runtime's business.
  virtual absl::StatusOr<std::unique_ptr<Buffer>> Allocate(size_t bytes) = 0;

  // Host -> device: writes `bytes` from `src` at `offset` into `dst`.
  virtual absl::Status CopyFromHost(const void* src, Buffer& dst, size_t offset,
                                    size_t bytes) = 0;
  // Device -> host: reads `bytes` at `offset` of `src` into `dst`, waiting
  // for every kernel that writes `src` to finish first.
  virtual absl::Status CopyToHost(const Buffer& src, size_t offset, void* dst,
                                  size_t bytes) = 0;
  // Copies `bytes` from `src`, a buffer of `src_device` (possibly another
  // device or kind), into `dst`, a buffer of this device.
  virtual absl::Status CopyFromDevice(Device& src_device, const Buffer& src,
                                      Buffer& dst, size_t bytes) = 0;

  // Kernels. Output buffers are allocated by the caller with the right size.
  // Fill `out` (any dtype; kRand/kRandn float dtypes only).
  virtual absl::Status Fill(const FillSpec& spec, const TensorRef& out) = 0;
  // Element-wise conversion; in.shape == out.shape.
  virtual absl::Status Cast(const TensorRef& in, const TensorRef& out) = 0;
  // out = a (op) b with broadcasting; a and b share one dtype (the Runtime
  // casts operands to the computation dtype first), which out shares too
  // except for comparisons, whose out is bool;
  // out.shape == BroadcastShapes(a.shape, b.shape). `out` may be the same
  // buffer as `a` when out.shape == a.shape (in-place ops).
  virtual absl::Status Binary(BinaryOp op, const TensorRef& a,
                              const TensorRef& b, const TensorRef& out) = 0;
  // Batched row-major matrix product: for each of `batch` problems,
  // out[i] (m x n) = a[i] (m x k) * b[i] (k x n). Operand i of a batch starts
  // at element i * a_batch_stride (resp. b_, out_); a stride of 0 broadcasts
  // one matrix over the batch. a, b, out share one dtype.
  struct MatMulDims {
    int64_t batch = 1, m = 0, n = 0, k = 0;
    int64_t a_batch_stride = 0, b_batch_stride = 0, out_batch_stride = 0;
  };
  virtual absl::Status MatMul(const MatMulDims& dims, const TensorRef& a,
                              const TensorRef& b, const TensorRef& out) = 0;

  // out = op(in) elementwise; in and out share dtype and shape; `out` may
  // be `in` (in place).
  virtual absl::Status Unary(UnaryOp op, const TensorRef& in,
                             const TensorRef& out) = 0;
  // Reduces `in`, read as [outer, n, inner] (row-major), over its middle
  // axis into `out`, read as [outer, inner]. out.dtype is int64 for kArgmax
  // and in.dtype otherwise. n == 0 is allowed for kSum/kMean/kNorm only.
  struct ReduceDims {
    int64_t outer = 1, n = 1, inner = 1;
  };
  virtual absl::Status Reduce(ReduceOp op, const ReduceDims& dims,
                              const TensorRef& in, const TensorRef& out) = 0;
  // out = in with its dims permuted: out.shape[i] == in.shape[perm[i]].
  // Any dtype (the copy moves bytes). perm.size() == in.shape.rank().
  virtual absl::Status Permute(const TensorRef& in,
                               const std::vector<int>& perm,
                               const TensorRef& out) = 0;
  // Copies `rows` blocks of `row_bytes` bytes: block r from byte
  // src_offset + r * src_stride of `src` to dst_offset + r * dst_stride of
  // `dst` (both buffers of this device). The building block of narrow, cat
  // and reshape.
  struct BlockCopy {
    int64_t rows = 1, row_bytes = 0;
    int64_t src_offset = 0, src_stride = 0;
    int64_t dst_offset = 0, dst_stride = 0;
  };
  virtual absl::Status CopyBlocks(const BlockCopy& copy, const Buffer& src,
                                  Buffer& dst) = 0;

  // Runs `call` (a planned call: shapes and dtypes as its kind documents).
  // FAILED_PRECONDITION for a kind or dtype this device does not implement
  // (Supports says which); the error of the kernel otherwise.
  virtual absl::Status Launch(const KernelCall& call) = 0;

  // Waits until every queued kernel and copy on this device has finished.
  virtual absl::Status Synchronize() = 0;
};

}  // namespace tensord::core

#endif  // TENSORD_CORE_DEVICE_H_

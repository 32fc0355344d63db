// The Device interface: one implementation per kind of device (CPU, CUDA).
//
// The runtime, handle table and service are written once against this
// interface (ggml's backend interface; LevelDB's Env). A Device owns its
// memory and its execution resources; it knows nothing about sessions,
// handles or budgets — the Runtime does validation, accounting and the
// same-device rule, so kernels may assume valid input: shapes checked,
// dtypes as documented per kernel kind (below), buffers large enough, all
// buffers of one call allocated by this device.
//
// Thread-safety: every method may be called concurrently from many threads.
// Kernels are ordered with respect to one another on a device (a GPU queues
// them on its stream; the CPU runs them synchronously); results are visible
// to CopyToHost / CopyFromDevice issued after them.
#ifndef TENSORD_CORE_BASE_DEVICE_H_
#define TENSORD_CORE_BASE_DEVICE_H_

#include <array>
#include <atomic>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <variant>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "core/base/dtype.h"
#include "core/base/op_kinds.h"
#include "core/base/shape.h"
#include "core/base/window.h"

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

  // How many in-place writes the memory has had (autograd's version
  // counter: a tensor saved for backward must still be at the version it
  // was saved at). The Runtime bumps it; kernels do not.
  uint64_t version() const { return version_.load(std::memory_order_acquire); }
  void BumpVersion() { version_.fetch_add(1, std::memory_order_acq_rel); }

 private:
  std::atomic<uint64_t> version_{0};
};

// What a device reports about itself (nvidia-smi's view).
struct DeviceProperties {
  std::string model;          // "Intel(R) Xeon(R) ...", "NVIDIA H100 80GB HBM3"
  uint64_t total_memory = 0;  // bytes
  uint64_t free_memory = 0;   // bytes, as the OS / driver reports now
  int compute_capability_major = 0;  // GPUs only
  int compute_capability_minor = 0;
  int multiprocessor_count = 0;
  // What runs its kLibrary kernels ("conv2d on oneDNN 2.6.3, pooling
  // direct"; "" if none): Device::KernelLibrary().
  std::string kernel_library;
  // Its library's prepared calls (primitives, descriptors and algorithms),
  // since start: made, reused from the cache, evicted to keep it bounded;
  // and layout conversions run; calls run on a team of threads, calls run
  // on their calling thread alone, and of those the calls that found the
  // team busy with another session's call (the CPU's one-team policy). The
  // host devices share one cache and one team, so each reports the
  // process's.
  uint64_t library_prepared = 0;
  uint64_t library_reused = 0;
  uint64_t library_evicted = 0;
  uint64_t library_reorders = 0;
  uint64_t library_team_calls = 0;
  uint64_t library_alone_calls = 0;
  uint64_t library_contended = 0;
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

// The operations a device may or may not implement for a dtype (the rows
// of its Capabilities).
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
inline constexpr int kOpKindCount = static_cast<int>(OpKind::kWhere) + 1;

// What a device computes: for each OpKind, the dtypes it runs it in. A
// plain table a device fills once when it is made; Device::Supports answers
// from it and the planner (core/planner/planner.h) reads it, so whoever holds a copy
// plans an op exactly as the device would answer. A kCast entry means the
// device converts from and to that dtype.
class Capabilities {
 public:
  Capabilities() = default;  // computes nothing
  // What every device computes: fill, cast, binary, unary, reduce and where
  // in every dtype, matmul in all but bool. Random fills are each device's
  // own to add.
  static Capabilities Common();

  Capabilities& Allow(OpKind op, DType dtype);
  Capabilities& AllowAll(OpKind op);  // every dtype
  bool Has(OpKind op, DType dtype) const;

  // OK when Has(op, dtype); otherwise FAILED_PRECONDITION "\"matmul\" not
  // implemented for 'bool' on cuda:0" (PyTorch's "\"addmm_impl_cpu_\" not
  // implemented for 'Bool'", naming `device`).
  absl::Status Check(OpKind op, DType dtype, std::string_view device) const;

  bool operator==(const Capabilities& other) const = default;

 private:
  std::array<uint32_t, kOpKindCount> dtypes_{};  // bit i: DType i
};

// --- Kernels -----------------------------------------------------------------
//
// Every kernel arrives through Device::Launch as a KernelCall: its kind's
// arguments (one struct per kind, below), its input tensors and its output.
// Adding a kernel adds an argument struct and an alternative of KernelArgs,
// never a method (ggml's backend interface); each device's Launch then fails
// to compile until it runs the new kind. The planner (core/planner/planner.h) and
// the executor have checked everything a call states: the inputs' count,
// dtypes and shapes are as the kind documents, buffers are large enough and
// were allocated by the device, and Supports() said yes for the op's kernel
// and its casts (the helper kernels an op adds — fills, the multiply that
// expands a matmul's batch — are ones every device runs in every dtype).
// Devices trust that and do not check it again.

// Fill `out` (any dtype; kRand/kRandn where Supports(kRandomFill) says so).
// No inputs.
struct FillSpec {
  enum class Kind { kZeros, kOnes, kFull, kArange, kRand, kRandn };
  Kind kind = Kind::kZeros;
  double value = 0;              // kFull
  double start = 0, step = 1;    // kArange: element i = start + i * step
  double low = 0, high = 1;      // kRand
  double mean = 0, stddev = 1;   // kRandn
  std::optional<uint64_t> seed;  // kRand/kRandn; unset = nondeterministic
};

// inputs = {in}: element-wise conversion to out.dtype; in.shape ==
// out.shape.
struct CastArgs {};

// inputs = {a, b}: out = a (op) b with broadcasting; a and b share one dtype
// (the executor casts operands to the computation dtype first), which out
// shares too except for comparisons, whose out is bool; out.shape ==
// BroadcastShapes(a.shape, b.shape). `out` may be the same buffer as `a`
// when out.shape == a.shape (in-place ops).
struct BinaryArgs {
  BinaryOp op = BinaryOp::kAdd;
};

// inputs = {in}: out = op(in) elementwise; in and out share dtype and shape;
// `out` may be `in` (in place).
struct UnaryArgs {
  UnaryOp op = UnaryOp::kNeg;
  // The op's numeric arguments (its op table row's `params`, in order).
  double alpha = 0, beta = 0;
};

// inputs = {in}: reduces `in`, read as [outer, n, inner] (row-major), over
// its middle axis into `out`, read as [outer, inner]. out.dtype is int64 for
// kArgmax and in.dtype otherwise. n == 0 is allowed for kSum/kMean/kNorm
// only.
struct ReduceDims {
  int64_t outer = 1, n = 1, inner = 1;
};
struct ReduceArgs {
  ReduceOp op = ReduceOp::kSum;
  ReduceDims dims;
};

// inputs = {a, b}: batched row-major matrix product: for each of `batch`
// problems, out[i] (m x n) = a[i] (m x k) * b[i] (k x n). Operand i of a
// batch starts at element i * a_batch_stride (resp. b_, out_); a stride of 0
// broadcasts one matrix over the batch. a, b, out share one dtype.
struct MatMulDims {
  int64_t batch = 1, m = 0, n = 0, k = 0;
  int64_t a_batch_stride = 0, b_batch_stride = 0, out_batch_stride = 0;
};

// inputs = {in}: out = in with its dims permuted: out.shape[i] ==
// in.shape[perm[i]]. Any dtype (the copy moves bytes). perm.size() ==
// in.shape.rank().
struct PermuteArgs {
  std::vector<int> perm;
};

// inputs = {src}: copies `rows` blocks of `row_bytes` bytes, block r from
// byte src_offset + r * src_stride of src's buffer to dst_offset + r *
// dst_stride of out's (dtypes and shapes are not read). The building block
// of narrow, cat and reshape. OUT_OF_RANGE if a block lies outside either
// buffer.
struct BlockCopy {
  int64_t rows = 1, row_bytes = 0;
  int64_t src_offset = 0, src_stride = 0;
  int64_t dst_offset = 0, dst_stride = 0;
};

// inputs = {cond (bool), x, y}: out = cond ? x : y elementwise, all three
// broadcast to out.shape; x, y and out share one dtype (any).
struct WhereArgs {};

// inputs = {in}: the windows of `in`, read as [n, c, h, w] (row-major),
// unfolded into columns for a matrix product or a reduction (im2col): out,
// read as [c, kh, kw, n, oh, ow], holds at [ci][i][j][b][y][x] the element
// in[b][ci][y * sh - ph + i * dh][x * sw - pw + j * dw] (core/base/window.h),
// or the padding value where that lies outside the input. in and out share
// one dtype (any); `pad_bits` is the padding value's bit pattern in it, in
// the low DTypeSize(dtype) bytes (0 is zero in every dtype; max pooling
// pads with -inf).
struct Im2ColArgs {
  WindowDims dims;
  uint64_t pad_bits = 0;
};

// inputs = {cols}: the adjoint of im2col (col2im), the input gradient of
// conv2d and of the pooling ops: cols, read as [c, kh, kw, n, oh, ow],
// holds a value for each window entry; out, read as [n, c, h, w], receives
// at each element the sum of the entries whose windows read it (padding
// entries are dropped). cols and out share one floating dtype (the half
// types sum in float32).
struct Col2ImArgs {
  WindowDims dims;
};

// conv2d as one call of a library (oneDNN on the CPU), made only where the
// device's kernel-selection table (Device::Select) says kLibrary for it;
// elsewhere conv2d is im2col and a matrix product. Plain layouts: x and
// the input gradient [n, c, h, w], the weight [out_channels,
// c / groups, kh, kw], the output and its gradient [n, out_channels, oh,
// ow]; one floating dtype. `pass` says what inputs[0] and inputs[1] are and
// what `out` receives:
//   kForward:         x, weight       -> the output, plus inputs[2] (the
//                                        bias [out_channels]) per channel
//                                        when `bias`
//   kBackwardData:    grad, weight    -> the input's gradient
//   kBackwardWeights: x, grad         -> the weight's gradient
// inputs[2] is unread without `bias` (pass any operand); inputs[3] is the
// workspace: bytes for the library's own layouts and scratch, at least
// Device::WorkspaceBytes(args, dtype) of them, admitted and allocated by
// the caller like any buffer (read as bool [bytes]).
enum class ConvPass { kForward, kBackwardData, kBackwardWeights };
struct Conv2dArgs {
  WindowDims dims;
  int64_t groups = 1;
  int64_t out_channels = 1;
  ConvPass pass = ConvPass::kForward;
  bool bias = false;  // kForward only: add inputs[2] per output channel
};

// max_pool2d / avg_pool2d as one kernel call (the CPU device's own direct
// kernel, cuDNN on a GPU), made only where Device::Select says kLibrary for
// it; elsewhere pooling is im2col and a reduction. Plain layouts: x and its
// gradient [n, c, h, w], the output and its gradient [n, c, oh, ow]; one
// floating dtype. inputs = {in, x, workspace}:
//   kForward:  in = x               -> the output
//   kBackward: in = the output's gradient -> x's gradient (max pooling
//              finds each window's first maximum in x again, PyTorch's
//              index; average pooling reads no x, and `in` stands in)
// The workspace is as Conv2dArgs' (Device::WorkspaceBytes).
enum class PoolAlgorithm { kMax, kAvgIncludePad, kAvgExcludePad };
enum class PoolPass { kForward, kBackward };
struct Pool2dArgs {
  WindowDims dims;
  PoolAlgorithm algorithm = PoolAlgorithm::kMax;
  PoolPass pass = PoolPass::kForward;
};

// batch_norm in training (the batch's own statistics) as one kernel call
// per pass (the CPU device's direct kernel), made only where Device::Select
// says kLibrary for it; elsewhere it is reductions and elementwise kernels
// (core/executor/norm_ops.cc). x is read as [n, c, plane] (every dim after
// the channel's flattened); one floating dtype throughout; a statistic per
// channel is the biased one over n * plane elements, accumulated in double.
// inputs = {x, a, b, c, d}, those a pass does not read given as x:
//   kStatistics: {x}                      -> [3, c]: mean, var, invstd =
//                                             1 / sqrt(var + eps)
//   kNormalize:  {x, stats, weight, bias} -> y = (x - mean) * invstd
//                                             (* weight) (+ bias)
//   kParamGrads: {x, g, stats}            -> [2, c]: sum(g * xhat), sum(g),
//                                             xhat = (x - mean) * invstd
//   kInputGrad:  {x, g, stats, sums, weight} -> x's gradient, PyTorch's
//                invstd * (gh - mean(gh) - xhat * mean(gh * xhat)), gh =
//                g (* weight), the means from kParamGrads' sums
// weight and bias are [c] and read only when their flag is set.
enum class BatchNormPass { kStatistics, kNormalize, kParamGrads, kInputGrad };
struct BatchNormArgs {
  int64_t n = 0, c = 0, plane = 0;
  double eps = 0;
  bool weight = false, bias = false;
  BatchNormPass pass = BatchNormPass::kStatistics;
};

// One alternative per kernel; KernelKind names them in the same order.
using KernelArgs =
    std::variant<FillSpec, CastArgs, BinaryArgs, UnaryArgs, ReduceArgs,
                 MatMulDims, PermuteArgs, BlockCopy, WhereArgs, Im2ColArgs,
                 Col2ImArgs, Conv2dArgs, Pool2dArgs, BatchNormArgs>;
enum class KernelKind {
  kFill,
  kCast,
  kBinary,
  kUnary,
  kReduce,
  kMatMul,
  kPermute,
  kCopyBlocks,
  kWhere,
  kIm2Col,
  kCol2Im,
  kConv2d,
  kPool2d,
  kBatchNorm,
};
inline constexpr int kKernelKindCount = std::variant_size_v<KernelArgs>;
// Whether `args` is of a kind a device may run as one library call
// (conv2d, pooling, batch norm): the kinds Device::Select chooses for.
inline bool IsLibraryKind(const KernelArgs& args) {
  return std::holds_alternative<Conv2dArgs>(args) ||
         std::holds_alternative<Pool2dArgs>(args) ||
         std::holds_alternative<BatchNormArgs>(args);
}
// "fill", "cast", "binary", ..., "where", "im2col", "col2im", "conv2d".
std::string_view KernelKindName(KernelKind kind);
// How many inputs a kernel of `kind` takes (0 for fill, 3 for where).
int KernelArity(KernelKind kind);

// A planned kernel call. The tensors are borrowed for the call.
struct KernelCall {
  KernelArgs args;
  std::vector<TensorRef> inputs;
  TensorRef out;

  KernelKind kind() const { return static_cast<KernelKind>(args.index()); }
};

// INTERNAL "<device>: malformed <kind> kernel call (...)" unless `call` has
// its kind's number of inputs and every tensor a buffer: the one structural
// check each device's Launch makes before trusting a call.
absl::Status CheckKernelCall(const KernelCall& call, std::string_view device);

class Admitter;          // core/runtime/admission.h
class DeviceTestAccess;  // tests/core/device_test_access.h

// Leave to allocate `bytes` of device memory: what Device::Allocate takes.
// Only the Admitter makes one (core/runtime/admission.h), after admitting the bytes
// against the session's quotas and the device's budget, so no code can take
// device memory without admission: a grant cannot be made anywhere else.
// DeviceTestAccess is the one other maker, defined only under tests/, for
// the tests of devices themselves (a device's own allocation, its
// out-of-memory error), which run no Runtime and so have nothing to admit
// against. Move-only; a device's Allocate consumes it, and a device that
// wraps another (a test's FaultyDevice) passes it on.
class AllocationGrant {
 public:
  AllocationGrant(AllocationGrant&&) = default;
  AllocationGrant& operator=(AllocationGrant&&) = default;
  AllocationGrant(const AllocationGrant&) = delete;
  AllocationGrant& operator=(const AllocationGrant&) = delete;

  size_t bytes() const { return bytes_; }

 private:
  friend class Admitter;
  friend class DeviceTestAccess;
  explicit AllocationGrant(size_t bytes) : bytes_(bytes) {}

  size_t bytes_;
};

class Device {
 public:
  virtual ~Device() = default;

  // Canonical name, e.g. "cpu", "cpu:1", "cuda:0". Assigned at construction.
  virtual const std::string& name() const = 0;
  virtual DeviceKind kind() const = 0;
  virtual int index() const = 0;
  virtual DeviceProperties Properties() const = 0;

  // What this device computes; fixed for its life.
  virtual const Capabilities& capabilities() const = 0;
  // capabilities().Check(op, dtype, name()): OK, or FAILED_PRECONDITION
  // naming op, dtype and this device.
  absl::Status Supports(OpKind op, DType dtype) const {
    return capabilities().Check(op, dtype, name());
  }

  // The device's kernel-selection table: how it runs a kernel that can
  // run more than one way (`args`, a Conv2dArgs or Pool2dArgs: the kind,
  // its shape class) in `dtype` (internal; the capabilities say what a
  // device computes, this says how). kComposed: from the kernels every
  // device has (conv2d as im2col and a matrix product, pooling as im2col
  // and a reduction); kLibrary: as one kernel call of args' kind -- a
  // vendor library's (oneDNN's conv2d on the CPU, cuDNN's on a GPU) or,
  // where that measured faster, the device's own (the CPU's pooling). A
  // function of its arguments for the device's life. The default:
  // composed.
  enum class Implementation { kComposed, kLibrary };
  virtual Implementation Select(const KernelArgs& args, DType dtype) const {
    (void)args;
    (void)dtype;
    return Implementation::kComposed;
  }
  // The workspace bytes a kLibrary kernel of `args` needs in `dtype` (its
  // last input). INTERNAL when the library cannot run it after all.
  virtual absl::StatusOr<uint64_t> WorkspaceBytes(const KernelArgs& args,
                                                  DType dtype) const {
    (void)args;
    (void)dtype;
    return uint64_t{0};
  }
  // What runs the kLibrary kernels, for the log ("conv2d on oneDNN 2.6.3,
  // pooling direct"; "" when none do).
  virtual std::string KernelLibrary() const { return ""; }

  // Allocates grant.bytes() (0 allowed) of device memory. RESOURCE_EXHAUSTED
  // when the device itself is out of memory. Budgets are the Runtime's
  // business: the grant says they were checked (AllocationGrant).
  virtual absl::StatusOr<std::unique_ptr<Buffer>> Allocate(
      AllocationGrant grant) = 0;

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

  // Runs `call`, a planned call (see "Kernels" above): queues it on the
  // device's stream (a GPU) or runs it now (the CPU). INTERNAL for a
  // malformed call (CheckKernelCall); a kernel asked for an op its dtype does
  // not define, which the planner never asks, answers FAILED_PRECONDITION
  // (the CPU) or INTERNAL (a GPU's launch error); otherwise the kernel's own
  // error (OUT_OF_RANGE for a block copy outside its buffers, INTERNAL for a
  // failed launch).
  virtual absl::Status Launch(const KernelCall& call) = 0;

  // Waits until every queued kernel and copy on this device has finished.
  virtual absl::Status Synchronize() = 0;
};

// Bytes every Device implementation has allocated in this process, counted
// by each one's Allocate when it succeeds: tests check it against what
// admission let be allocated (core/runtime/admission.h), so an allocation that
// bypassed admission shows.
void NoteDeviceAllocation(uint64_t bytes);
uint64_t DeviceBytesAllocated();

}  // namespace tensord::core

#endif  // TENSORD_CORE_BASE_DEVICE_H_

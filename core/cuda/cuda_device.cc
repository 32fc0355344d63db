#include "core/cuda/cuda_device.h"

#include <cublas_v2.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <cstring>
#include <memory>
#include <random>
#include <string>
#include <utility>
#include <variant>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/synchronization/mutex.h"
#include "core/base/absl_compat.h"
#include "core/base/op_checks.h"
#include "core/base/status.h"
#include "core/cuda/binary.cuh"
#include "core/cuda/cast.cuh"
#include "core/cuda/copy_plan.h"
#include "core/cuda/cuda_status.h"
#include "core/cuda/cuda_supports.h"
#include "core/cuda/cudnn_kernels.h"
#include "core/cuda/fill.cuh"
#include "core/cuda/gemm_params.h"
#include "core/cuda/im2col.cuh"
#include "core/cuda/kernel_args.h"
#include "core/cuda/matmul_int.cuh"
#include "core/cuda/out_of_memory.h"
#include "core/cuda/permute.cuh"
#include "core/cuda/reduce.cuh"
#include "core/cuda/staging_pool.h"
#include "core/cuda/unary.cuh"
#include "core/cuda/where.cuh"

namespace tensord::core::cuda {
namespace {

constexpr size_t kCublasWorkspaceBytes = size_t{32} << 20;  // Hopper's advice
// cudaMallocAsync of 0 bytes gives no pointer; a zero-byte Buffer still
// owns a minimal allocation so data() is never null (as on the CPU).
constexpr size_t kMinAllocation = 256;

// The fill kinds mirror core's one to one (kernel_types.h); the op families
// are core's own enums.
static_assert(static_cast<int>(FillKind::kRandn) ==
                  static_cast<int>(FillSpec::Kind::kRandn) &&
              static_cast<int>(FillKind::kArange) ==
                  static_cast<int>(FillSpec::Kind::kArange));

// gemm_params.h's plain enums as cuBLAS's constants.
cublasOperation_t ToCublas(GemmOp op) {
  return op == GemmOp::kTranspose ? CUBLAS_OP_T : CUBLAS_OP_N;
}

cudaDataType_t ToCuda(GemmDataType type) {
  switch (type) {
    case GemmDataType::kF32:
      return CUDA_R_32F;
    case GemmDataType::kF64:
      return CUDA_R_64F;
    case GemmDataType::kF16:
      return CUDA_R_16F;
    case GemmDataType::kBF16:
      return CUDA_R_16BF;
  }
  return CUDA_R_32F;  // unreachable
}

cublasComputeType_t ToCublas(GemmComputeType compute) {
  switch (compute) {
    case GemmComputeType::k32F:
      return CUBLAS_COMPUTE_32F;
    case GemmComputeType::k32FFastTF32:
      return CUBLAS_COMPUTE_32F_FAST_TF32;
    case GemmComputeType::k64F:
      return CUBLAS_COMPUTE_64F;
  }
  return CUBLAS_COMPUTE_32F;  // unreachable
}

cublasMath_t ToCublas(BlasMathMode mode) {
  return mode == BlasMathMode::kTf32TensorOp ? CUBLAS_TF32_TENSOR_OP_MATH
                                             : CUBLAS_DEFAULT_MATH;
}

// The stream and ordinal a device's buffers are freed on. Shared by the
// device and its buffers, so a buffer that outlives its device (which the
// Runtime never lets happen, but nothing enforces) still frees safely.
struct StreamContext {
  int ordinal = 0;
  bool use_pool = true;
  cudaStream_t stream = nullptr;

  StreamContext() = default;
  StreamContext(const StreamContext&) = delete;
  StreamContext& operator=(const StreamContext&) = delete;
  ~StreamContext() {
    if (stream == nullptr) return;
    // Nothing to report a failure to in a destructor; the device is going.
    cudaSetDevice(ordinal);
    cudaStreamSynchronize(stream);
    cudaStreamDestroy(stream);
  }
};

class CudaBuffer final : public Buffer {
 public:
  CudaBuffer(std::shared_ptr<StreamContext> ctx, void* data, size_t size)
      : ctx_(std::move(ctx)), data_(data), size_(size) {}
  ~CudaBuffer() override {
    // Freed in stream order: kernels queued before this point that read the
    // buffer still see valid memory. A failure here cannot be reported and
    // only leaks the block.
    cudaSetDevice(ctx_->ordinal);
    if (ctx_->use_pool) {
      cudaFreeAsync(data_, ctx_->stream);
    } else {
      cudaFree(data_);  // synchronizes the device
    }
  }
  CudaBuffer(const CudaBuffer&) = delete;
  CudaBuffer& operator=(const CudaBuffer&) = delete;

  void* data() override { return data_; }
  const void* data() const override { return data_; }
  size_t size() const override { return size_; }

 private:
  std::shared_ptr<StreamContext> ctx_;
  void* data_;
  size_t size_;
};

class CudaDevice final : public Device {
 public:
  CudaDevice(int ordinal, const CudaDeviceOptions& options)
      : name_(absl::StrCat("cuda:", ordinal)),
        ordinal_(ordinal),
        options_(options),
        capabilities_(CudaCapabilities()),
        ctx_(std::make_shared<StreamContext>()),
        staging_(name_, options.staging_chunk_bytes) {
    ctx_->ordinal = ordinal;
  }

  ~CudaDevice() override {
    cudaSetDevice(ordinal_);
    if (ctx_->stream != nullptr) cudaStreamSynchronize(ctx_->stream);
    cudnn_.reset();  // before its stream goes with the last buffer
    if (cublas_ != nullptr) cublasDestroy(cublas_);
    if (workspace_ != nullptr) cudaFree(workspace_);
  }

  // Creates the stream, memory pool settings and cuBLAS handle.
  absl::Status Init() {
    RETURN_IF_ERROR(Check(cudaSetDevice(ordinal_), "cudaSetDevice"));
    cudaDeviceProp prop{};
    RETURN_IF_ERROR(Check(cudaGetDeviceProperties(&prop, ordinal_),
                          "cudaGetDeviceProperties"));
    model_ = prop.name;
    cc_major_ = prop.major;
    cc_minor_ = prop.minor;
    sm_count_ = prop.multiProcessorCount;
    total_memory_ = prop.totalGlobalMem;
    RETURN_IF_ERROR(
        Check(cudaStreamCreateWithFlags(&ctx_->stream, cudaStreamNonBlocking),
              "cudaStreamCreateWithFlags"));

    int pools = 0;
    RETURN_IF_ERROR(
        Check(cudaDeviceGetAttribute(&pools, cudaDevAttrMemoryPoolsSupported,
                                     ordinal_),
              "cudaDeviceGetAttribute(MemoryPoolsSupported)"));
    ctx_->use_pool = pools != 0;
    if (ctx_->use_pool) {
      RETURN_IF_ERROR(Check(cudaDeviceGetDefaultMemPool(&pool_, ordinal_),
                            "cudaDeviceGetDefaultMemPool"));
      // Keep freed memory in the pool instead of returning it to the
      // driver at every synchronization: the caching that makes
      // allocation cheap. Allocate() trims it when memory runs out.
      uint64_t threshold = UINT64_MAX;
      RETURN_IF_ERROR(
          Check(cudaMemPoolSetAttribute(pool_, cudaMemPoolAttrReleaseThreshold,
                                        &threshold),
                "cudaMemPoolSetAttribute(ReleaseThreshold)"));
    }

    RETURN_IF_ERROR(CheckBlas(cublasCreate(&cublas_), "cublasCreate"));
    RETURN_IF_ERROR(
        CheckBlas(cublasSetStream(cublas_, ctx_->stream), "cublasSetStream"));
    RETURN_IF_ERROR(CheckBlas(
        cublasSetMathMode(cublas_, ToCublas(MathModeFor(options_.allow_tf32))),
        "cublasSetMathMode"));
    RETURN_IF_ERROR(Check(cudaMalloc(&workspace_, kCublasWorkspaceBytes),
                          "cudaMalloc(cuBLAS workspace)"));
    RETURN_IF_ERROR(CheckBlas(
        cublasSetWorkspace(cublas_, workspace_, kCublasWorkspaceBytes),
        "cublasSetWorkspace"));
    if (!options_.kernel_libraries) {
      kernel_library_note_ = "off (--kernel-libraries=false)";
      return absl::OkStatus();
    }
    // A machine without cuDNN still serves: conv2d and pooling composed.
    absl::StatusOr<std::unique_ptr<CudnnKernels>> cudnn = CudnnKernels::Create(
        ctx_->stream, name_, cc_major_, options_.allow_tf32);
    if (cudnn.ok()) {
      cudnn_ = std::move(*cudnn);
      kernel_library_note_ =
          absl::StrCat("conv2d and pooling on ", cudnn_->version());
    } else {
      kernel_library_note_ = std::string(cudnn.status().message());
    }
    return absl::OkStatus();
  }

  const std::string& kernel_library_note() const {
    return kernel_library_note_;
  }

  // Records that kernels of this device may read memory of `peer` directly
  // (peer access enabled, pool access granted).
  void SetPeerAccess(int peer) {
    if (peer >= static_cast<int>(peer_access_.size())) {
      peer_access_.resize(peer + 1, false);
    }
    peer_access_[peer] = true;
  }
  int ordinal() const { return ordinal_; }
  cudaMemPool_t pool() const { return pool_; }
  bool use_pool() const { return ctx_->use_pool; }
  cudaStream_t stream() const { return ctx_->stream; }

  const std::string& name() const override { return name_; }
  DeviceKind kind() const override { return DeviceKind::kCuda; }
  int index() const override { return ordinal_; }

  DeviceProperties Properties() const override {
    DeviceProperties p;
    p.model = model_;
    p.total_memory = total_memory_;
    p.compute_capability_major = cc_major_;
    p.compute_capability_minor = cc_minor_;
    p.multiprocessor_count = sm_count_;
    p.kernel_library = KernelLibrary();
    if (cudnn_ != nullptr) {
      const LibraryCacheCounts counts = cudnn_->counts();
      p.library_prepared = counts.made;
      p.library_reused = counts.reused;
      p.library_evicted = counts.evicted;
    }
    size_t free = 0, total = 0;
    if (cudaSetDevice(ordinal_) == cudaSuccess &&
        cudaMemGetInfo(&free, &total) == cudaSuccess) {
      p.free_memory = free;
      p.total_memory = total;
    } else {
      cudaGetLastError();  // reported as 0 free; not worth failing a listing
    }
    return p;
  }

  const Capabilities& capabilities() const override { return capabilities_; }

  // The kernel-selection table: conv2d and pooling on cuDNN where it
  // computes them as PyTorch does (CudnnKernels::Runs); everything else,
  // and everything without cuDNN, composed.
  Implementation Select(const KernelArgs& args, DType dtype) const override {
    if (cudnn_ == nullptr || !IsLibraryKind(args) ||
        cudaSetDevice(ordinal_) != cudaSuccess) {
      return Implementation::kComposed;
    }
    return cudnn_->Runs(args, dtype) ? Implementation::kLibrary
                                     : Implementation::kComposed;
  }
  absl::StatusOr<uint64_t> WorkspaceBytes(const KernelArgs& args,
                                          DType dtype) const override {
    if (cudnn_ == nullptr || !IsLibraryKind(args)) return uint64_t{0};
    RETURN_IF_ERROR(Check(cudaSetDevice(ordinal_), "cudaSetDevice"));
    return cudnn_->WorkspaceBytes(args, dtype);
  }
  std::string KernelLibrary() const override {
    return cudnn_ == nullptr
               ? ""
               : absl::StrCat("conv2d and pooling on ", cudnn_->version());
  }

  absl::StatusOr<std::unique_ptr<Buffer>> Allocate(
      AllocationGrant grant) override {
    const size_t bytes = grant.bytes();
    if (bytes > total_memory_) {  // cannot fit, whatever the driver says
      return absl::ResourceExhaustedError(
          OutOfMemoryMessage(name_, bytes, MemoryFigures()));
    }
    RETURN_IF_ERROR(Check(cudaSetDevice(ordinal_), "cudaSetDevice"));
    const size_t n = std::max(bytes, kMinAllocation);
    void* p = nullptr;
    cudaError_t err = RawAllocate(&p, n);
    if (err == cudaErrorMemoryAllocation) {
      cudaGetLastError();  // not sticky; clear it for this thread
      // Memory freed in stream order becomes reusable once the stream gets
      // there, and the pool may cache blocks of the wrong size: wait, give
      // the cache back to the driver and try once more.
      cudaStreamSynchronize(ctx_->stream);
      if (ctx_->use_pool) cudaMemPoolTrimTo(pool_, 0);
      err = RawAllocate(&p, n);
    }
    if (err == cudaErrorMemoryAllocation) {
      cudaGetLastError();
      return absl::ResourceExhaustedError(
          OutOfMemoryMessage(name_, bytes, MemoryFigures()));
    }
    RETURN_IF_ERROR(Check(err, "cudaMallocAsync"));
    NoteDeviceAllocation(bytes);
    return std::unique_ptr<Buffer>(new CudaBuffer(ctx_, p, bytes));
  }

  absl::Status CopyFromHost(const void* src, Buffer& dst, size_t offset,
                            size_t bytes) override {
    RETURN_IF_ERROR(CheckRange(dst, offset, bytes));
    if (bytes == 0) return absl::OkStatus();
    RETURN_IF_ERROR(Check(cudaSetDevice(ordinal_), "cudaSetDevice"));
    return staging_.Upload(static_cast<const char*>(src),
                           static_cast<char*>(dst.data()) + offset, bytes,
                           ctx_->stream);
  }

  absl::Status CopyToHost(const Buffer& src, size_t offset, void* dst,
                          size_t bytes) override {
    RETURN_IF_ERROR(CheckRange(src, offset, bytes));
    if (bytes == 0) return absl::OkStatus();
    RETURN_IF_ERROR(Check(cudaSetDevice(ordinal_), "cudaSetDevice"));
    return staging_.Download(static_cast<const char*>(src.data()) + offset,
                             static_cast<char*>(dst), bytes, ctx_->stream);
  }

  absl::Status CopyFromDevice(Device& src_device, const Buffer& src,
                              Buffer& dst, size_t bytes) override {
    RETURN_IF_ERROR(CheckRange(dst, 0, bytes));
    RETURN_IF_ERROR(CheckRange(src, 0, bytes));
    if (bytes == 0) return absl::OkStatus();
    auto* peer = dynamic_cast<CudaDevice*>(&src_device);
    if (src_device.kind() == DeviceKind::kCuda && peer == nullptr) {
      return absl::InternalError(
          absl::StrCat(name_, ": source device ", src_device.name(),
                       " says it is CUDA but is not a CudaDevice"));
    }
    const DeviceCopyRoute route = ChooseDeviceCopyRoute(
        src_device.kind(), peer == this,
        peer != nullptr && HasPeerAccess(peer->ordinal()));
    if (route == DeviceCopyRoute::kFromHost) {
      // Any non-CUDA device keeps its tensors in host memory (Device's
      // contract for the CPU), and runs its kernels synchronously.
      return CopyFromHost(src.data(), dst, 0, bytes);
    }
    RETURN_IF_ERROR(Check(cudaSetDevice(ordinal_), "cudaSetDevice"));
    switch (route) {
      case DeviceCopyRoute::kFromHost:
        break;  // above
      case DeviceCopyRoute::kSameDevice:
        return Check(cudaMemcpyAsync(dst.data(), src.data(), bytes,
                                     cudaMemcpyDeviceToDevice, ctx_->stream),
                     "cudaMemcpyAsync(device to device)");
      case DeviceCopyRoute::kPeer:
        return PeerCopy(*peer, src, dst, bytes);
      case DeviceCopyRoute::kStaged:
        return StagedDeviceCopy(*peer, src, dst, bytes);
    }
    return absl::InternalError("unknown device copy route");  // unreachable
  }

  absl::Status Launch(const KernelCall& call) override {
    RETURN_IF_ERROR(CheckKernelCall(call, name_));
    RETURN_IF_ERROR(Check(cudaSetDevice(ordinal_), "cudaSetDevice"));
    return std::visit([&](const auto& args) { return Run(args, call); },
                      call.args);
  }

  absl::Status Synchronize() override {
    RETURN_IF_ERROR(Check(cudaSetDevice(ordinal_), "cudaSetDevice"));
    return Check(cudaStreamSynchronize(ctx_->stream), "cudaStreamSynchronize");
  }

 private:
  // --- Kernels -----------------------------------------------------------
  // One per kernel kind: unpack the planned call (Launch checked its form;
  // nothing is re-validated) and queue the kernel on the stream. The
  // arguments the kernels index with are host logic (kernel_args.h).

  absl::Status Run(const FillSpec& spec, const KernelCall& call) {
    FillParams p;
    p.kind = static_cast<FillKind>(static_cast<int>(spec.kind));
    p.value = spec.value;
    p.start = spec.start;
    p.step = spec.step;
    p.low = spec.low;
    p.high = spec.high;
    p.mean = spec.mean;
    p.stddev = spec.stddev;
    if (spec.seed.has_value()) {
      p.seed = *spec.seed;
    } else {
      std::random_device rd;
      p.seed = (static_cast<uint64_t>(rd()) << 32) ^ rd();
    }
    const TensorRef& out = call.out;
    return Check(LaunchFill(p, ToElem(out.dtype), out.buffer->data(),
                            out.shape.NumElements(), ctx_->stream),
                 "fill kernel");
  }

  absl::Status Run(const CastArgs&, const KernelCall& call) {
    const TensorRef& in = call.inputs[0];
    const TensorRef& out = call.out;
    return Check(
        LaunchCast(ToElem(in.dtype), in.buffer->data(), ToElem(out.dtype),
                   out.buffer->data(), in.shape.NumElements(), ctx_->stream),
        "cast kernel");
  }

  absl::Status Run(const BinaryArgs& args, const KernelCall& call) {
    const TensorRef& a = call.inputs[0];
    const TensorRef& b = call.inputs[1];
    const TensorRef& out = call.out;
    ASSIGN_OR_RETURN(const BinaryIndex index,
                     MakeBinaryIndex(a.shape, b.shape, out.shape));
    return Check(LaunchBinary(args.op, ToElem(a.dtype), a.buffer->data(),
                              b.buffer->data(), out.buffer->data(),
                              out.shape.NumElements(), index.contiguous,
                              index.index, ctx_->stream),
                 "binary kernel");
  }

  absl::Status Run(const UnaryArgs& args, const KernelCall& call) {
    const TensorRef& in = call.inputs[0];
    return Check(LaunchUnary(args.op, args.alpha, args.beta, ToElem(in.dtype),
                             in.buffer->data(), call.out.buffer->data(),
                             in.shape.NumElements(), ctx_->stream),
                 "unary kernel");
  }

  absl::Status Run(const ReduceArgs& args, const KernelCall& call) {
    const TensorRef& in = call.inputs[0];
    const ReduceDims& d = args.dims;
    return Check(
        LaunchReduce(args.op, ToElem(in.dtype), d.outer, d.n, d.inner,
                     in.buffer->data(), call.out.buffer->data(), ctx_->stream),
        "reduce kernel");
  }

  absl::Status Run(const MatMulDims& dims, const KernelCall& call) {
    const TensorRef& a = call.inputs[0];
    const TensorRef& b = call.inputs[1];
    const TensorRef& out = call.out;
    switch (ChooseMatMulPath(dims, out.dtype)) {
      case MatMulPath::kNothing:
        return absl::OkStatus();
      case MatMulPath::kZeroFill: {
        const size_t elem = DTypeSize(out.dtype);
        for (int64_t p = 0; p < dims.batch; ++p) {
          RETURN_IF_ERROR(
              Check(cudaMemsetAsync(static_cast<char*>(out.buffer->data()) +
                                        p * dims.out_batch_stride * elem,
                                    0, dims.m * dims.n * elem, ctx_->stream),
                    "cudaMemsetAsync"));
        }
        return absl::OkStatus();
      }
      case MatMulPath::kIntegerKernel: {
        // Bool has no matmul (the planner never asks); the kernel's
        // cudaErrorInvalidValue below means a grid too large.
        if (!IsIntegral(out.dtype)) {
          return NotImplementedError("matmul", out.dtype, name_);
        }
        const cudaError_t err = LaunchIntMatMul(
            ToElem(out.dtype), dims.batch, dims.m, dims.n, dims.k,
            a.buffer->data(), dims.a_batch_stride, b.buffer->data(),
            dims.b_batch_stride, out.buffer->data(), dims.out_batch_stride,
            ctx_->stream);
        if (err == cudaErrorInvalidValue) {
          return absl::InvalidArgumentError(absl::StrCat(
              "matmul: ", dims.m, "x", dims.n,
              " output is too large for the integer matmul kernel"));
        }
        return Check(err, "integer matmul kernel");
      }
      case MatMulPath::kGemm:
        return BlasMatMul(dims, out.dtype, a.buffer->data(), b.buffer->data(),
                          out.buffer->data());
    }
    return absl::InternalError("unknown matmul path");  // unreachable
  }

  absl::Status Run(const PermuteArgs& args, const KernelCall& call) {
    const TensorRef& in = call.inputs[0];
    if (in.shape.NumElements() == 0) return absl::OkStatus();
    ASSIGN_OR_RETURN(const BroadcastIndex index,
                     MakePermuteIndex(in.shape, args.perm));
    return Check(LaunchPermute(DTypeSize(in.dtype), in.buffer->data(),
                               call.out.buffer->data(), in.shape.NumElements(),
                               index, ctx_->stream),
                 "permute kernel");
  }

  absl::Status Run(const BlockCopy& c, const KernelCall& call) {
    const Buffer& src = *call.inputs[0].buffer;
    Buffer& dst = *call.out.buffer;
    ASSIGN_OR_RETURN(const BlockCopyMethod method, PlanBlockCopy(c, src, dst));
    if (method == BlockCopyMethod::kNothing) return absl::OkStatus();
    const char* s = static_cast<const char*>(src.data()) + c.src_offset;
    char* d = static_cast<char*>(dst.data()) + c.dst_offset;
    switch (method) {
      case BlockCopyMethod::kNothing:
        return absl::OkStatus();  // above
      case BlockCopyMethod::kMemcpy:
        return Check(cudaMemcpyAsync(d, s, c.row_bytes,
                                     cudaMemcpyDeviceToDevice, ctx_->stream),
                     "cudaMemcpyAsync(device to device)");
      case BlockCopyMethod::kMemcpy2D:
        return Check(
            cudaMemcpy2DAsync(d, c.dst_stride, s, c.src_stride, c.row_bytes,
                              c.rows, cudaMemcpyDeviceToDevice, ctx_->stream),
            "cudaMemcpy2DAsync");
      case BlockCopyMethod::kKernel:
        return Check(LaunchCopyBlocks(s, c.src_stride, d, c.dst_stride, c.rows,
                                      c.row_bytes, ctx_->stream),
                     "block copy kernel");
    }
    return absl::InternalError("unknown block copy method");  // unreachable
  }

  absl::Status Run(const WhereArgs&, const KernelCall& call) {
    const TensorRef& c = call.inputs[0];
    const TensorRef& x = call.inputs[1];
    const TensorRef& y = call.inputs[2];
    ASSIGN_OR_RETURN(const WhereIndex index,
                     MakeWhereIndex(c.shape, x.shape, y.shape, call.out.shape));
    return Check(
        LaunchWhere(ToElem(x.dtype), c.buffer->data(), x.buffer->data(),
                    y.buffer->data(), call.out.buffer->data(),
                    call.out.shape.NumElements(), index, ctx_->stream),
        "where kernel");
  }

  absl::Status Run(const Col2ImArgs& args, const KernelCall& call) {
    return Check(LaunchCol2Im(ToElem(call.out.dtype), args.dims,
                              call.inputs[0].buffer->data(),
                              call.out.buffer->data(), ctx_->stream),
                 "col2im kernel");
  }

  // conv2d and pooling as one cuDNN call (where Select said kLibrary).
  absl::Status Run(const Conv2dArgs&, const KernelCall& call) {
    return RunLibrary(call);
  }
  absl::Status Run(const Pool2dArgs&, const KernelCall& call) {
    return RunLibrary(call);
  }
  // batch norm is composed on GPUs (Select never says kLibrary for it).
  absl::Status Run(const BatchNormArgs&, const KernelCall& call) {
    return absl::InternalError(
        absl::StrCat(name_, ": ", ToAbsl(KernelKindName(call.kind())),
                     " kernel: this device composes it"));
  }
  absl::Status RunLibrary(const KernelCall& call) {
    if (cudnn_ == nullptr) {
      return absl::InternalError(absl::StrCat(
          name_, ": ", ToAbsl(KernelKindName(call.kind())),
          " kernel: this device composes it (", kernel_library_note_, ")"));
    }
    return cudnn_->Run(call);
  }

  absl::Status Run(const Im2ColArgs& args, const KernelCall& call) {
    const TensorRef& in = call.inputs[0];
    return Check(
        LaunchIm2Col(DTypeSize(in.dtype), args.dims, args.pad_bits,
                     in.buffer->data(), call.out.buffer->data(), ctx_->stream),
        "im2col kernel");
  }

  absl::Status Check(cudaError_t err, const char* what) const {
    return CudaStatus(err, name_, what);
  }
  absl::Status CheckBlas(cublasStatus_t st, const char* what) const {
    return CublasStatus(st, name_, what);
  }

  cudaError_t RawAllocate(void** p, size_t n) {
    return ctx_->use_pool ? cudaMallocAsync(p, n, ctx_->stream)
                          : cudaMalloc(p, n);
  }

  // The figures of an out-of-memory message, now.
  CudaMemoryFigures MemoryFigures() const {
    CudaMemoryFigures m;
    if (ctx_->use_pool) {
      cudaMemPoolGetAttribute(pool_, cudaMemPoolAttrUsedMemCurrent, &m.used);
      cudaMemPoolGetAttribute(pool_, cudaMemPoolAttrReservedMemCurrent,
                              &m.reserved);
    }
    size_t free = 0, total = 0;
    if (cudaSetDevice(ordinal_) != cudaSuccess ||
        cudaMemGetInfo(&free, &total) != cudaSuccess) {
      cudaGetLastError();  // the message goes out with zeros
    }
    m.free = free;
    m.total = total;
    return m;
  }

  bool HasPeerAccess(int peer) const {
    return peer < static_cast<int>(peer_access_.size()) && peer_access_[peer];
  }

  // Peer copy on this device's stream, ordered after the source device's
  // queued work, and the source stream ordered after the copy (so the
  // source buffer, freed in its stream's order, outlives the read).
  absl::Status PeerCopy(CudaDevice& peer, const Buffer& src, Buffer& dst,
                        size_t bytes) {
    cudaEvent_t src_ready = nullptr, copied = nullptr;
    absl::Status status;
    auto destroy = [&] {
      // Destroying a recorded event is safe: its resources go once it
      // completes.
      if (src_ready != nullptr) cudaEventDestroy(src_ready);
      if (copied != nullptr) cudaEventDestroy(copied);
    };
    status = Check(cudaEventCreateWithFlags(&src_ready, cudaEventDisableTiming),
                   "cudaEventCreateWithFlags");
    if (status.ok()) {
      status = Check(cudaEventCreateWithFlags(&copied, cudaEventDisableTiming),
                     "cudaEventCreateWithFlags");
    }
    if (status.ok()) {
      status = Check(cudaSetDevice(peer.ordinal()), "cudaSetDevice");
    }
    if (status.ok()) {
      status = Check(cudaEventRecord(src_ready, peer.stream()),
                     "cudaEventRecord(source stream)");
    }
    if (status.ok()) status = Check(cudaSetDevice(ordinal_), "cudaSetDevice");
    if (status.ok()) {
      status = Check(cudaStreamWaitEvent(ctx_->stream, src_ready, 0),
                     "cudaStreamWaitEvent");
    }
    if (status.ok()) {
      status = Check(cudaMemcpyPeerAsync(dst.data(), ordinal_, src.data(),
                                         peer.ordinal(), bytes, ctx_->stream),
                     "cudaMemcpyPeerAsync");
    }
    if (status.ok()) {
      status = Check(cudaEventRecord(copied, ctx_->stream), "cudaEventRecord");
    }
    if (status.ok()) {
      status = Check(cudaStreamWaitEvent(peer.stream(), copied, 0),
                     "cudaStreamWaitEvent(source stream)");
    }
    destroy();
    cudaSetDevice(ordinal_);
    return status;
  }

  // No peer access: through pinned host memory, chunk by chunk (the
  // source's download waits for its queued writers).
  absl::Status StagedDeviceCopy(CudaDevice& peer, const Buffer& src,
                                Buffer& dst, size_t bytes) {
    const size_t chunk = staging_.chunk_bytes();
    for (size_t off = 0; off < bytes; off += chunk) {
      const size_t n = std::min(chunk, bytes - off);
      ASSIGN_OR_RETURN(StagingBuffer * s, staging_.Acquire());
      absl::Status st = peer.CopyToHost(src, off, s->host, n);
      if (st.ok()) st = Check(cudaSetDevice(ordinal_), "cudaSetDevice");
      if (st.ok()) {
        st =
            Check(cudaMemcpyAsync(static_cast<char*>(dst.data()) + off, s->host,
                                  n, cudaMemcpyHostToDevice, ctx_->stream),
                  "cudaMemcpyAsync(host to device)");
      }
      if (st.ok())
        st = Check(cudaEventRecord(s->done, ctx_->stream), "cudaEventRecord");
      staging_.Release(s);
      RETURN_IF_ERROR(st);
    }
    return absl::OkStatus();
  }

  // --- cuBLAS ----------------------------------------------------------------

  // The parameters (row-major to column-major, types, compute type) are
  // PlanGemm's, tested without a GPU; this only passes them on.
  absl::Status BlasMatMul(const MatMulDims& d, DType dtype, const void* a,
                          const void* b, void* out) {
    ASSIGN_OR_RETURN(const GemmParams p,
                     PlanGemm(d, dtype, options_.allow_tf32, name_));
    const float alpha_f = static_cast<float>(p.alpha),
                beta_f = static_cast<float>(p.beta);
    const double alpha_d = p.alpha, beta_d = p.beta;
    const bool doubles = p.scalar_type == GemmScalarType::kDouble;
    const void* alpha = doubles ? static_cast<const void*>(&alpha_d) : &alpha_f;
    const void* beta = doubles ? static_cast<const void*>(&beta_d) : &beta_f;
    auto operand = [&](GemmOperand which) {
      return which == GemmOperand::kA ? a : b;
    };
    const cudaDataType_t type = ToCuda(p.data_type);
    absl::MutexLock lock(&cublas_mu_);  // a handle is not thread-safe
    return CheckBlas(
        cublasGemmStridedBatchedEx(
            cublas_, ToCublas(p.trans_a), ToCublas(p.trans_b), p.m, p.n, p.k,
            alpha, operand(p.a_is), type, p.lda, p.stride_a, operand(p.b_is),
            type, p.ldb, p.stride_b, beta, out, type, p.ldc, p.stride_c,
            p.batch_count, ToCublas(p.compute_type), CUBLAS_GEMM_DEFAULT),
        "cublasGemmStridedBatchedEx");
  }

  const std::string name_;
  const int ordinal_;
  const CudaDeviceOptions options_;
  const Capabilities capabilities_;
  std::shared_ptr<StreamContext> ctx_;
  std::string model_;
  int cc_major_ = 0, cc_minor_ = 0, sm_count_ = 0;
  uint64_t total_memory_ = 0;
  cudaMemPool_t pool_ = nullptr;
  std::vector<bool> peer_access_;  // set before the device is shared

  absl::Mutex cublas_mu_;
  cublasHandle_t cublas_ = nullptr;
  void* workspace_ = nullptr;

  std::unique_ptr<CudnnKernels> cudnn_;  // null: conv2d, pooling composed
  std::string kernel_library_note_;

  StagingPool staging_;  // freed after the destructor synchronized
};

// Lets `a`'s kernels and copies read and write `b`'s memory, including
// memory from b's stream-ordered pool. Best effort: on failure the pair
// falls back to staged copies.
bool EnablePeer(CudaDevice& a, CudaDevice& b) {
  int can = 0;
  if (cudaDeviceCanAccessPeer(&can, a.ordinal(), b.ordinal()) != cudaSuccess ||
      can == 0) {
    cudaGetLastError();
    return false;
  }
  if (cudaSetDevice(a.ordinal()) != cudaSuccess) return false;
  const cudaError_t e = cudaDeviceEnablePeerAccess(b.ordinal(), 0);
  if (e != cudaSuccess && e != cudaErrorPeerAccessAlreadyEnabled) {
    cudaGetLastError();
    return false;
  }
  cudaGetLastError();  // clears cudaErrorPeerAccessAlreadyEnabled
  if (b.use_pool()) {
    cudaMemAccessDesc desc{};
    desc.location.type = cudaMemLocationTypeDevice;
    desc.location.id = a.ordinal();
    desc.flags = cudaMemAccessFlagsProtReadWrite;
    if (cudaMemPoolSetAccess(b.pool(), &desc, 1) != cudaSuccess) {
      cudaGetLastError();
      return false;
    }
  }
  return true;
}

}  // namespace

absl::StatusOr<CudaDevices> CreateCudaDevices(
    const CudaDeviceOptions& options) {
  CudaDevices found;
  std::vector<std::unique_ptr<Device>>& devices = found.devices;
  int count = 0;
  if (cudaGetDeviceCount(&count) != cudaSuccess) {
    cudaGetLastError();  // no driver or no GPU: no devices, not an error
    return found;
  }
  std::vector<CudaDevice*> cuda;
  for (int i = 0; i < count; ++i) {
    auto device = std::make_unique<CudaDevice>(i, options);
    RETURN_IF_ERROR(device->Init());
    if (i == 0) found.kernel_library_note = device->kernel_library_note();
    cuda.push_back(device.get());
    devices.push_back(std::move(device));
  }
  for (CudaDevice* a : cuda) {
    for (CudaDevice* b : cuda) {
      // a copies from b on a's stream: a needs access to b's memory.
      if (a != b && EnablePeer(*a, *b)) a->SetPeerAccess(b->ordinal());
    }
  }
  return found;
}

}  // namespace tensord::core::cuda

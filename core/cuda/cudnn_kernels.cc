#include "core/cuda/cudnn_kernels.h"

#include <cuda_runtime.h>
#include <cudnn.h>

#include <string_view>
#include <utility>
#include <variant>

#include "absl/base/thread_annotations.h"
#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "core/base/absl_compat.h"
#include "core/base/status.h"
#include "core/cuda/cudnn_params.h"

namespace tensord::core::cuda {
namespace {

// The cache's bound: a network has a few dozen window shapes, each with a
// few passes (as the CPU's).
constexpr size_t kMaxPreparedCalls = 256;
// The most workspace a convolution algorithm may want: the first of
// cuDNN's ranking within it runs.
constexpr size_t kMaxConvWorkspace = size_t{1} << 30;

absl::Status CudnnStatus(cudnnStatus_t st, std::string_view device,
                         std::string_view what) {
  if (st == CUDNN_STATUS_SUCCESS) return absl::OkStatus();
  const std::string message = absl::StrCat(
      ToAbsl(device), ": ", ToAbsl(what), " failed: ", cudnnGetErrorString(st));
  if (st == CUDNN_STATUS_INTERNAL_ERROR_DEVICE_ALLOCATION_FAILED ||
      st == CUDNN_STATUS_INTERNAL_ERROR_HOST_ALLOCATION_FAILED) {
    return absl::ResourceExhaustedError(message);
  }
  return absl::InternalError(message);
}

// cudnn_params.h's plain enums as cuDNN's constants.
cudnnDataType_t ToCudnn(CudnnDataType type) {
  switch (type) {
    case CudnnDataType::kDouble:
      return CUDNN_DATA_DOUBLE;
    case CudnnDataType::kHalf:
      return CUDNN_DATA_HALF;
    case CudnnDataType::kBFloat16:
      return CUDNN_DATA_BFLOAT16;
    case CudnnDataType::kFloat:
      break;
  }
  return CUDNN_DATA_FLOAT;
}

cudnnMathType_t ToCudnn(CudnnMath math) {
  switch (math) {
    case CudnnMath::kTensorOp:
      return CUDNN_TENSOR_OP_MATH;
    case CudnnMath::kFma:
      return CUDNN_FMA_MATH;
    case CudnnMath::kDefault:
      break;
  }
  return CUDNN_DEFAULT_MATH;
}

cudnnPoolingMode_t ToCudnn(CudnnPoolMode mode) {
  switch (mode) {
    case CudnnPoolMode::kAverageIncludePadding:
      return CUDNN_POOLING_AVERAGE_COUNT_INCLUDE_PADDING;
    case CudnnPoolMode::kAverageExcludePadding:
      return CUDNN_POOLING_AVERAGE_COUNT_EXCLUDE_PADDING;
    case CudnnPoolMode::kMax:
      break;
  }
  return CUDNN_POOLING_MAX_DETERMINISTIC;
}

// A cuDNN descriptor, destroyed with its owner.
template <typename T, cudnnStatus_t (*Destroy)(T)>
class Descriptor {
 public:
  Descriptor() = default;
  Descriptor(Descriptor&& other) noexcept : d_(other.d_) { other.d_ = nullptr; }
  Descriptor& operator=(Descriptor&&) = delete;
  ~Descriptor() {
    if (d_ != nullptr) Destroy(d_);
  }

  T get() const { return d_; }
  T* receive() { return &d_; }

 private:
  T d_ = nullptr;
};
using TensorDesc =
    Descriptor<cudnnTensorDescriptor_t, cudnnDestroyTensorDescriptor>;
using FilterDesc =
    Descriptor<cudnnFilterDescriptor_t, cudnnDestroyFilterDescriptor>;
using ConvDesc =
    Descriptor<cudnnConvolutionDescriptor_t, cudnnDestroyConvolutionDescriptor>;
using PoolDesc =
    Descriptor<cudnnPoolingDescriptor_t, cudnnDestroyPoolingDescriptor>;

// A convolution pass, described and its algorithm chosen.
struct PreparedConv {
  CudnnConvParams params;
  TensorDesc x, y, bias;  // bias: [1, out_channels, 1, 1] when params.bias
  FilterDesc w;
  ConvDesc conv;
  int algorithm = 0;  // the pass's cudnnConvolution*Algo_t
  size_t workspace = 0;
};

// A pooling pass, described.
struct PreparedPool {
  CudnnPoolParams params;
  TensorDesc x, y;
  PoolDesc pool;
};

using Prepared = std::variant<PreparedConv, PreparedPool>;

// The first algorithm of cuDNN's ranking that runs, within the workspace
// bound, in the math the plan allows (exact float32: FMA only).
template <typename Perf>
absl::StatusOr<const Perf*> Choose(const Perf* perf, int count, CudnnMath math,
                                   std::string_view device,
                                   std::string_view what) {
  for (int i = 0; i < count; ++i) {
    if (perf[i].status != CUDNN_STATUS_SUCCESS) continue;
    if (perf[i].memory > kMaxConvWorkspace) continue;
    if (math == CudnnMath::kFma && perf[i].mathType != CUDNN_FMA_MATH) {
      continue;
    }
    return &perf[i];
  }
  return absl::InternalError(absl::StrCat(
      ToAbsl(device), ": cuDNN offers no ", ToAbsl(what), " algorithm within ",
      kMaxConvWorkspace >> 20, " MiB of workspace"));
}

class CudnnKernelsImpl final : public CudnnKernels {
 public:
  CudnnKernelsImpl(cudnnHandle_t handle, std::string device, int cc_major,
                   bool allow_tf32)
      : handle_(handle),
        device_(std::move(device)),
        cc_major_(cc_major),
        allow_tf32_(allow_tf32),
        cache_(kMaxPreparedCalls) {
    const size_t v = cudnnGetVersion();  // major * 10000 + minor * 100 + patch
    version_ =
        absl::StrCat("cuDNN ", v / 10000, ".", v / 100 % 100, ".", v % 100);
  }
  ~CudnnKernelsImpl() override { cudnnDestroy(handle_); }

  const std::string& version() const override { return version_; }

  bool Runs(const KernelArgs& args, DType dtype) override {
    if (!CudnnComputes(args, dtype, cc_major_)) return false;
    if (const auto* conv = std::get_if<Conv2dArgs>(&args)) {
      for (ConvPass pass : {ConvPass::kForward, ConvPass::kBackwardData,
                            ConvPass::kBackwardWeights}) {
        Conv2dArgs each = *conv;
        each.pass = pass;
        each.bias = pass == ConvPass::kForward && conv->bias;
        if (!Get(each, dtype)->ok()) return false;
      }
      return true;
    }
    return Get(args, dtype)->ok();
  }

  absl::StatusOr<uint64_t> WorkspaceBytes(const KernelArgs& args,
                                          DType dtype) override {
    Entry hold = Get(args, dtype);
    ASSIGN_OR_RETURN(const Prepared* p, Unpack(hold));
    return Workspace(*p);
  }

  absl::Status Run(const KernelCall& call) override {
    Entry hold = Get(call.args, call.out.dtype);
    ASSIGN_OR_RETURN(const Prepared* p, Unpack(hold));
    const TensorRef& workspace_ref = call.inputs.back();
    const uint64_t given = workspace_ref.shape.NumElements();
    if (given < Workspace(*p)) {
      return absl::InternalError(absl::StrCat(
          device_, ": ", ToAbsl(KernelKindName(call.kind())), " given ", given,
          " bytes of workspace for the ", Workspace(*p), " it needs"));
    }
    const void* in0 = call.inputs[0].buffer->data();
    const void* in1 = call.inputs[1].buffer->data();
    void* workspace = workspace_ref.buffer->data();
    void* out = call.out.buffer->data();
    absl::MutexLock lock(&mu_);  // a handle is not thread-safe
    if (const auto* conv = std::get_if<PreparedConv>(p)) {
      // conv2d's third input: a forward's bias (unread otherwise).
      return RunConv(*conv, in0, in1, call.inputs[2].buffer->data(), workspace,
                     given, out);
    }
    return RunPool(std::get<PreparedPool>(*p), in0, workspace, out);
  }

  LibraryCacheCounts counts() const override { return cache_.counts(); }

 private:
  using Cache = LibraryCache<Prepared>;
  using Entry = Cache::Entry;

  Entry Get(const KernelArgs& args, DType dtype) {
    return cache_.Get(LibraryKeyOf(args, dtype, 0),
                      [&] { return Prepare(args, dtype); });
  }

  static absl::StatusOr<const Prepared*> Unpack(const Entry& hold) {
    if (!hold->ok()) return hold->status();
    return &**hold;
  }

  static uint64_t Workspace(const Prepared& p) {
    if (const auto* conv = std::get_if<PreparedConv>(&p)) {
      return conv->workspace;
    }
    return std::get<PreparedPool>(p).params.workspace_bytes;
  }

  absl::Status Check(cudnnStatus_t st, std::string_view what) const {
    return CudnnStatus(st, device_, what);
  }

  absl::Status MakeTensor(TensorDesc& d, const CudnnDims& dims,
                          CudnnDataType type) const {
    RETURN_IF_ERROR(Check(cudnnCreateTensorDescriptor(d.receive()),
                          "cudnnCreateTensorDescriptor"));
    return Check(
        cudnnSetTensor4dDescriptor(d.get(), CUDNN_TENSOR_NCHW, ToCudnn(type),
                                   dims.n, dims.c, dims.h, dims.w),
        "cudnnSetTensor4dDescriptor");
  }

  absl::StatusOr<Prepared> Prepare(const KernelArgs& args, DType dtype) {
    if (const auto* conv = std::get_if<Conv2dArgs>(&args)) {
      ASSIGN_OR_RETURN(CudnnConvParams params,
                       PlanCudnnConv(*conv, dtype, allow_tf32_));
      return PrepareConv(params);
    }
    if (const auto* pool = std::get_if<Pool2dArgs>(&args)) {
      ASSIGN_OR_RETURN(CudnnPoolParams params, PlanCudnnPool(*pool, dtype));
      return PreparePool(params);
    }
    return absl::InternalError(absl::StrCat(
        device_, ": no cuDNN kernel for kernel kind ", args.index()));
  }

  // The first algorithm of cuDNN's ranking `perf` that runs (Choose),
  // adopted for `c`: its math type set on the convolution, its id kept.
  template <typename Perf>
  absl::StatusOr<decltype(Perf::algo)> Adopt(const Perf* perf, int count,
                                             std::string_view what,
                                             PreparedConv& c) const {
    ASSIGN_OR_RETURN(const Perf* best,
                     Choose(perf, count, c.params.math, device_, what));
    RETURN_IF_ERROR(
        Check(cudnnSetConvolutionMathType(c.conv.get(), best->mathType),
              "cudnnSetConvolutionMathType"));
    c.algorithm = best->algo;
    return best->algo;
  }

  absl::StatusOr<Prepared> PrepareConv(const CudnnConvParams& p) {
    PreparedConv c;
    c.params = p;
    RETURN_IF_ERROR(MakeTensor(c.x, p.x, p.data));
    RETURN_IF_ERROR(MakeTensor(c.y, p.y, p.data));
    if (p.bias) {
      RETURN_IF_ERROR(MakeTensor(c.bias, CudnnDims{1, p.y.c, 1, 1}, p.data));
    }
    RETURN_IF_ERROR(Check(cudnnCreateFilterDescriptor(c.w.receive()),
                          "cudnnCreateFilterDescriptor"));
    RETURN_IF_ERROR(Check(cudnnSetFilter4dDescriptor(c.w.get(), ToCudnn(p.data),
                                                     CUDNN_TENSOR_NCHW, p.w.n,
                                                     p.w.c, p.w.h, p.w.w),
                          "cudnnSetFilter4dDescriptor"));
    RETURN_IF_ERROR(Check(cudnnCreateConvolutionDescriptor(c.conv.receive()),
                          "cudnnCreateConvolutionDescriptor"));
    RETURN_IF_ERROR(Check(cudnnSetConvolution2dDescriptor(
                              c.conv.get(), p.pad_h, p.pad_w, p.stride_h,
                              p.stride_w, p.dilation_h, p.dilation_w,
                              CUDNN_CROSS_CORRELATION, ToCudnn(p.compute)),
                          "cudnnSetConvolution2dDescriptor"));
    RETURN_IF_ERROR(Check(cudnnSetConvolutionGroupCount(c.conv.get(), p.groups),
                          "cudnnSetConvolutionGroupCount"));
    RETURN_IF_ERROR(
        Check(cudnnSetConvolutionMathType(c.conv.get(), ToCudnn(p.math)),
              "cudnnSetConvolutionMathType"));
    absl::MutexLock lock(&mu_);
    switch (p.pass) {
      case ConvPass::kForward: {
        cudnnConvolutionFwdAlgoPerf_t perf[CUDNN_CONVOLUTION_FWD_ALGO_COUNT];
        int count = 0;
        RETURN_IF_ERROR(
            Check(cudnnGetConvolutionForwardAlgorithm_v7(
                      handle_, c.x.get(), c.w.get(), c.conv.get(), c.y.get(),
                      CUDNN_CONVOLUTION_FWD_ALGO_COUNT, &count, perf),
                  "cudnnGetConvolutionForwardAlgorithm_v7"));
        ASSIGN_OR_RETURN(const auto algo, Adopt(perf, count, "forward", c));
        RETURN_IF_ERROR(Check(cudnnGetConvolutionForwardWorkspaceSize(
                                  handle_, c.x.get(), c.w.get(), c.conv.get(),
                                  c.y.get(), algo, &c.workspace),
                              "cudnnGetConvolutionForwardWorkspaceSize"));
        break;
      }
      case ConvPass::kBackwardData: {
        cudnnConvolutionBwdDataAlgoPerf_t
            perf[CUDNN_CONVOLUTION_BWD_DATA_ALGO_COUNT];
        int count = 0;
        RETURN_IF_ERROR(
            Check(cudnnGetConvolutionBackwardDataAlgorithm_v7(
                      handle_, c.w.get(), c.y.get(), c.conv.get(), c.x.get(),
                      CUDNN_CONVOLUTION_BWD_DATA_ALGO_COUNT, &count, perf),
                  "cudnnGetConvolutionBackwardDataAlgorithm_v7"));
        ASSIGN_OR_RETURN(const auto algo,
                         Adopt(perf, count, "backward-data", c));
        RETURN_IF_ERROR(Check(cudnnGetConvolutionBackwardDataWorkspaceSize(
                                  handle_, c.w.get(), c.y.get(), c.conv.get(),
                                  c.x.get(), algo, &c.workspace),
                              "cudnnGetConvolutionBackwardDataWorkspaceSize"));
        break;
      }
      case ConvPass::kBackwardWeights: {
        cudnnConvolutionBwdFilterAlgoPerf_t
            perf[CUDNN_CONVOLUTION_BWD_FILTER_ALGO_COUNT];
        int count = 0;
        RETURN_IF_ERROR(
            Check(cudnnGetConvolutionBackwardFilterAlgorithm_v7(
                      handle_, c.x.get(), c.y.get(), c.conv.get(), c.w.get(),
                      CUDNN_CONVOLUTION_BWD_FILTER_ALGO_COUNT, &count, perf),
                  "cudnnGetConvolutionBackwardFilterAlgorithm_v7"));
        ASSIGN_OR_RETURN(const auto algo,
                         Adopt(perf, count, "backward-weights", c));
        RETURN_IF_ERROR(
            Check(cudnnGetConvolutionBackwardFilterWorkspaceSize(
                      handle_, c.x.get(), c.y.get(), c.conv.get(), c.w.get(),
                      algo, &c.workspace),
                  "cudnnGetConvolutionBackwardFilterWorkspaceSize"));
        break;
      }
    }
    return Prepared(std::move(c));
  }

  absl::StatusOr<Prepared> PreparePool(const CudnnPoolParams& p) const {
    PreparedPool pool;
    pool.params = p;
    RETURN_IF_ERROR(MakeTensor(pool.x, p.x, p.data));
    RETURN_IF_ERROR(MakeTensor(pool.y, p.y, p.data));
    RETURN_IF_ERROR(Check(cudnnCreatePoolingDescriptor(pool.pool.receive()),
                          "cudnnCreatePoolingDescriptor"));
    // NaN propagates through max pooling, as in PyTorch.
    RETURN_IF_ERROR(Check(
        cudnnSetPooling2dDescriptor(pool.pool.get(), ToCudnn(p.mode),
                                    CUDNN_PROPAGATE_NAN, p.window_h, p.window_w,
                                    p.pad_h, p.pad_w, p.stride_h, p.stride_w),
        "cudnnSetPooling2dDescriptor"));
    return Prepared(std::move(pool));
  }

  // Inputs as Conv2dArgs' passes: (x, w, bias), (dy, w), (x, dy).
  absl::Status RunConv(const PreparedConv& c, const void* in0, const void* in1,
                       const void* bias, void* workspace,
                       size_t workspace_bytes, void* out)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    const float one_f = 1, zero_f = 0;
    const double one_d = 1, zero_d = 0;
    const bool d = c.params.double_scalars;
    const void* alpha = d ? static_cast<const void*>(&one_d) : &one_f;
    const void* beta = d ? static_cast<const void*>(&zero_d) : &zero_f;
    switch (c.params.pass) {
      case ConvPass::kForward:
        RETURN_IF_ERROR(Check(
            cudnnConvolutionForward(
                handle_, alpha, c.x.get(), in0, c.w.get(), in1, c.conv.get(),
                static_cast<cudnnConvolutionFwdAlgo_t>(c.algorithm), workspace,
                workspace_bytes, beta, c.y.get(), out),
            "cudnnConvolutionForward"));
        if (!c.params.bias) return absl::OkStatus();
        // y = 1 * bias (broadcast over n, h, w) + 1 * y.
        return Check(cudnnAddTensor(handle_, alpha, c.bias.get(), bias, alpha,
                                    c.y.get(), out),
                     "cudnnAddTensor (conv2d's bias)");
      case ConvPass::kBackwardData:
        return Check(
            cudnnConvolutionBackwardData(
                handle_, alpha, c.w.get(), in1, c.y.get(), in0, c.conv.get(),
                static_cast<cudnnConvolutionBwdDataAlgo_t>(c.algorithm),
                workspace, workspace_bytes, beta, c.x.get(), out),
            "cudnnConvolutionBackwardData");
      case ConvPass::kBackwardWeights:
        return Check(
            cudnnConvolutionBackwardFilter(
                handle_, alpha, c.x.get(), in0, c.y.get(), in1, c.conv.get(),
                static_cast<cudnnConvolutionBwdFilterAlgo_t>(c.algorithm),
                workspace, workspace_bytes, beta, c.w.get(), out),
            "cudnnConvolutionBackwardFilter");
    }
    return absl::InternalError("unknown convolution pass");  // unreachable
  }

  // Inputs as Pool2dArgs': {x, x} forward, {dy, dy} backward (average).
  absl::Status RunPool(const PreparedPool& p, const void* in0, void* workspace,
                       void* out) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    const float one_f = 1, zero_f = 0;
    const double one_d = 1, zero_d = 0;
    const bool d = p.params.double_scalars;
    const void* alpha = d ? static_cast<const void*>(&one_d) : &one_f;
    const void* beta = d ? static_cast<const void*>(&zero_d) : &zero_f;
    if (p.params.pass == PoolPass::kForward) {
      return Check(cudnnPoolingForward(handle_, p.pool.get(), alpha, p.x.get(),
                                       in0, beta, p.y.get(), out),
                   "cudnnPoolingForward");
    }
    // Average pooling's (max pooling's backward is not selected:
    // CudnnComputes) reads neither y nor x: dy stands in for y, the
    // workspace for x.
    const void* y = in0;
    const void* x = workspace;
    return Check(cudnnPoolingBackward(handle_, p.pool.get(), alpha, p.y.get(),
                                      y, p.y.get(), in0, p.x.get(), x, beta,
                                      p.x.get(), out),
                 "cudnnPoolingBackward");
  }

  cudnnHandle_t handle_;
  const std::string device_;
  const int cc_major_;
  const bool allow_tf32_;
  std::string version_;
  absl::Mutex mu_;  // the handle's: every call that passes it
  Cache cache_;
};

}  // namespace

absl::StatusOr<std::unique_ptr<CudnnKernels>> CudnnKernels::Create(
    void* stream, const std::string& device, int cc_major, bool allow_tf32) {
  cudnnHandle_t handle = nullptr;
  const cudnnStatus_t st = cudnnCreate(&handle);
  if (st != CUDNN_STATUS_SUCCESS) {
    return absl::UnavailableError(
        absl::StrCat("cuDNN: cannot be loaded for ", device,
                     " (cudnnCreate: ", cudnnGetErrorString(st), ")"));
  }
  auto kernels =
      std::make_unique<CudnnKernelsImpl>(handle, device, cc_major, allow_tf32);
  RETURN_IF_ERROR(
      CudnnStatus(cudnnSetStream(handle, static_cast<cudaStream_t>(stream)),
                  device, "cudnnSetStream"));
  return std::unique_ptr<CudnnKernels>(std::move(kernels));
}

}  // namespace tensord::core::cuda

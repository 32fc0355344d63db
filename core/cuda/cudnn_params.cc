#include "core/cuda/cudnn_params.h"

#include <cstdint>
#include <limits>
#include <variant>

#include "absl/strings/str_cat.h"
#include "core/base/absl_compat.h"

namespace tensord::core::cuda {
namespace {

constexpr int64_t kMaxInt = std::numeric_limits<int32_t>::max();

bool FitsInt(int64_t a, int64_t b, int64_t c, int64_t d) {
  if (a <= 0 || b <= 0 || c <= 0 || d <= 0) return false;
  // Each factor is at most kMaxInt once the running product is.
  int64_t p = a;
  for (int64_t f : {b, c, d}) {
    if (p > kMaxInt / f) return false;
    p *= f;
  }
  return true;
}

// The window's sizes, strides, dilations and padded extents as ints.
bool WindowFitsInt(const WindowDims& d) {
  for (int64_t v : {d.kh, d.kw, d.sh, d.sw, d.dh, d.dw, d.ph, d.pw}) {
    if (v > kMaxInt) return false;
  }
  return d.h + 2 * d.ph <= kMaxInt && d.w + 2 * d.pw <= kMaxInt;
}

CudnnDims DimsOf(int64_t n, int64_t c, int64_t h, int64_t w) {
  return {static_cast<int>(n), static_cast<int>(c), static_cast<int>(h),
          static_cast<int>(w)};
}

// One output size along an axis as cuDNN counts it (floor).
int64_t CudnnOutSize(int64_t in, int64_t pad, int64_t window, int64_t stride,
                     int64_t dilation) {
  const int64_t span = dilation * (window - 1) + 1;
  if (in + 2 * pad < span) return 0;
  return (in + 2 * pad - span) / stride + 1;
}

bool ConvComputes(const Conv2dArgs& a, DType dtype, int cc_major) {
  switch (dtype) {
    case DType::kFloat32:
    case DType::kFloat64:
    case DType::kFloat16:
      break;
    case DType::kBFloat16:
      if (cc_major < 8) return false;
      break;
    default:
      return false;
  }
  const WindowDims& d = a.dims;
  if (a.groups <= 0 || d.c % a.groups != 0 || a.out_channels % a.groups != 0) {
    return false;
  }
  if (!FitsInt(d.n, d.c, d.h, d.w) ||
      !FitsInt(d.n, a.out_channels, d.oh, d.ow) ||
      !FitsInt(a.out_channels, d.c / a.groups, d.kh, d.kw)) {
    return false;
  }
  if (!WindowFitsInt(d)) return false;
  return CudnnOutSize(d.h, d.ph, d.kh, d.sh, d.dh) == d.oh &&
         CudnnOutSize(d.w, d.pw, d.kw, d.sw, d.dw) == d.ow;
}

bool PoolComputes(const Pool2dArgs& a, DType dtype) {
  if (dtype != DType::kFloat32 && dtype != DType::kFloat64 &&
      dtype != DType::kFloat16) {
    return false;
  }
  // Max pooling's backward: cuDNN finds the maximum by comparing x with y,
  // so a NaN window's gradient (PyTorch: to the last NaN) is lost, and
  // which of tied maxima gets it is not documented. Composed until a GPU
  // run shows cuDNN's choice is PyTorch's.
  if (a.algorithm == PoolAlgorithm::kMax && a.pass == PoolPass::kBackward) {
    return false;
  }
  const WindowDims& d = a.dims;
  if (d.dh != 1 || d.dw != 1) return false;
  if (d.ph >= d.kh || d.pw >= d.kw) return false;
  if (!FitsInt(d.n, d.c, d.h, d.w) || !FitsInt(d.n, d.c, d.oh, d.ow) ||
      !WindowFitsInt(d)) {
    return false;
  }
  return CudnnOutSize(d.h, d.ph, d.kh, d.sh, 1) == d.oh &&
         CudnnOutSize(d.w, d.pw, d.kw, d.sw, 1) == d.ow;
}

CudnnDataType DataTypeOf(DType dtype) {
  switch (dtype) {
    case DType::kFloat64:
      return CudnnDataType::kDouble;
    case DType::kFloat16:
      return CudnnDataType::kHalf;
    case DType::kBFloat16:
      return CudnnDataType::kBFloat16;
    default:
      return CudnnDataType::kFloat;
  }
}

}  // namespace

bool CudnnComputes(const KernelArgs& args, DType dtype, int cc_major) {
  if (const auto* conv = std::get_if<Conv2dArgs>(&args)) {
    return ConvComputes(*conv, dtype, cc_major);
  }
  if (const auto* pool = std::get_if<Pool2dArgs>(&args)) {
    return PoolComputes(*pool, dtype);
  }
  return false;
}

absl::StatusOr<CudnnConvParams> PlanCudnnConv(const Conv2dArgs& args,
                                              DType dtype, bool allow_tf32) {
  // The rule without its compute-capability bound: that is the device's.
  if (!ConvComputes(args, dtype, /*cc_major=*/1 << 20)) {
    return absl::InvalidArgumentError(absl::StrCat(
        "cuDNN cannot run conv2d of ", ToAbsl(DTypeName(dtype)), " input [",
        args.dims.n, ", ", args.dims.c, ", ", args.dims.h, ", ", args.dims.w,
        "], ", args.out_channels, " output channels, groups ", args.groups,
        ", window ", args.dims.kh, "x", args.dims.kw));
  }
  const WindowDims& d = args.dims;
  CudnnConvParams p;
  p.pass = args.pass;
  p.bias = args.pass == ConvPass::kForward && args.bias;
  p.x = DimsOf(d.n, d.c, d.h, d.w);
  p.y = DimsOf(d.n, args.out_channels, d.oh, d.ow);
  p.w = DimsOf(args.out_channels, d.c / args.groups, d.kh, d.kw);
  p.pad_h = static_cast<int>(d.ph);
  p.pad_w = static_cast<int>(d.pw);
  p.stride_h = static_cast<int>(d.sh);
  p.stride_w = static_cast<int>(d.sw);
  p.dilation_h = static_cast<int>(d.dh);
  p.dilation_w = static_cast<int>(d.dw);
  p.groups = static_cast<int>(args.groups);
  p.data = DataTypeOf(dtype);
  switch (dtype) {
    case DType::kFloat64:
      p.compute = CudnnDataType::kDouble;
      p.math = CudnnMath::kDefault;
      p.double_scalars = true;
      break;
    case DType::kFloat16:
    case DType::kBFloat16:
      p.compute = CudnnDataType::kFloat;
      p.math = CudnnMath::kTensorOp;
      break;
    default:
      p.compute = CudnnDataType::kFloat;
      // Depthwise convolutions stay exact whatever allow_tf32 says: PyTorch
      // runs them on its own float32 kernel, not on tensor cores.
      p.math = allow_tf32 && !(args.groups > 1 && args.groups == d.c)
                   ? CudnnMath::kDefault
                   : CudnnMath::kFma;
      break;
  }
  return p;
}

absl::StatusOr<CudnnPoolParams> PlanCudnnPool(const Pool2dArgs& args,
                                              DType dtype) {
  if (!PoolComputes(args, dtype)) {
    const WindowDims& d = args.dims;
    return absl::InvalidArgumentError(absl::StrCat(
        "cuDNN cannot run pooling of ", ToAbsl(DTypeName(dtype)), " input [",
        d.n, ", ", d.c, ", ", d.h, ", ", d.w, "], window ", d.kh, "x", d.kw,
        ", stride ", d.sh, "x", d.sw, ", padding ", d.ph, "x", d.pw,
        ", dilation ", d.dh, "x", d.dw, " to ", d.oh, "x", d.ow));
  }
  const WindowDims& d = args.dims;
  CudnnPoolParams p;
  p.pass = args.pass;
  switch (args.algorithm) {
    case PoolAlgorithm::kMax:
      p.mode = CudnnPoolMode::kMax;
      break;
    case PoolAlgorithm::kAvgIncludePad:
      p.mode = CudnnPoolMode::kAverageIncludePadding;
      break;
    case PoolAlgorithm::kAvgExcludePad:
      p.mode = CudnnPoolMode::kAverageExcludePadding;
      break;
  }
  p.x = DimsOf(d.n, d.c, d.h, d.w);
  p.y = DimsOf(d.n, d.c, d.oh, d.ow);
  p.window_h = static_cast<int>(d.kh);
  p.window_w = static_cast<int>(d.kw);
  p.pad_h = static_cast<int>(d.ph);
  p.pad_w = static_cast<int>(d.pw);
  p.stride_h = static_cast<int>(d.sh);
  p.stride_w = static_cast<int>(d.sw);
  p.data = DataTypeOf(dtype);
  p.double_scalars = dtype == DType::kFloat64;
  if (args.pass == PoolPass::kBackward) {
    const uint64_t element = DTypeSize(dtype);
    // x's stand-in (only average pooling's backward is selected).
    p.workspace_bytes = element * static_cast<uint64_t>(d.n * d.c * d.h * d.w);
  }
  return p;
}

}  // namespace tensord::core::cuda

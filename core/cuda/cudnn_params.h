// How the CUDA device runs conv2d and 2-d pooling on cuDNN, as plain data:
// the device's kernel-selection rule (which calls cuDNN computes as PyTorch
// does) and every argument of the descriptors a call is described by. This
// header names no CUDA or cuDNN type: its enums are mapped onto cuDNN's
// constants by core/cuda/cudnn_kernels.cc, the one file that calls cuDNN,
// so the rule and the parameters are unit-tested in every build
// (tests/core/cuda_host_logic_test.cc), GPU or not.
//
// The calls (core/base/device.h's Conv2dArgs and Pool2dArgs):
//   conv2d forward            cudnnConvolutionForward(x, w) -> y, then
//                             cudnnAddTensor(bias) where it has one
//   conv2d backward data      cudnnConvolutionBackwardData(w, dy) -> dx
//   conv2d backward weights   cudnnConvolutionBackwardFilter(x, dy) -> dw
//   pooling forward           cudnnPoolingForward(x) -> y
//   pooling backward          cudnnPoolingBackward(y, dy, x) -> dx
// Max pooling's backward is not selected (CudnnComputes); average
// pooling's reads neither y nor x, so dy stands in for y and an x-sized
// workspace region for x (Pool2dArgs' backward gets no x).
//
// Thread-safety: pure functions.
#ifndef TENSORD_CORE_CUDA_CUDNN_PARAMS_H_
#define TENSORD_CORE_CUDA_CUDNN_PARAMS_H_

#include <cstdint>

#include "absl/status/statusor.h"
#include "core/base/device.h"
#include "core/base/dtype.h"

namespace tensord::core::cuda {

// cudnnDataType_t: CUDNN_DATA_FLOAT, _DOUBLE, _HALF, _BFLOAT16.
enum class CudnnDataType { kFloat, kDouble, kHalf, kBFloat16 };
// cudnnMathType_t: CUDNN_DEFAULT_MATH (tensor cores where the data type
// allows; TF32 for float on Ampere and later), CUDNN_TENSOR_OP_MATH,
// CUDNN_FMA_MATH (no tensor cores: exact float).
enum class CudnnMath { kDefault, kTensorOp, kFma };
// cudnnPoolingMode_t: CUDNN_POOLING_MAX_DETERMINISTIC,
// CUDNN_POOLING_AVERAGE_COUNT_INCLUDE_PADDING, _EXCLUDE_PADDING.
enum class CudnnPoolMode {
  kMax,
  kAverageIncludePadding,
  kAverageExcludePadding
};

// [n, c, h, w] of a plain (NCHW, packed) tensor, as cuDNN's ints.
struct CudnnDims {
  int n = 1, c = 1, h = 1, w = 1;
};

struct CudnnConvParams {
  ConvPass pass = ConvPass::kForward;
  CudnnDims x, y;  // the input (and its gradient), the output (and its)
  CudnnDims w;     // the filter: [out_channels, c / groups, kh, kw]
  int pad_h = 0, pad_w = 0, stride_h = 1, stride_w = 1, dilation_h = 1,
      dilation_w = 1;
  int groups = 1;
  CudnnDataType data = CudnnDataType::kFloat;     // every tensor's
  CudnnDataType compute = CudnnDataType::kFloat;  // the convolution's
  CudnnMath math = CudnnMath::kDefault;
  // alpha and beta are host doubles for double data, floats otherwise.
  bool double_scalars = false;
  // The forward adds the bias [1, out_channels, 1, 1] after the
  // convolution (cudnnAddTensor).
  bool bias = false;
};

struct CudnnPoolParams {
  PoolPass pass = PoolPass::kForward;
  CudnnPoolMode mode = CudnnPoolMode::kMax;
  CudnnDims x, y;
  int window_h = 1, window_w = 1, pad_h = 0, pad_w = 0, stride_h = 1,
      stride_w = 1;
  CudnnDataType data = CudnnDataType::kFloat;
  bool double_scalars = false;
  // The workspace the call needs: average pooling's backward, x's
  // stand-in; the forward, none.
  uint64_t workspace_bytes = 0;
};

// The kernel-selection rule: whether cuDNN computes what PyTorch does for
// `args` (a Conv2dArgs or Pool2dArgs) in `dtype` on a GPU of compute
// capability `cc_major`.x. conv2d: float32, float64, float16, and bfloat16
// from compute capability 8.0, any stride, padding, dilation and groups.
// Pooling: float32, float64 and float16 without dilation (cuDNN's has
// none), with padding below the window and no ceil-mode window past
// cuDNN's floor count (cuDNN sizes the output itself); max pooling's
// backward stays composed (cuDNN compares x with y: a NaN window's
// gradient would be lost, and its choice among tied maxima is not
// documented). Neither: a size of
// 0, or a tensor of more than 2^31 - 1 elements (cuDNN's int sizes).
bool CudnnComputes(const KernelArgs& args, DType dtype, int cc_major);

// The descriptors of a call CudnnComputes says cuDNN runs. float32 on
// tensor cores (TF32) only when `allow_tf32` and not depthwise (exact FMA
// math otherwise, as PyTorch's own depthwise kernel);
// float16 and bfloat16 compute in float32 on tensor cores; float64 in
// float64. INVALID_ARGUMENT naming the call when cuDNN cannot take it.
absl::StatusOr<CudnnConvParams> PlanCudnnConv(const Conv2dArgs& args,
                                              DType dtype, bool allow_tf32);
absl::StatusOr<CudnnPoolParams> PlanCudnnPool(const Pool2dArgs& args,
                                              DType dtype);

}  // namespace tensord::core::cuda

#endif  // TENSORD_CORE_CUDA_CUDNN_PARAMS_H_

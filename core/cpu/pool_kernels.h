// The CPU device's 2-d max and average pooling (KernelKind::kPool2d),
// computed directly on NCHW tensors in one pass over each plane: PyTorch's
// own CPU definitions (ATen's max_pool2d_with_indices and avg_pool2d),
// every window class included -- strides, padding, dilation (max), ceil
// mode's last window, the divisor with or without the padding.
//
// These are tensord's own loops, not oneDNN's pooling: on seed 001's
// shapes oneDNN 2.6's pooling over plain NCHW tensors took 0.30 ms forward
// and 1.6 ms backward (the forward again for its indices, then the
// scatter) at batch 64 on this project's 2-core machine, where one direct
// pass takes a tenth of that (docs/performance.md).
//
// Max pooling: each window's value is its first maximum in row-major
// order, a NaN winning over every number (the last NaN, as ATen's loop
// keeps replacing on NaN); its backward finds that element again from x
// and adds the gradient there. Average pooling: the sum over the window's
// elements inside the input, divided by the window's size clipped to the
// padded input (padding counted; ATen's pool_size) or by the elements
// inside (padding not counted); a window wholly in the padding is 0.
//
// Thread-safety: pure functions of their arguments.
#ifndef TENSORD_CORE_CPU_POOL_KERNELS_H_
#define TENSORD_CORE_CPU_POOL_KERNELS_H_

#include "absl/status/status.h"
#include "core/base/device.h"

namespace tensord::core::cpu {

// Pool2dArgs' passes in `dtype` (floating): forward, `in` is x and `out`
// [n, c, oh, ow]; backward, `in` is the output's gradient, `x` the input
// (max pooling; average pooling reads none) and `out` x's gradient
// [n, c, h, w]. FAILED_PRECONDITION for a non-floating dtype.
absl::Status Pool2dKernel(const Pool2dArgs& args, DType dtype, const void* in,
                          const void* x, void* out);

}  // namespace tensord::core::cpu

#endif  // TENSORD_CORE_CPU_POOL_KERNELS_H_

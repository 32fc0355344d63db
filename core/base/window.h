// The geometry of a 2-d sliding window over an [n, c, h, w] tensor: what
// conv2d and the pooling ops unfold into columns (im2col) before a matrix
// product or a reduction. Plain data with no Abseil, so the CUDA kernels
// (compiled by nvcc) take the very struct the planner fills.
// Thread-safety: plain data.
#ifndef TENSORD_CORE_BASE_WINDOW_H_
#define TENSORD_CORE_BASE_WINDOW_H_

#include <cstdint>

namespace tensord::core {

// Window (i, j) at output position (y, x) reads input row
// y * sh - ph + i * dh and column x * sw - pw + j * dw; rows and columns
// outside [0, h) x [0, w) are padding.
struct WindowDims {
  int64_t n = 1, c = 1, h = 1, w = 1;  // the input, [n, c, h, w]
  int64_t kh = 1, kw = 1;              // window size
  int64_t sh = 1, sw = 1;              // stride
  int64_t ph = 0, pw = 0;              // zero-based padding on each side
  int64_t dh = 1, dw = 1;              // dilation
  int64_t oh = 1, ow = 1;              // windows down and across
};

}  // namespace tensord::core

#endif  // TENSORD_CORE_BASE_WINDOW_H_

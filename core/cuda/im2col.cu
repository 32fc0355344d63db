#include "core/cuda/im2col.cuh"
#include "core/cuda/kernel_common.cuh"

namespace tensord::core::cuda {
namespace {

template <typename E>
__global__ void Im2ColKernel(WindowDims d, E pad, const E* in, E* out,
                             int64_t numel) {
  for (int64_t t = GridStart(); t < numel; t += GridStep()) {
    int64_t rest = t;
    const int64_t x = rest % d.ow;
    rest /= d.ow;
    const int64_t y = rest % d.oh;
    rest /= d.oh;
    const int64_t b = rest % d.n;
    rest /= d.n;
    const int64_t j = rest % d.kw;
    rest /= d.kw;
    const int64_t i = rest % d.kh;
    const int64_t c = rest / d.kh;
    const int64_t row = y * d.sh - d.ph + i * d.dh;
    const int64_t col = x * d.sw - d.pw + j * d.dw;
    out[t] = row >= 0 && row < d.h && col >= 0 && col < d.w
                 ? in[((b * d.c + c) * d.h + row) * d.w + col]
                 : pad;
  }
}

template <typename E>
cudaError_t Launch(const WindowDims& d, uint64_t pad_bits, const void* in,
                   void* out, int64_t numel, cudaStream_t stream) {
  E pad;
  memcpy(&pad, &pad_bits, sizeof(E));  // little-endian: the low bytes
  Im2ColKernel<E><<<GridBlocks(numel), kBlockThreads, 0, stream>>>(
      d, pad, static_cast<const E*>(in), static_cast<E*>(out), numel);
  return cudaGetLastError();
}

}  // namespace

cudaError_t LaunchIm2Col(size_t elem_size, const WindowDims& d,
                         uint64_t pad_bits, const void* in, void* out,
                         cudaStream_t stream) {
  const int64_t numel = d.c * d.kh * d.kw * d.n * d.oh * d.ow;
  if (numel <= 0) return cudaSuccess;
  switch (elem_size) {
    case 1:
      return Launch<uint8_t>(d, pad_bits, in, out, numel, stream);
    case 2:
      return Launch<uint16_t>(d, pad_bits, in, out, numel, stream);
    case 4:
      return Launch<uint32_t>(d, pad_bits, in, out, numel, stream);
    case 8:
      return Launch<uint64_t>(d, pad_bits, in, out, numel, stream);
    default:
      return cudaErrorInvalidValue;
  }
}

}  // namespace tensord::core::cuda

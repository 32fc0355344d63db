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

template <typename T>
__global__ void Col2ImKernel(WindowDims d, const T* cols, T* out,
                             int64_t numel) {
  for (int64_t t = GridStart(); t < numel; t += GridStep()) {
    int64_t rest = t;
    const int64_t x = rest % d.w;
    rest /= d.w;
    const int64_t y = rest % d.h;
    rest /= d.h;
    const int64_t c = rest % d.c;
    const int64_t b = rest / d.c;
    Compute<T> acc = 0;
    for (int64_t i = 0; i < d.kh; ++i) {
      const int64_t rows = y + d.ph - i * d.dh;
      if (rows < 0 || rows % d.sh != 0 || rows / d.sh >= d.oh) continue;
      const int64_t oy = rows / d.sh;
      for (int64_t j = 0; j < d.kw; ++j) {
        const int64_t at = x + d.pw - j * d.dw;
        if (at < 0 || at % d.sw != 0 || at / d.sw >= d.ow) continue;
        const int64_t ox = at / d.sw;
        acc += Load<T>(
            cols[((((c * d.kh + i) * d.kw + j) * d.n + b) * d.oh + oy) * d.ow +
                 ox]);
      }
    }
    out[t] = Store<T>(acc);
  }
}

}  // namespace

cudaError_t LaunchCol2Im(ElemType type, const WindowDims& d, const void* cols,
                         void* out, cudaStream_t stream) {
  const int64_t numel = d.n * d.c * d.h * d.w;
  bool floating = false;
  const bool known = DispatchElem(type, [&](auto tag) {
    using T = typename decltype(tag)::type;
    if constexpr (kIsFloatType<T>) {
      floating = true;
      if (numel <= 0) return;
      Col2ImKernel<T><<<GridBlocks(numel), kBlockThreads, 0, stream>>>(
          d, static_cast<const T*>(cols), static_cast<T*>(out), numel);
    }
  });
  if (!known || !floating) return cudaErrorInvalidValue;
  return numel > 0 ? cudaGetLastError() : cudaSuccess;
}

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

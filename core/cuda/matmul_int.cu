#include "core/cuda/kernel_common.cuh"
#include "core/cuda/matmul_int.cuh"

namespace tensord::core::cuda {
namespace {

constexpr int kTile = 16;

// Classic shared-memory tiling; one 16x16 tile of the output per block,
// batches over gridDim.z with a stride loop.
template <typename T>
__global__ void IntMatMulKernel(int64_t batch, int64_t m, int64_t n, int64_t k,
                                const T* a, int64_t a_stride, const T* b,
                                int64_t b_stride, T* out, int64_t out_stride) {
  using U = scalar::Unsigned<T>;  // wrapping, as scalar::Add and Mul
  __shared__ U as[kTile][kTile];
  __shared__ U bs[kTile][kTile];
  const int64_t row = static_cast<int64_t>(blockIdx.y) * kTile + threadIdx.y;
  const int64_t col = static_cast<int64_t>(blockIdx.x) * kTile + threadIdx.x;
  for (int64_t p = blockIdx.z; p < batch; p += gridDim.z) {
    const T* pa = a + p * a_stride;
    const T* pb = b + p * b_stride;
    U acc = 0;
    for (int64_t t = 0; t < k; t += kTile) {
      const int64_t ka = t + threadIdx.x, kb = t + threadIdx.y;
      as[threadIdx.y][threadIdx.x] =
          row < m && ka < k ? static_cast<U>(pa[row * k + ka]) : U(0);
      bs[threadIdx.y][threadIdx.x] =
          kb < k && col < n ? static_cast<U>(pb[kb * n + col]) : U(0);
      __syncthreads();
      for (int j = 0; j < kTile; ++j)
        acc += as[threadIdx.y][j] * bs[j][threadIdx.x];
      __syncthreads();
    }
    if (row < m && col < n)
      out[p * out_stride + row * n + col] = static_cast<T>(acc);
  }
}

}  // namespace

cudaError_t LaunchIntMatMul(ElemType type, int64_t batch, int64_t m, int64_t n,
                            int64_t k, const void* a, int64_t a_stride,
                            const void* b, int64_t b_stride, void* out,
                            int64_t out_stride, cudaStream_t stream) {
  if (batch <= 0 || m <= 0 || n <= 0) return cudaSuccess;
  const int64_t gx = (n + kTile - 1) / kTile, gy = (m + kTile - 1) / kTile;
  if (gx > 0x7fffffff || gy > 65535) return cudaErrorInvalidValue;
  const dim3 grid(static_cast<unsigned int>(gx), static_cast<unsigned int>(gy),
                  static_cast<unsigned int>(batch < 65535 ? batch : 65535));
  const dim3 block(kTile, kTile);
  if (type == ElemType::kI32) {
    IntMatMulKernel<int32_t><<<grid, block, 0, stream>>>(
        batch, m, n, k, static_cast<const int32_t*>(a), a_stride,
        static_cast<const int32_t*>(b), b_stride, static_cast<int32_t*>(out),
        out_stride);
  } else if (type == ElemType::kI64) {
    IntMatMulKernel<int64_t><<<grid, block, 0, stream>>>(
        batch, m, n, k, static_cast<const int64_t*>(a), a_stride,
        static_cast<const int64_t*>(b), b_stride, static_cast<int64_t*>(out),
        out_stride);
  } else {
    return cudaErrorInvalidValue;
  }
  return cudaGetLastError();
}

}  // namespace tensord::core::cuda
